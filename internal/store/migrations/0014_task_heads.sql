-- One task, one change. A task's work is a line of commits of its own:
-- work_head is where its line stood when the last session that held it
-- ended (the next session on it starts there; '' : a new line, started from
-- the merge target), and head is the commit frozen when it was reported
-- DONE: what its review shows and what the merge queue merges, whatever the
-- worker commits after. A requeued or orphaned task starts a new line
-- (both cleared), so an earlier attempt's commits never reach the target.
ALTER TABLE tasks ADD COLUMN work_head TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN head TEXT NOT NULL DEFAULT '';
