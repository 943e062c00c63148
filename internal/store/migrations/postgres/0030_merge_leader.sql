-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- The merge queue's leader epoch: raised each time a queue loop starts (each
-- time a daemon takes the merge lock); the loop's writes check it in their
-- transaction, so a daemon that lost the merge lock writes nothing over the
-- queue of the daemon that runs it now.
ALTER TABLE merge_control ADD COLUMN leader_epoch BIGINT NOT NULL DEFAULT 0;
