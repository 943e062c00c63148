-- PostgreSQL twin of the SQLite migration of the same name (one directory up).
-- Urgent mail tells the daemons listening on swarmd_changes whom it is for,
-- in its insert's own transaction: 'u' ID ' ' CREATED_AT ' ' RECIPIENT
-- (store.Urgent). The recipient's router interrupts on that alone, with no
-- read of the mailbox between the commit and the cancel; on a swarm's
-- busy server that read was the tail of urgent mail's latency. The
-- commit's own notification ('1', store.ChangedMail) still comes too.
CREATE FUNCTION urgent_mail_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('swarmd_changes', 'u' || NEW.id || ' ' || NEW.created_at || ' ' || NEW.recipient);
    RETURN NULL;
END
$$;

CREATE TRIGGER urgent_mail_insert AFTER INSERT ON messages FOR EACH ROW
WHEN (NEW.urgency = 'urgent' AND NEW.delivered_at IS NULL AND NEW.claimed_session IS NULL)
EXECUTE FUNCTION urgent_mail_notify();
