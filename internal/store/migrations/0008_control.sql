-- Pauses (swarmd pause): an agent with a row here starts no session until
-- swarmd resume deletes it; restart recovery reads it. Kept apart from the
-- agents table, which the journal rewrites at every transition.
CREATE TABLE pauses (
    agent  TEXT    NOT NULL PRIMARY KEY,
    actor  TEXT    NOT NULL DEFAULT '', -- operator, agent:NAME, daemon
    reason TEXT    NOT NULL DEFAULT '',
    freeze INTEGER NOT NULL DEFAULT 0,  -- 1: --now froze the session that was running
    since  TEXT    NOT NULL
) STRICT;

-- Every tool call seen in a session's stream (swarmd audit), written by the
-- journal as each call ends; calls that never ended are written at the end
-- of their session with duration_ms NULL and status 'unfinished'.
CREATE TABLE tool_calls (
    id          INTEGER PRIMARY KEY,
    session_id  TEXT    NOT NULL,
    agent       TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    call_id     TEXT    NOT NULL DEFAULT '', -- the backend's id of the call
    tool        TEXT    NOT NULL,
    input       TEXT    NOT NULL DEFAULT '', -- a summary: the command, the file; at most 1 KiB
    started_at  TEXT    NOT NULL,
    duration_ms INTEGER,
    status      TEXT    NOT NULL             -- ok, error, unfinished
) STRICT;

CREATE INDEX tool_calls_agent ON tool_calls (agent, id);
CREATE INDEX tool_calls_session ON tool_calls (session_id, id);
