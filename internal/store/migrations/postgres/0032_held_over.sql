-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- A held task its daemon's orderly stop left with its agent: held_over
-- names that daemon; its next start gives the task back to the agent (or
-- requeues it, no retry, when the agent is gone). Any move clears it.
ALTER TABLE tasks ADD COLUMN held_over TEXT NOT NULL DEFAULT '';
