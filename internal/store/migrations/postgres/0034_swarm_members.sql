-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- The agents each daemon runs, as its config last said, with their review
-- settings: the swarm, on a store several daemons share.
CREATE TABLE swarm_members (
    daemon         TEXT   NOT NULL,
    agent          TEXT   NOT NULL,
    reviewer       TEXT   NOT NULL DEFAULT '',
    max_iterations BIGINT NOT NULL DEFAULT 0,
    review_only    BIGINT NOT NULL DEFAULT 0,
    recorded_at    TEXT   NOT NULL,
    PRIMARY KEY (daemon, agent)
);
CREATE INDEX swarm_members_agent ON swarm_members (agent);
