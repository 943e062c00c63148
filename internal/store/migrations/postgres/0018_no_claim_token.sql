-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- claim_token was written at every claim and never read: the fences of a
-- claim are claim_session (a session's reports apply only to the task it
-- holds) and the agent's lease epoch (a daemon that lost the agent writes
-- nothing for it). docs/decisions.md says why no third fence is kept.
ALTER TABLE tasks DROP COLUMN claim_token;
