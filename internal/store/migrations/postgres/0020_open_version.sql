-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- The open board's version, for the router: every write that puts a task
-- into, changes one in, or takes one out of the set idle agents are woken
-- for (OPEN, or DONE and waiting for its review) moves n, in the write's
-- own transaction. Reading it is one row's read; the count and maxima it
-- replaces read every open task, thousands in a backlog, on every change
-- of the board (here the database's busiest statement).
-- The trigger also tells the daemons listening on swarmd_changes that the
-- set moved ('8' is store.ChangedOpen), so that on PostgreSQL a router
-- reads neither the version nor the board after commits that left the set
-- alone (a task's start, a session's rows, its events).
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

CREATE TRIGGER board_version_insert AFTER INSERT ON tasks FOR EACH ROW
WHEN (NEW.state = 'OPEN' OR (NEW.state = 'DONE' AND NEW.review_state = 'reviewing'))
EXECUTE FUNCTION board_version_bump();

CREATE TRIGGER board_version_update AFTER UPDATE ON tasks FOR EACH ROW
WHEN (NEW.state = 'OPEN' OR (NEW.state = 'DONE' AND NEW.review_state = 'reviewing')
  OR OLD.state = 'OPEN' OR (OLD.state = 'DONE' AND OLD.review_state = 'reviewing'))
EXECUTE FUNCTION board_version_bump();

CREATE TRIGGER board_version_delete AFTER DELETE ON tasks FOR EACH ROW
WHEN (OLD.state = 'OPEN' OR (OLD.state = 'DONE' AND OLD.review_state = 'reviewing'))
EXECUTE FUNCTION board_version_bump();
