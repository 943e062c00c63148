-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- The dashboards' board reads every task that is not over and the few most
-- recently over; without indexes of their own those reads were every task
-- ever made, bodies and results included, at each refresh: a snapshot took
-- longer with every task a swarm finished. Both are partial: a task enters
-- the first when it is made and leaves it when it is over, the second then
-- takes it, so a task's other updates touch neither.
CREATE INDEX tasks_not_over ON tasks (id) WHERE state NOT IN ('CLOSED', 'CANCELLED');
CREATE INDEX tasks_over ON tasks (state, updated_at) WHERE state IN ('CLOSED', 'CANCELLED');
