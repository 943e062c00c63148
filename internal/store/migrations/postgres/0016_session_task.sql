-- PostgreSQL twin of the SQLite migration of the same name (one directory up):
-- the same tables, columns and indexes; BIGINT for INTEGER, DOUBLE PRECISION
-- for REAL, identity columns for the INTEGER PRIMARY KEY ids.
-- The task a session worked on or reviewed, recorded with its outcome.
ALTER TABLE sessions ADD COLUMN task_id BIGINT;
CREATE INDEX sessions_task ON sessions (task_id) WHERE task_id IS NOT NULL;
