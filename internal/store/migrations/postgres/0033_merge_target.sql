-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- Where each clone's merge target was last known to the swarm, and the move
-- its daemon began and may not have recorded: compared with the target's
-- tip at a daemon's start.
CREATE TABLE merge_target (
    clone        TEXT   NOT NULL,
    into_branch  TEXT   NOT NULL,
    tip          TEXT   NOT NULL,
    gen          BIGINT NOT NULL DEFAULT 0,
    pending_from TEXT   NOT NULL DEFAULT '',
    pending_to   TEXT   NOT NULL DEFAULT '',
    updated_at   TEXT   NOT NULL,
    PRIMARY KEY (clone, into_branch)
);
