-- An agent's delivered mail, by id: with the pending mail's own index
-- (messages_pending) an agent's whole inbox (swarmd mail inbox --all,
-- which agents run in their sessions) is two ranges, not a read of every
-- message ever sent. Partial, so that the pending mail's reads, which
-- must stay on messages_pending, cannot take it.
CREATE INDEX messages_delivered ON messages (recipient, id) WHERE delivered_at IS NOT NULL;
