-- The review loop of a task (seed 002): who reviews it, its loop state
-- (init, working, reviewing, complete, failed; '' for a task nobody reviews),
-- the iteration, the worker whose work is reviewed, and one row per verdict.
ALTER TABLE tasks ADD COLUMN reviewer TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN max_iterations INTEGER NOT NULL DEFAULT 3;
ALTER TABLE tasks ADD COLUMN review_state TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN iteration INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN worker TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN review_failure TEXT NOT NULL DEFAULT '';

CREATE INDEX tasks_review ON tasks (reviewer, updated_at) WHERE review_state = 'reviewing';

CREATE TABLE review_rounds (
    task_id   INTEGER NOT NULL REFERENCES tasks (id),
    iteration INTEGER NOT NULL,
    verdict   TEXT    NOT NULL, -- pass, fail
    feedback  TEXT    NOT NULL DEFAULT '',
    reviewer  TEXT    NOT NULL,
    at        TEXT    NOT NULL,
    PRIMARY KEY (task_id, iteration)
) STRICT;
