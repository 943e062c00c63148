-- A held task (CLAIMED or IN_PROGRESS) its daemon's orderly stop left with
-- its agent: held_over names that daemon (its lease holder name, host and
-- state dir), set once every session had stopped, and only for a task whose
-- holding session ended and was recorded. The daemon's next start gives
-- such a task back to its agent, or requeues it without counting a retry
-- when the agent is no longer configured; a task held without the mark
-- (its daemon died, or lost the agent's lease) is orphaned as before. Any
-- move of the task, a start or a session continuing it clears it.
ALTER TABLE tasks ADD COLUMN held_over TEXT NOT NULL DEFAULT '';
