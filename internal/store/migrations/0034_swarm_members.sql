-- The agents each daemon runs, as its config last said: the daemon (its
-- lease holder name, host and state dir) writes its whole list at its start
-- and at every reload, with what its config says about reviewing each
-- agent's tasks. On a store that several daemons share, this is the swarm:
-- the agents a command may name, and the review a claim made by a session's
-- own `swarmd task claim` (which reads no config) starts. A daemon that
-- stopped keeps its rows until it starts again without them.
CREATE TABLE swarm_members (
    daemon         TEXT    NOT NULL,
    agent          TEXT    NOT NULL,
    reviewer       TEXT    NOT NULL DEFAULT '',
    max_iterations INTEGER NOT NULL DEFAULT 0,
    review_only    INTEGER NOT NULL DEFAULT 0,
    recorded_at    TEXT    NOT NULL,
    PRIMARY KEY (daemon, agent)
);
CREATE INDEX swarm_members_agent ON swarm_members (agent);
