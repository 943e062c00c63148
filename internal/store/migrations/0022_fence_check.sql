-- Nothing on SQLite: the PostgreSQL twin (postgres/0022_fence_check.sql)
-- adds the lease check that daemons sharing a PostgreSQL store send with
-- the writes it fences. A SQLite store has one daemon, whose writes are
-- checked, when fenced at all, by a plain query (store.FenceTx).
SELECT 1;
