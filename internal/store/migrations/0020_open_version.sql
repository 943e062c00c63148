-- The open board's version, for the router: every write that can give an
-- idle agent work moves n, in the write's own transaction. That is a task
-- put into or changed in the set idle agents are woken for (OPEN, or DONE
-- and waiting for its review), and a task CLOSED that others depend on
-- (they may be OPEN, waiting for it). A task leaving the set otherwise (a
-- claim, a cancel) gives no one work and moves nothing: after a claim
-- every router would count the claimable tasks again for nothing. Reading
-- it is one row's read; the count and maxima it replaces read every open
-- task, thousands in a backlog, on every change of the board (on
-- PostgreSQL the database's busiest statement).
CREATE TABLE board_version (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n  INTEGER NOT NULL
);
INSERT INTO board_version (id, n) VALUES (1, 0);

CREATE TRIGGER board_version_insert AFTER INSERT ON tasks
WHEN NEW.state = 'OPEN' OR (NEW.state = 'DONE' AND NEW.review_state = 'reviewing')
BEGIN
    UPDATE board_version SET n = n + 1 WHERE id = 1;
END;

CREATE TRIGGER board_version_update AFTER UPDATE ON tasks
WHEN NEW.state = 'OPEN' OR (NEW.state = 'DONE' AND NEW.review_state = 'reviewing')
  OR (NEW.state = 'CLOSED' AND OLD.state <> 'CLOSED' AND EXISTS (SELECT 1 FROM task_deps WHERE dep_id = NEW.id))
BEGIN
    UPDATE board_version SET n = n + 1 WHERE id = 1;
END;
