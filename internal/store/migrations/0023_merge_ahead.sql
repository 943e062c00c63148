-- The merge queue's gate run ahead of the batch at the front (merge.parallel:
-- 2), for swarmd merge status: its number, the tasks it tests (their ids,
-- space-separated, in line order) and when it started. ahead_seq 0: none.
-- The daemon's loop writes it when a run ahead starts and clears it when the
-- run is settled or dropped; a daemon that starts clears what a killed one
-- left.
ALTER TABLE merge_control ADD COLUMN ahead_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE merge_control ADD COLUMN ahead_tasks TEXT NOT NULL DEFAULT '';
ALTER TABLE merge_control ADD COLUMN ahead_since TEXT NOT NULL DEFAULT '';
