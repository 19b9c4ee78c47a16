-- 0.5 (migration 0016): the change stream (`changes.py`, GET /teams/:team/secrets/changes).
--
-- Every write that gives a secret a new current version, deletes it, moves it or renames its
-- environment notifies `cvsm_secret_changes` from its own transaction, whoever makes it (the API,
-- the dashboard, a bulk import, a rollback, a rotation): PostgreSQL delivers the notification when
-- the transaction commits, to every server process listening. The payload is the team and the
-- environment, `<team uuid> <environment>`, never a name or a value; identical payloads of one
-- transaction arrive once, so a bulk write wakes each stream once.
--
-- Every bump of the credential epoch (a revocation) notifies `cvsm_credential_epoch`, so a stream
-- checks its credential at once instead of at its next heartbeat.
CREATE FUNCTION cvsm_notify_secret_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM pg_notify('cvsm_secret_changes', OLD.team_id::text || ' ' || OLD.environment);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM pg_notify('cvsm_secret_changes', NEW.team_id::text || ' ' || NEW.environment);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER secrets_notify_insert AFTER INSERT ON secrets
    FOR EACH ROW EXECUTE FUNCTION cvsm_notify_secret_change();
CREATE TRIGGER secrets_notify_update AFTER UPDATE ON secrets
    FOR EACH ROW
    WHEN (OLD.version IS DISTINCT FROM NEW.version
          OR OLD.deleted_at IS DISTINCT FROM NEW.deleted_at
          OR OLD.environment IS DISTINCT FROM NEW.environment
          OR OLD.name IS DISTINCT FROM NEW.name)
    EXECUTE FUNCTION cvsm_notify_secret_change();
CREATE TRIGGER secrets_notify_delete AFTER DELETE ON secrets
    FOR EACH ROW EXECUTE FUNCTION cvsm_notify_secret_change();

CREATE FUNCTION cvsm_notify_credential_epoch() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('cvsm_credential_epoch', NEW.epoch::text);
    RETURN NULL;
END;
$$;

CREATE TRIGGER credential_epoch_notify AFTER UPDATE ON credential_epoch
    FOR EACH ROW EXECUTE FUNCTION cvsm_notify_credential_epoch();
