-- 0.3.0: sessions (logout-all), two-factor, token allowlists and locks, shared rate limits,
-- share links, the master-key check, and an audit log the database itself keeps immutable.

ALTER TABLE users
    ADD COLUMN totp_enabled boolean NOT NULL DEFAULT false,
    ADD COLUMN totp_key_id text,
    ADD COLUMN totp_nonce bytea,
    ADD COLUMN totp_ciphertext bytea,
    ADD COLUMN totp_last_step bigint;

CREATE TABLE sessions (
    id         uuid PRIMARY KEY,
    user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz
);
CREATE INDEX sessions_user_idx ON sessions (user_id) WHERE revoked_at IS NULL;

ALTER TABLE api_tokens
    ADD COLUMN allowed_ips text[] NOT NULL DEFAULT '{}',
    ADD COLUMN failed_auth_count integer NOT NULL DEFAULT 0,
    ADD COLUMN locked_until timestamptz,
    ADD COLUMN last_ip text,
    ADD COLUMN last_user_agent text;

-- Failed lookups per token prefix (10 in 5 minutes lock the prefix for 5 minutes).
CREATE TABLE token_prefix_failures (
    prefix    text NOT NULL,
    failed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX token_prefix_failures_idx ON token_prefix_failures (prefix, failed_at);

CREATE TABLE token_prefix_locks (
    prefix       text PRIMARY KEY,
    locked_until timestamptz NOT NULL
);

-- Fixed-window counters shared by every server process on this database.
CREATE UNLOGGED TABLE rate_limit_counters (
    key          text NOT NULL,
    window_start timestamptz NOT NULL,
    count        integer NOT NULL,
    PRIMARY KEY (key, window_start)
);

CREATE TABLE secret_shares (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    team_id    uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    secret_id  uuid NOT NULL REFERENCES secrets (id) ON DELETE CASCADE,
    token_hash bytea NOT NULL UNIQUE,
    key_id     text NOT NULL,
    nonce      bytea NOT NULL,
    ciphertext bytea NOT NULL,
    max_views  integer NOT NULL CHECK (max_views BETWEEN 1 AND 10),
    view_count integer NOT NULL DEFAULT 0 CHECK (view_count <= max_views),
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz,
    created_by uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX secret_shares_secret_idx ON secret_shares (secret_id);

-- One row per master key ever used: a known plaintext sealed with it.
CREATE TABLE key_canaries (
    key_id     text PRIMARY KEY,
    nonce      bytea NOT NULL,
    ciphertext bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Audit retention in days for a team's current plan; NULL means keep forever.
-- Entries without a team (account events, deleted teams) are kept 90 days.
CREATE FUNCTION cvsm_audit_retention_days(p_team_id uuid) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN p_team_id IS NULL THEN 90
        ELSE (SELECT CASE plan WHEN 'starter' THEN 30 WHEN 'professional' THEN 90 ELSE NULL END
              FROM teams WHERE id = p_team_id)
    END
$$;

-- Audit entries are immutable. The only changes the database lets through: setting the actor
-- (user or team reference) to NULL when that user or team is deleted, and deleting an entry
-- older than its retention.
CREATE FUNCTION cvsm_audit_guard() RETURNS trigger
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
           AND (NEW.user_id IS NOT DISTINCT FROM OLD.user_id OR NEW.user_id IS NULL)
           AND (NEW.team_id IS NOT DISTINCT FROM OLD.team_id OR NEW.team_id IS NULL) THEN
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

CREATE TRIGGER audit_logs_immutable
    BEFORE UPDATE OR DELETE ON audit_logs
    FOR EACH ROW EXECUTE FUNCTION cvsm_audit_guard();

CREATE FUNCTION cvsm_audit_no_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit log entries are immutable' USING ERRCODE = 'insufficient_privilege';
END $$;

CREATE TRIGGER audit_logs_no_truncate
    BEFORE TRUNCATE ON audit_logs
    FOR EACH STATEMENT EXECUTE FUNCTION cvsm_audit_no_truncate();

-- Teams created before plan quotas get the plan table's defaults.
UPDATE teams SET max_secrets = 50, max_members = 5 WHERE plan = 'starter' AND max_secrets IS NULL;
UPDATE teams SET max_secrets = 500, max_members = 25
    WHERE plan = 'professional' AND max_secrets IS NULL;
