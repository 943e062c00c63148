-- Nothing on SQLite: a row updated twice in one transaction is written in
-- place there. The PostgreSQL twin (postgres/) moves the open board's
-- version once a transaction.
SELECT 1;
