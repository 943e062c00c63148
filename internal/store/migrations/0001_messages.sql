-- Messages between agents (and the operator). A row is one delivery: a
-- broadcast writes one row per recipient. delivered_at NULL means pending.
CREATE TABLE messages (
    id              INTEGER PRIMARY KEY,
    thread_id       INTEGER NOT NULL,
    reply_to        INTEGER REFERENCES messages (id),
    sender          TEXT    NOT NULL,
    recipient       TEXT    NOT NULL,
    subject         TEXT    NOT NULL DEFAULT '',
    body            TEXT    NOT NULL,
    urgency         TEXT    NOT NULL DEFAULT 'normal' CHECK (urgency IN ('normal', 'urgent')),
    created_at      TEXT    NOT NULL, -- UTC, fixed width, so text order is time order
    delivered_at    TEXT,
    claimed_session TEXT              -- the session whose prompt received it
) STRICT;

-- Prompt building and inboxes: pending mail for one recipient, in id order.
CREATE INDEX messages_pending ON messages (recipient, id) WHERE delivered_at IS NULL;

-- The router: pending urgent mail newer than the last one it saw.
CREATE INDEX messages_pending_urgent ON messages (id) WHERE delivered_at IS NULL AND urgency = 'urgent';

-- Unconsume: mail claimed by a session that never started.
CREATE INDEX messages_claimed ON messages (claimed_session) WHERE claimed_session IS NOT NULL;
