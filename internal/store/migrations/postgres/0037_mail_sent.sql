-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- A send from a session (swarmd mail send) looks for an earlier attempt at
-- it by sender, recipient and time, and an urgent one for its sender's last
-- urgent mail to that recipient: without an index of their own both read
-- every message the swarm ever sent (3.7 ms a send at 20,000, growing).
CREATE INDEX messages_sent ON messages (sender, recipient, created_at);
