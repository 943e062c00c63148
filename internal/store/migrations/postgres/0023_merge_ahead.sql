-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- The merge queue's gate run ahead of the batch at the front (merge.parallel:
-- 2), for swarmd merge status: its number, the tasks it tests (their ids,
-- space-separated, in line order) and when it started. ahead_seq 0: none.
ALTER TABLE merge_control ADD COLUMN ahead_seq BIGINT NOT NULL DEFAULT 0;
ALTER TABLE merge_control ADD COLUMN ahead_tasks TEXT NOT NULL DEFAULT '';
ALTER TABLE merge_control ADD COLUMN ahead_since TEXT NOT NULL DEFAULT '';
