-- 0.4: one throttle in front of every credential check (issue 24).
--
-- Besides the per-address window of failed credentials (`rate_limit_counters`, key
-- `failed_auth:<ip>`), each account has a progressive delay: after a few consecutive failures for
-- one login identifier (or one account's two-factor step) the next check waits, doubling with each
-- further failure up to fifteen minutes (ratelimit.py). While an address is over its limit or an
-- account is in its delay, the credential is not checked at all. A success clears the account's
-- row; a row untouched for a day is forgotten (housekeeping). Unlogged like the other counters: a
-- crash of PostgreSQL forgets the delays, never a credential.
--
-- `key` is `login:<keyed hash of the identifier>` (an identifier is sometimes a mistyped
-- password, so it is never stored) or `2fa:<user id>`.
CREATE UNLOGGED TABLE auth_throttle (
    key            text PRIMARY KEY,
    failures       integer NOT NULL,
    blocked_until  timestamptz,
    last_failed_at timestamptz NOT NULL
);

GRANT SELECT, INSERT, UPDATE, DELETE ON auth_throttle TO cvsm_app;

-- A credential whose user is gone answers 401 on every process at once, also when the user (or
-- a session or token) was deleted or disabled straight in the database rather than through the
-- server, which bumps the epoch itself: each process confirms a cached credential against this
-- epoch on every request, so the cached copy is dropped and the lookup finds nothing.
CREATE FUNCTION cvsm_bump_credential_epoch() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM gone) THEN
        UPDATE credential_epoch SET epoch = epoch + 1;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION cvsm_bump_credential_epoch_row() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE credential_epoch SET epoch = epoch + 1;
    RETURN NULL;
END $$;

CREATE TRIGGER users_deleted_bump_epoch AFTER DELETE ON users
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION cvsm_bump_credential_epoch();
CREATE TRIGGER sessions_deleted_bump_epoch AFTER DELETE ON sessions
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION cvsm_bump_credential_epoch();
CREATE TRIGGER api_tokens_deleted_bump_epoch AFTER DELETE ON api_tokens
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION cvsm_bump_credential_epoch();
CREATE TRIGGER users_disabled_bump_epoch AFTER UPDATE OF disabled_at ON users
    FOR EACH ROW WHEN (OLD.disabled_at IS DISTINCT FROM NEW.disabled_at)
    EXECUTE FUNCTION cvsm_bump_credential_epoch_row();
