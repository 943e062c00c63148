-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- How many tasks are over (CLOSED, CANCELLED), kept by triggers on tasks.
-- The dashboards show every state's count at each change of the board
-- (up to five times a second while one is watched): counted, the tasks
-- over were an index read of every task ever finished.
CREATE TABLE tasks_over_count (
    state TEXT   PRIMARY KEY,
    n     BIGINT NOT NULL
);
INSERT INTO tasks_over_count (state, n)
VALUES ('CLOSED', (SELECT COUNT(*) FROM tasks WHERE state = 'CLOSED')),
       ('CANCELLED', (SELECT COUNT(*) FROM tasks WHERE state = 'CANCELLED'));

CREATE FUNCTION tasks_over_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        UPDATE tasks_over_count SET n = n + 1 WHERE state = NEW.state;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE tasks_over_count SET n = n - 1 WHERE state = OLD.state;
    END IF;
    RETURN NULL;
END
$$;

-- Deferred to the commit: the count's row is locked by every transaction
-- that ends a task, for its commit alone, not from the task's update on
-- (the daemons of a swarm end tasks side by side).
CREATE CONSTRAINT TRIGGER tasks_over_moved AFTER UPDATE OF state ON tasks
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
WHEN (NEW.state IS DISTINCT FROM OLD.state AND (NEW.state IN ('CLOSED', 'CANCELLED') OR OLD.state IN ('CLOSED', 'CANCELLED')))
EXECUTE FUNCTION tasks_over_count();

CREATE CONSTRAINT TRIGGER tasks_over_added AFTER INSERT ON tasks
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
WHEN (NEW.state IN ('CLOSED', 'CANCELLED'))
EXECUTE FUNCTION tasks_over_count();

CREATE CONSTRAINT TRIGGER tasks_over_removed AFTER DELETE ON tasks
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
WHEN (OLD.state IN ('CLOSED', 'CANCELLED'))
EXECUTE FUNCTION tasks_over_count();
