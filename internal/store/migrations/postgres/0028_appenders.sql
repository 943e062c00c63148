-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- No schema change. From this version, on PostgreSQL, a daemon's event log
-- appends under the appenders' turn instead of the writers' lock, and every
-- write transaction takes that turn before its first event: that keeps
-- event ids visible in increasing order. A daemon of an earlier version
-- would add events without the turn, and the followers of events by id
-- (the dashboards, `swarmd events --follow`) could miss some of its events
-- or of this version's. The version number keeps it out: it refuses a
-- newer schema.
SELECT 1;
