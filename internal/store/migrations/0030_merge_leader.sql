-- The merge queue's leader epoch: raised each time a queue loop starts (on a
-- shared store, each time a daemon takes the merge lock). The loop's writes
-- check in their transaction that it is still the epoch they took, so a
-- daemon that lost the merge lock (its connection cut, while its loop had
-- not seen it yet, or while it was stopped) writes nothing over the queue
-- of the daemon that runs it now.
ALTER TABLE merge_control ADD COLUMN leader_epoch INTEGER NOT NULL DEFAULT 0;
