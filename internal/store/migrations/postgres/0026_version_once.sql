-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- The open board's version moves once a transaction, however many tasks
-- the transaction puts into the open set. Every UPDATE of the one row
-- leaves a version of it that no one may prune before the transaction
-- ends, and each next UPDATE walks them all: a close that opened 20,000
-- dependents made 20,000 updates of board_version, each slower than the
-- last (2.9 s under the swarm's writers' lock). A reader only asks whether
-- the number moved, so once is enough. The mark is a setting local to the
-- transaction: it is gone when the transaction ends, and with a
-- subtransaction rolled back, the bump it made (a savepoint's).
CREATE FUNCTION board_version_move() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('swarmd.board_moved', true) IS DISTINCT FROM 'y' THEN
        UPDATE board_version SET n = n + 1 WHERE id = 1;
        PERFORM set_config('swarmd.board_moved', 'y', true);
        PERFORM pg_notify('swarmd_changes', '8');
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION board_version_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM board_version_move();
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION board_version_bump_depended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM task_deps WHERE dep_id = NEW.id) THEN
        PERFORM board_version_move();
    END IF;
    RETURN NULL;
END
$$;
