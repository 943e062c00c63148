-- PostgreSQL twin of the SQLite migration of the same name (one directory up):
-- the same tables, columns and indexes; BIGINT for INTEGER, DOUBLE PRECISION
-- for REAL, identity columns for the INTEGER PRIMARY KEY ids.
-- The backend's final result text (an excerpt, at most 2 KiB) for each session.
ALTER TABLE sessions ADD COLUMN result_text TEXT NOT NULL DEFAULT '';
