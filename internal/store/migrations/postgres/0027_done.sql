-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- The DONE tasks, for the merge queue's feeder: it asks which are ready to
-- merge after every change of the database (at most every 50 ms), and
-- without an index of their own that read was every task of the board,
-- CLOSED ones included, more with every task done. DONE tasks are the
-- few between a session's DONE and their merge.
CREATE INDEX tasks_done ON tasks (updated_at, id) WHERE state = 'DONE';
