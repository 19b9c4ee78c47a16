-- 0.3.1: the server runs as its own role, and the audit guard lets an actor reference be nulled
-- only by deleting that user or team.
--
-- `cvsm_app` holds exactly the privileges the server uses. It owns nothing, so it can neither
-- disable the audit triggers nor alter the tables, and (not being a superuser) it cannot set
-- `session_replication_role`. On the audit log it may read, insert and delete (the guard lets
-- only the retention purge through); it has no UPDATE and no TRUNCATE. Operators of an external
-- PostgreSQL give their login role membership: `GRANT cvsm_app TO <login role>` (README).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'cvsm_app') THEN
        CREATE ROLE cvsm_app NOLOGIN;
    END IF;
END $$;

DO $$
BEGIN
    EXECUTE format('GRANT CONNECT, TEMPORARY ON DATABASE %I TO cvsm_app', current_database());
END $$;
GRANT USAGE ON SCHEMA public TO cvsm_app;
GRANT SELECT ON schema_migrations TO cvsm_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON users, teams, team_members, secrets, secret_versions,
    api_tokens, sessions, token_prefix_failures, token_prefix_locks, rate_limit_counters,
    secret_shares TO cvsm_app;
GRANT SELECT, INSERT ON key_canaries TO cvsm_app;
GRANT SELECT, INSERT, DELETE ON audit_logs TO cvsm_app;
GRANT EXECUTE ON FUNCTION cvsm_audit_retention_days(uuid) TO cvsm_app;

-- An actor reference may become NULL only when the user or team it names no longer exists (the
-- ON DELETE SET NULL of the foreign keys); every other change is refused.
CREATE OR REPLACE FUNCTION cvsm_audit_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    days integer;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (NEW.id, NEW.user_email, NEW.action, NEW.resource, NEW.resource_id, NEW.ip_address,
            NEW.user_agent, NEW.metadata, NEW.created_at)
           IS NOT DISTINCT FROM
           (OLD.id, OLD.user_email, OLD.action, OLD.resource, OLD.resource_id, OLD.ip_address,
            OLD.user_agent, OLD.metadata, OLD.created_at)
           AND (NEW.user_id IS NOT DISTINCT FROM OLD.user_id
                OR (NEW.user_id IS NULL AND NOT EXISTS (SELECT 1 FROM users WHERE id = OLD.user_id)))
           AND (NEW.team_id IS NOT DISTINCT FROM OLD.team_id
                OR (NEW.team_id IS NULL AND NOT EXISTS (SELECT 1 FROM teams WHERE id = OLD.team_id)))
        THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'audit log entries are immutable' USING ERRCODE = 'insufficient_privilege';
    ELSIF TG_OP = 'DELETE' THEN
        days := cvsm_audit_retention_days(OLD.team_id);
        IF days IS NOT NULL AND OLD.created_at < now() - make_interval(days => days) THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'audit log entries are immutable' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END $$;

-- One counter that every credential revocation bumps (logout-all, token revocation, allowlist
-- and prefix locks): server processes cache credentials and confirm them against it in the
-- statements a request makes anyway (see credentials.py).
CREATE TABLE credential_epoch (
    id    boolean PRIMARY KEY DEFAULT true CHECK (id),
    epoch bigint NOT NULL DEFAULT 0
);
INSERT INTO credential_epoch (id, epoch) VALUES (true, 0);
GRANT SELECT, UPDATE ON credential_epoch TO cvsm_app;
