-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- The boot a lease's holder runs in (/proc/sys/kernel/random/boot_id), so
-- that a daemon starting under a host name and state dir that already hold
-- leases can tell its own dead predecessor (this boot, its pid gone: take
-- the agents back at once) from a live namesake on another machine (wait,
-- and refuse to start if it renews). '' for leases written before.
ALTER TABLE agent_leases ADD COLUMN boot TEXT NOT NULL DEFAULT '';
