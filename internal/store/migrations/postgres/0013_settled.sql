-- PostgreSQL twin of the SQLite migration of the same name (one directory up):
-- the same tables, columns and indexes; BIGINT for INTEGER, DOUBLE PRECISION
-- for REAL, identity columns for the INTEGER PRIMARY KEY ids.
-- A finished session's outcome is applied once, in one transaction that sets
-- settled_at (see the SQLite migration).
ALTER TABLE sessions ADD COLUMN settled_at TEXT;
UPDATE sessions SET settled_at = ended_at WHERE ended_at IS NOT NULL;
CREATE INDEX sessions_unsettled ON sessions (agent) WHERE settled_at IS NULL;
