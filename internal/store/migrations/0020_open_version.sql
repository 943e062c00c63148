-- The open board's version, for the router: every write that puts a task
-- into, changes one in, or takes one out of the set idle agents are woken
-- for (OPEN, or DONE and waiting for its review) moves n, in the write's
-- own transaction. Reading it is one row's read; the count and maxima it
-- replaces read every open task, thousands in a backlog, on every change
-- of the board (on PostgreSQL the database's busiest statement).
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
  OR OLD.state = 'OPEN' OR (OLD.state = 'DONE' AND OLD.review_state = 'reviewing')
BEGIN
    UPDATE board_version SET n = n + 1 WHERE id = 1;
END;

CREATE TRIGGER board_version_delete AFTER DELETE ON tasks
WHEN OLD.state = 'OPEN' OR (OLD.state = 'DONE' AND OLD.review_state = 'reviewing')
BEGIN
    UPDATE board_version SET n = n + 1 WHERE id = 1;
END;
