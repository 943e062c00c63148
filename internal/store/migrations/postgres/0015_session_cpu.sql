-- PostgreSQL twin of the SQLite migration of the same name (one directory up):
-- the same tables, columns and indexes; BIGINT for INTEGER, DOUBLE PRECISION
-- for REAL, identity columns for the INTEGER PRIMARY KEY ids.
-- A session's process tree's CPU time from its cgroup, NULL without one.
ALTER TABLE sessions ADD COLUMN cpu_ms BIGINT;
