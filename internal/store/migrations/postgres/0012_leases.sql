-- PostgreSQL twin of the SQLite migration of the same name (one directory up):
-- the same tables, columns and indexes; BIGINT for INTEGER, DOUBLE PRECISION
-- for REAL, identity columns for the INTEGER PRIMARY KEY ids.
-- Which daemon runs each agent of a swarm that shares one store (several
-- daemons on PostgreSQL): a daemon holds its agents' names while it
-- renews the lease; once a lease has expired another daemon may take the
-- name, and the dead daemon's claimed tasks are requeued. Times are the
-- store's fixed-width UTC text.
CREATE TABLE agent_leases (
    agent       TEXT NOT NULL PRIMARY KEY,
    daemon      TEXT NOT NULL,
    host        TEXT NOT NULL,
    pid         BIGINT NOT NULL,
    acquired_at TEXT NOT NULL,
    expires_at  TEXT NOT NULL
);
CREATE INDEX agent_leases_daemon ON agent_leases (daemon);
