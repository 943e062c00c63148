-- The tasks an agent holds (CLAIMED or IN_PROGRESS), for the prompt's
-- first read and every claim's check. tasks_claimant indexed every task
-- ever claimed, so finding what an agent holds read its whole history:
-- a row for each task it had done, more with every task, on every prompt.
-- It also made every later move of a claimed task (a start, a DONE, a
-- close) write an index entry.
CREATE INDEX tasks_held ON tasks (claimant) WHERE state IN ('CLAIMED', 'IN_PROGRESS');
DROP INDEX tasks_claimant;
