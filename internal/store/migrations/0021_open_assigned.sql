-- The OPEN tasks assigned to someone: the router counts them per assignee
-- after every change of the open set, and without an index of their own
-- that count read every OPEN task of a backlog.
CREATE INDEX tasks_open_assigned ON tasks (assignee) WHERE state = 'OPEN' AND assignee <> '';
