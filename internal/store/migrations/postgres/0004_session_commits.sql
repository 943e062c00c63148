-- PostgreSQL twin of the SQLite migration of the same name (one directory up):
-- the same tables, columns and indexes; BIGINT for INTEGER, DOUBLE PRECISION
-- for REAL, identity columns for the INTEGER PRIMARY KEY ids.
-- How many commits each session made on its agent's branch (HEAD before..after).
ALTER TABLE sessions ADD COLUMN commits BIGINT NOT NULL DEFAULT 0;
