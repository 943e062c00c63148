-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- A lease's epoch (package fence): raised each time a daemon takes an
-- agent's name, so that a daemon that lost a lease (paused or cut off past
-- lease_timeout) finds its writes for that agent refused: every write made
-- for an agent checks the epoch it holds in the same transaction.
ALTER TABLE agent_leases ADD COLUMN epoch BIGINT NOT NULL DEFAULT 1;
