-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- Whether a commit is a merge the queue made, and the last one it made:
-- indexed, so that they do not read the whole history of the queue.
CREATE INDEX merge_queue_made ON merge_queue (candidate) WHERE state = 'merged';
CREATE INDEX merge_queue_last_made ON merge_queue (finished_at, id) WHERE state = 'merged' AND candidate <> '';
