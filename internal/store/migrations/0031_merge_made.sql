-- Whether a commit is a merge the queue made, and the last one it made, are
-- asked before each new task line on a daemon with a remote and as a daemon
-- follows the remote's target: indexed, so that they do not read the whole
-- history of the queue.
CREATE INDEX merge_queue_made ON merge_queue (candidate) WHERE state = 'merged';
CREATE INDEX merge_queue_last_made ON merge_queue (finished_at, id) WHERE state = 'merged' AND candidate <> '';
