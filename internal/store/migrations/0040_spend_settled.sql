-- Each agent's spend over its sessions up to seq up_to, every one of which
-- is settled (a settled session's row never changes again): a read of the
-- spend (swarmd status, a dashboard's first at a start) adds to it only
-- the sessions after, where it summed every session ever recorded. The
-- daemon saves it as it goes (store.SpendTally.Save); here it is made
-- from the sessions as they are.
CREATE TABLE spend_settled (
    agent      TEXT    PRIMARY KEY,
    up_to      INTEGER NOT NULL,
    sessions   INTEGER NOT NULL,
    tokens_in  INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    cost_usd   REAL    NOT NULL,
    commits    INTEGER NOT NULL
) STRICT;
INSERT INTO spend_settled (agent, up_to, sessions, tokens_in, tokens_out, cost_usd, commits)
SELECT s.agent, p.up_to, COUNT(*), SUM(COALESCE(s.tokens_in, 0)), SUM(COALESCE(s.tokens_out, 0)),
       SUM(COALESCE(s.cost_usd, 0.0)), SUM(s.commits)
FROM sessions s
JOIN (SELECT a.agent, COALESCE((SELECT MIN(u.seq) - 1 FROM sessions u WHERE u.agent = a.agent AND u.settled_at IS NULL), MAX(a.seq)) AS up_to
      FROM sessions a GROUP BY a.agent) p ON s.agent = p.agent AND s.seq <= p.up_to
GROUP BY s.agent, p.up_to;
