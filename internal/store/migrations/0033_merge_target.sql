-- Where each clone's merge target was last known to the swarm: the tip the
-- merge queue put it at, found it at when its daemon started, or that a
-- move someone else made was recorded at (target_moved, in the same
-- transaction), and the move its daemon began and may not have recorded
-- (pending_from to pending_to: a batch under test, a follow of the remote's
-- target). A daemon's start compares the target's tip with it, so that a
-- move nobody looked at before a stop, or made while no daemon ran, is
-- recorded once. clone names the repository (on a shared store, with its
-- host); gen orders the writes of the daemon that runs on it.
CREATE TABLE merge_target (
    clone        TEXT    NOT NULL,
    into_branch  TEXT    NOT NULL,
    tip          TEXT    NOT NULL,
    gen          INTEGER NOT NULL DEFAULT 0,
    pending_from TEXT    NOT NULL DEFAULT '',
    pending_to   TEXT    NOT NULL DEFAULT '',
    updated_at   TEXT    NOT NULL,
    PRIMARY KEY (clone, into_branch)
);
