-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- How many tasks wait for each task (task_deps rows naming it as dep_id),
-- kept by triggers on task_deps. A task's close asked "does anyone depend
-- on it?" with an EXISTS on task_deps (the row read of every move, and the
-- trigger that moves the open board's version). With a backlog behind one
-- task (1,500 tasks after one gate), the generic plan of that EXISTS,
-- which knows the column's statistics, took it to match at once and read
-- all of task_deps on every call: 0.17 ms each, three times a task. The
-- count is read with the row.
ALTER TABLE tasks ADD COLUMN dependents BIGINT NOT NULL DEFAULT 0;
UPDATE tasks SET dependents = (SELECT COUNT(*) FROM task_deps WHERE dep_id = tasks.id)
WHERE id IN (SELECT dep_id FROM task_deps);

CREATE FUNCTION task_deps_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE tasks SET dependents = dependents + 1 WHERE id = NEW.dep_id;
    ELSE
        UPDATE tasks SET dependents = dependents - 1 WHERE id = OLD.dep_id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER task_deps_counted AFTER INSERT OR DELETE ON task_deps FOR EACH ROW
EXECUTE FUNCTION task_deps_count();

-- The open board's version as before (0020), with the count for the
-- EXISTS, and not moved by the count's own update: a task gaining a
-- dependent gives no one work.
DROP TRIGGER board_version_update ON tasks;
CREATE TRIGGER board_version_update AFTER UPDATE ON tasks FOR EACH ROW
WHEN (NEW.dependents = OLD.dependents AND (NEW.state = 'OPEN' OR (NEW.state = 'DONE' AND NEW.review_state = 'reviewing')))
EXECUTE FUNCTION board_version_bump();

DROP TRIGGER board_version_closed ON tasks;
CREATE TRIGGER board_version_closed AFTER UPDATE ON tasks FOR EACH ROW
WHEN (NEW.state = 'CLOSED' AND OLD.state <> 'CLOSED' AND NEW.dependents > 0)
EXECUTE FUNCTION board_version_bump();
DROP FUNCTION board_version_bump_depended();
