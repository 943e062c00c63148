-- The daemon's persistent state, written by the Journal: one row per agent,
-- one per backend session, and the event log of every transition. Times are
-- UTC text in the messages table's fixed-width layout. Columns hold whatever
-- the daemon reports: no CHECK or foreign key can fail a batch, because a
-- refused row would take the rest of its batch down with it.

-- Latest known state of each agent; restart recovery starts from here.
CREATE TABLE agents (
    name               TEXT    NOT NULL PRIMARY KEY,
    state              TEXT    NOT NULL,
    session_seq        INTEGER NOT NULL DEFAULT 0, -- never decreases: a restart continues it
    consecutive_errors INTEGER NOT NULL DEFAULT 0,
    total_errors       INTEGER NOT NULL DEFAULT 0,
    stop_kind          TEXT    NOT NULL DEFAULT '', -- '', 'operator', 'fatal' (thresholds or FatalError)
    stop_reason        TEXT    NOT NULL DEFAULT '',
    updated_at         TEXT    NOT NULL
) STRICT;

-- One row per backend session; ended_at NULL means still running (or
-- orphaned by a killed daemon, until the next start closes it).
CREATE TABLE sessions (
    session_id   TEXT    NOT NULL PRIMARY KEY,
    agent        TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    started_at   TEXT    NOT NULL,
    ended_at     TEXT,
    outcome      TEXT    NOT NULL DEFAULT '', -- '', success, error, timeout, orphaned
    exit_code    INTEGER NOT NULL DEFAULT 0,
    signal       TEXT    NOT NULL DEFAULT '',
    abort_reason TEXT    NOT NULL DEFAULT '',
    reason       TEXT    NOT NULL DEFAULT '',
    duration_ms  INTEGER NOT NULL DEFAULT 0,
    head_before  TEXT    NOT NULL DEFAULT '',
    head_after   TEXT    NOT NULL DEFAULT '',
    log_path     TEXT    NOT NULL DEFAULT '',
    -- NULL: the backend does not report it.
    tokens_in    INTEGER,
    tokens_out   INTEGER,
    cost_usd     REAL,
    tool_calls   INTEGER
) STRICT;

-- An agent's sessions in order, and MaxSeq.
CREATE INDEX sessions_agent_seq ON sessions (agent, seq);

-- Restart recovery: sessions a killed daemon left open.
CREATE INDEX sessions_open ON sessions (agent) WHERE ended_at IS NULL;

-- Every transition of every agent, in the order the daemon applied them.
CREATE TABLE events (
    id         INTEGER PRIMARY KEY,
    at         TEXT    NOT NULL,
    agent      TEXT    NOT NULL,
    from_state TEXT    NOT NULL,
    event      TEXT    NOT NULL,
    to_state   TEXT    NOT NULL,
    effect     TEXT    NOT NULL DEFAULT '',
    actor      TEXT    NOT NULL DEFAULT '', -- runner, router, operator, daemon, hook
    reason     TEXT    NOT NULL DEFAULT '',
    session_id TEXT    NOT NULL DEFAULT '',
    seq        INTEGER NOT NULL DEFAULT 0
) STRICT;

-- One agent's history (swarmd status, the event log tail).
CREATE INDEX events_agent ON events (agent, id);
