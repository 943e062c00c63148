-- How many tasks are over (CLOSED, CANCELLED), kept by triggers on tasks.
-- The dashboards show every state's count at each change of the board
-- (up to five times a second while one is watched): counted, the tasks
-- over were an index read of every task ever finished, 12 ms at 200,000.
CREATE TABLE tasks_over_count (
    state TEXT    PRIMARY KEY,
    n     INTEGER NOT NULL
) STRICT;
INSERT INTO tasks_over_count (state, n)
VALUES ('CLOSED', (SELECT COUNT(*) FROM tasks WHERE state = 'CLOSED')),
       ('CANCELLED', (SELECT COUNT(*) FROM tasks WHERE state = 'CANCELLED'));

-- A row of tasks_over_count for each state over: the other states' updates
-- change no row.
CREATE TRIGGER tasks_over_moved AFTER UPDATE OF state ON tasks
WHEN NEW.state IS NOT OLD.state AND (NEW.state IN ('CLOSED', 'CANCELLED') OR OLD.state IN ('CLOSED', 'CANCELLED'))
BEGIN
    UPDATE tasks_over_count SET n = n + 1 WHERE state = NEW.state;
    UPDATE tasks_over_count SET n = n - 1 WHERE state = OLD.state;
END;

CREATE TRIGGER tasks_over_added AFTER INSERT ON tasks
WHEN NEW.state IN ('CLOSED', 'CANCELLED')
BEGIN
    UPDATE tasks_over_count SET n = n + 1 WHERE state = NEW.state;
END;

CREATE TRIGGER tasks_over_removed AFTER DELETE ON tasks
WHEN OLD.state IN ('CLOSED', 'CANCELLED')
BEGIN
    UPDATE tasks_over_count SET n = n - 1 WHERE state = OLD.state;
END;
