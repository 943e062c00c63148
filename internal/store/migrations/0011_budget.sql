-- Budget limits set at runtime (swarmd budget set): they take precedence
-- over the config file's budget usd until cleared, and survive restarts.
-- scope is an agent's name or '(swarm)'.
CREATE TABLE budget_limits (
    scope  TEXT NOT NULL PRIMARY KEY,
    usd    REAL NOT NULL,
    actor  TEXT NOT NULL DEFAULT '',
    set_at TEXT NOT NULL
) STRICT;

-- Spend per window: the sessions that ended since a time.
CREATE INDEX sessions_ended ON sessions (ended_at) WHERE ended_at IS NOT NULL;
