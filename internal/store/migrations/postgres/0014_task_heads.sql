-- PostgreSQL twin of the SQLite migration of the same name (one directory up):
-- the same tables, columns and indexes; BIGINT for INTEGER, DOUBLE PRECISION
-- for REAL, identity columns for the INTEGER PRIMARY KEY ids.
-- A task's line of work (work_head) and its head frozen at DONE (head).
ALTER TABLE tasks ADD COLUMN work_head TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN head TEXT NOT NULL DEFAULT '';
