-- Nothing on SQLite: its routers watch the WAL and read the mailbox, which
-- takes microseconds. The PostgreSQL twin (postgres/) has urgent mail name
-- its recipient in its notification.
SELECT 1;
