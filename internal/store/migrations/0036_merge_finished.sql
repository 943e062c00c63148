-- The merge queue's last results (swarmd merge status, the dashboards, at
-- each change of the queue): without an index of their own, every entry
-- the queue ever finished was read and sorted to show the last ten.
CREATE INDEX merge_queue_finished ON merge_queue (finished_at, id) WHERE state IN ('merged', 'rejected');
