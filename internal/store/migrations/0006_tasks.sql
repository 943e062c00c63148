-- The task board: work the swarm claims, reports on and finishes. state is a
-- seed 004 task state name (OPEN, CLAIMED, ...). A task held by an agent has
-- claimant (the agent), claim_session (the session working on it now: a
-- stale session's reports are refused) and claim_token (new at every claim).
CREATE TABLE tasks (
    id             INTEGER PRIMARY KEY,
    title          TEXT    NOT NULL,
    body           TEXT    NOT NULL DEFAULT '',
    priority       INTEGER NOT NULL DEFAULT 0,
    state          TEXT    NOT NULL,
    assignee       TEXT    NOT NULL DEFAULT '', -- '' : any agent may claim it
    parent_id      INTEGER REFERENCES tasks (id),
    claimant       TEXT    NOT NULL DEFAULT '',
    claim_session  TEXT    NOT NULL DEFAULT '',
    claim_token    TEXT    NOT NULL DEFAULT '',
    retries        INTEGER NOT NULL DEFAULT 0,
    max_retries    INTEGER NOT NULL DEFAULT 3,
    blocked_reason TEXT    NOT NULL DEFAULT '', -- '' while BLOCKED: waiting for dependencies only
    result         TEXT    NOT NULL DEFAULT '', -- the summary of DONE, the reason of FAILED
    created_by     TEXT    NOT NULL,
    created_at     TEXT    NOT NULL,
    updated_at     TEXT    NOT NULL
) STRICT;

-- Claiming: the best OPEN task.
CREATE INDEX tasks_open ON tasks (priority DESC, id) WHERE state = 'OPEN';
-- What an agent holds.
CREATE INDEX tasks_claimant ON tasks (claimant) WHERE claimant <> '';
CREATE INDEX tasks_parent ON tasks (parent_id) WHERE parent_id IS NOT NULL;

-- task_id waits for dep_id to be CLOSED.
CREATE TABLE task_deps (
    task_id INTEGER NOT NULL REFERENCES tasks (id),
    dep_id  INTEGER NOT NULL REFERENCES tasks (id),
    PRIMARY KEY (task_id, dep_id)
) STRICT;
CREATE INDEX task_deps_dep ON task_deps (dep_id);

-- Task transitions go into the event log beside agent transitions: task_id
-- set, from_state/to_state task states, event the seed's TransitionReason
-- ('' when none applies), effect 'task'.
ALTER TABLE events ADD COLUMN task_id INTEGER;
CREATE INDEX events_task ON events (task_id, id) WHERE task_id IS NOT NULL;
