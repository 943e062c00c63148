-- Limits the daemon's config sets (mailbox.max_body), recorded by the daemon
-- at start so that every process that opens this file enforces them: a
-- `swarmd mail` inside a session reads no config, only SWARM_DB_PATH.
CREATE TABLE settings (
    key   TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
