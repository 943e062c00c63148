-- PostgreSQL twin of the SQLite migration of the same name (one directory up):
-- the same tables, columns and indexes; BIGINT for INTEGER, DOUBLE PRECISION
-- for REAL, identity columns for the INTEGER PRIMARY KEY ids.
-- Budget limits set at runtime (swarmd budget set): they take precedence
-- over the config file's budget usd until cleared, and survive restarts.
-- scope is an agent's name or '(swarm)'.
CREATE TABLE budget_limits (
    scope  TEXT NOT NULL PRIMARY KEY,
    usd    DOUBLE PRECISION NOT NULL,
    actor  TEXT NOT NULL DEFAULT '',
    set_at TEXT NOT NULL
);

-- Spend per window: the sessions that ended since a time.
CREATE INDEX sessions_ended ON sessions (ended_at) WHERE ended_at IS NOT NULL;
