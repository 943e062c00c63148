-- The merge queue (package merge): finished tasks' branches integrated into
-- merge.into one at a time, in id order. An entry merges head, the commit
-- its branch pointed at when it was queued, not whatever the branch holds
-- later (the worker goes on committing there for its next task).
CREATE TABLE merge_queue (
    id          INTEGER PRIMARY KEY,         -- FIFO order
    task_id     INTEGER NOT NULL,
    agent       TEXT    NOT NULL,
    branch      TEXT    NOT NULL,
    head        TEXT    NOT NULL,
    state       TEXT    NOT NULL,            -- queued, testing, merged, rejected
    result      TEXT    NOT NULL DEFAULT '', -- merged; or conflict, gate_failed, timeout
    detail      TEXT    NOT NULL DEFAULT '', -- conflicting paths (one a line), or the tail of the gate's output
    target      TEXT    NOT NULL DEFAULT '', -- the target commit the candidate was built on
    candidate   TEXT    NOT NULL DEFAULT '', -- the candidate commit; once merged, the target's new commit
    gate_seq    INTEGER NOT NULL DEFAULT 0,  -- the last gate run: logs/merge/<gate_seq>.log
    attempts    INTEGER NOT NULL DEFAULT 0,  -- gate runs (a target that moved re-runs the gate)
    notified    INTEGER NOT NULL DEFAULT 0,  -- 1 once the caller's callback took the result
    enqueued_at TEXT    NOT NULL,
    started_at  TEXT    NOT NULL DEFAULT '',
    finished_at TEXT    NOT NULL DEFAULT ''
) STRICT;

-- The queue itself: what is waiting or being tested.
CREATE INDEX merge_queue_active ON merge_queue (id) WHERE state IN ('queued', 'testing');
-- A task is in the queue at most once at a time.
CREATE UNIQUE INDEX merge_queue_task_active ON merge_queue (task_id) WHERE state IN ('queued', 'testing');
CREATE INDEX merge_queue_task ON merge_queue (task_id, id);
-- Results the caller has not taken yet.
CREATE INDEX merge_queue_unnotified ON merge_queue (id) WHERE notified = 0 AND state IN ('merged', 'rejected');

-- One row: the queue's switches and why it does not advance, for swarmd merge
-- status, which reads the file while the daemon runs.
CREATE TABLE merge_control (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    paused     INTEGER NOT NULL DEFAULT 0,
    paused_by  TEXT    NOT NULL DEFAULT '',
    waiting    TEXT    NOT NULL DEFAULT '', -- '' while the queue can advance
    gate_seq   INTEGER NOT NULL DEFAULT 0,  -- the last gate run's number
    updated_at TEXT    NOT NULL DEFAULT ''
) STRICT;
INSERT INTO merge_control (id) VALUES (1);
