-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- The open board's version, for the router: every write that can give an
-- idle agent work moves n, in the write's own transaction. That is a task
-- put into or changed in the set idle agents are woken for (OPEN, or DONE
-- and waiting for its review), and a task CLOSED that others depend on
-- (they may be OPEN, waiting for it). A task leaving the set otherwise (a
-- claim, a cancel) gives no one work and moves nothing: after a claim
-- every router would count the claimable tasks again for nothing. Reading
-- it is one row's read; the count and maxima it replaces read every open
-- task, thousands in a backlog, on every change of the board (here the
-- database's busiest statement).
-- The triggers also tell the daemons listening on swarmd_changes ('8' is
-- store.ChangedOpen), so that on PostgreSQL a router reads neither the
-- version nor the board after commits that gave no one work (a claim, a
-- task's start, a session's rows, its events).
CREATE TABLE board_version (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    n  BIGINT NOT NULL
);
INSERT INTO board_version (id, n) VALUES (1, 0);

CREATE FUNCTION board_version_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE board_version SET n = n + 1 WHERE id = 1;
    PERFORM pg_notify('swarmd_changes', '8');
    RETURN NULL;
END
$$;

-- A trigger's WHEN takes no subquery here: whether anyone depends on the
-- task just CLOSED is asked in the function.
CREATE FUNCTION board_version_bump_depended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM task_deps WHERE dep_id = NEW.id) THEN
        UPDATE board_version SET n = n + 1 WHERE id = 1;
        PERFORM pg_notify('swarmd_changes', '8');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER board_version_insert AFTER INSERT ON tasks FOR EACH ROW
WHEN (NEW.state = 'OPEN' OR (NEW.state = 'DONE' AND NEW.review_state = 'reviewing'))
EXECUTE FUNCTION board_version_bump();

CREATE TRIGGER board_version_update AFTER UPDATE ON tasks FOR EACH ROW
WHEN (NEW.state = 'OPEN' OR (NEW.state = 'DONE' AND NEW.review_state = 'reviewing'))
EXECUTE FUNCTION board_version_bump();

CREATE TRIGGER board_version_closed AFTER UPDATE ON tasks FOR EACH ROW
WHEN (NEW.state = 'CLOSED' AND OLD.state <> 'CLOSED')
EXECUTE FUNCTION board_version_bump_depended();
