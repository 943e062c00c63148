-- A finished session's outcome (the session row's end, the mail it carried,
-- its task report, its review verdict, its spend) is applied once, in one
-- transaction that sets settled_at. NULL with ended_at set cannot happen;
-- NULL with ended_at NULL is a session still running, or one a killed daemon
-- left: restart recovery applies its outcome from its log, or closes it as
-- orphaned. Sessions ended before this migration count as settled.
ALTER TABLE sessions ADD COLUMN settled_at TEXT;
UPDATE sessions SET settled_at = ended_at WHERE ended_at IS NOT NULL;
CREATE INDEX sessions_unsettled ON sessions (agent) WHERE settled_at IS NULL;
