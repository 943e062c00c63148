-- Which daemon runs each agent of a swarm that shares one store (several
-- daemons on PostgreSQL): a daemon holds its agents' names while it
-- renews the lease; once a lease has expired another daemon may take the
-- name, and the dead daemon's claimed tasks are requeued. Times are the
-- store's fixed-width UTC text.
CREATE TABLE agent_leases (
    agent       TEXT NOT NULL PRIMARY KEY,
    daemon      TEXT NOT NULL,
    host        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    acquired_at TEXT NOT NULL,
    expires_at  TEXT NOT NULL
) STRICT;
CREATE INDEX agent_leases_daemon ON agent_leases (daemon);
