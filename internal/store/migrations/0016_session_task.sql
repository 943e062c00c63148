-- The task a session worked on or reviewed, recorded with its outcome
-- (package settle): a task's spend is the sum of its sessions, exactly.
ALTER TABLE sessions ADD COLUMN task_id INTEGER;
CREATE INDEX sessions_task ON sessions (task_id) WHERE task_id IS NOT NULL;
