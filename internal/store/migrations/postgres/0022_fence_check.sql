-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- A write made for an agent first checks, in its transaction, that this
-- daemon holds the agent's lease at its epoch, and holds the lease's row
-- (FOR SHARE) until the commit so that no daemon takes it meanwhile. As a
-- query the check was a round trip of its own, under the writers' lock,
-- before each such write; as a statement that fails when the lease is not
-- held (SQLSTATE SWFEN, store.fenceFailed) its answer need not be awaited,
-- and it goes to the server in one pipeline with the writes it fences.
CREATE FUNCTION swarmd_fence(p_agent TEXT, p_daemon TEXT, p_epoch BIGINT) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM agent_leases WHERE agent = p_agent AND daemon = p_daemon AND epoch = p_epoch FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'agent %: lease not held by daemon % at epoch %', p_agent, p_daemon, p_epoch
            USING ERRCODE = 'SWFEN';
    END IF;
END
$$;
