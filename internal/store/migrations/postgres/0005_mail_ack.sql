-- PostgreSQL twin of the SQLite migration of the same name (one directory up):
-- the same tables, columns and indexes; BIGINT for INTEGER, DOUBLE PRECISION
-- for REAL, identity columns for the INTEGER PRIMARY KEY ids.
-- Delivery is acknowledged, not assumed. A prompt claims pending mail for its
-- session (claimed_session) and leaves delivered_at NULL; delivered_at is set
-- only when that session completes (acked_by 'session') or the recipient reads
-- the message with `swarmd mail read` (acked_by 'read'). A claimed message whose
-- session was interrupted, failed, timed out, was force-stopped or was cut off
-- by a crash stays pending and is shown again, with shown_note saying why.
ALTER TABLE messages ADD COLUMN shown_note TEXT;
ALTER TABLE messages ADD COLUMN acked_by TEXT; -- NULL: pending, or delivered before this migration
