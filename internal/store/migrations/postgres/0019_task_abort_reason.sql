-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- A task event's abort reason: seed 004's canonical classification of the
-- abnormal agent end that moved the task (timeout, oom, shutdown_signal...),
-- '' when the move had none. Agent events leave it ''.
ALTER TABLE events ADD COLUMN abort_reason TEXT NOT NULL DEFAULT '';
