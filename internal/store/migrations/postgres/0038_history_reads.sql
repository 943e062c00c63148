-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- Reads that went through every row the swarm ever wrote, found by reading
-- each query's plan: swarmd sessions (every agent's, newest first, up to a
-- limit) and the start's release of claims whose session never started (an
-- acknowledged message keeps its claimed_session for good).
CREATE INDEX sessions_started ON sessions (started_at, seq);
CREATE INDEX messages_claimed_unacked ON messages (claimed_session) WHERE claimed_session IS NOT NULL AND acked_by IS NULL;
