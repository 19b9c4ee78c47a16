-- 0.5 (issue 32, migration 0018): end-to-end teams (docs/e2e.md, e2e.py).
--
-- A team chosen end-to-end at its creation (`teams.e2e`, never changed afterwards) keeps its
-- values as envelopes sealed in the client under a team key the server never holds. The server
-- stores only what it cannot open:
-- - each member's X25519 public key and their private key wrapped twice, by their passphrase
--   (`cvsm-pass1.`) and by their recovery key (`cvsm-rec1.`) (`user_e2e_keys`);
-- - the team key of each key version wrapped to each recipient, a member or an API token
--   (`team_key_wraps`, `cvsm-wrap1.`); a token of an end-to-end team has its own public key
--   (`api_tokens.e2e_public_key`), its private half lives only in the token string;
-- - values, earlier versions and shares as envelopes (`envelope`: `cvsm-e2e1.` or
--   `cvsm-share1.`), with no master-key columns. A row holds either an envelope or a
--   master-key ciphertext, never both: master-key rotation (rotation.py) takes only rows with a
--   `key_id`, so it skips envelopes, and nothing the master key opens holds an e2e value.
ALTER TABLE teams
    ADD COLUMN e2e boolean NOT NULL DEFAULT false,
    ADD COLUMN key_version integer CHECK (key_version >= 1),
    ADD CONSTRAINT teams_e2e_key_version CHECK (e2e = (key_version IS NOT NULL));

-- The choice is made at creation: an UPDATE cannot turn a team end-to-end or back.
CREATE FUNCTION cvsm_teams_e2e_fixed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.e2e IS DISTINCT FROM OLD.e2e THEN
        RAISE EXCEPTION 'a team''s end-to-end mode is set at its creation only';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER teams_e2e_fixed BEFORE UPDATE OF e2e ON teams
    FOR EACH ROW EXECUTE FUNCTION cvsm_teams_e2e_fixed();

CREATE TABLE user_e2e_keys (
    user_id                      uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    public_key                   bytea NOT NULL CHECK (length(public_key) = 32),
    wrapped_private_key          text NOT NULL,
    recovery_wrapped_private_key text NOT NULL,
    created_at                   timestamptz NOT NULL DEFAULT now(),
    updated_at                   timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE api_tokens
    ADD COLUMN e2e_public_key bytea CHECK (e2e_public_key IS NULL OR length(e2e_public_key) = 32);

CREATE TABLE team_key_wraps (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    team_id     uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    key_version integer NOT NULL CHECK (key_version >= 1),
    user_id     uuid REFERENCES users (id) ON DELETE CASCADE,
    token_id    uuid REFERENCES api_tokens (id) ON DELETE CASCADE,
    wrapped_key text NOT NULL,
    created_by  uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((user_id IS NULL) <> (token_id IS NULL))
);
CREATE UNIQUE INDEX team_key_wraps_user_idx ON team_key_wraps (team_id, key_version, user_id)
    WHERE user_id IS NOT NULL;
CREATE UNIQUE INDEX team_key_wraps_token_idx ON team_key_wraps (team_id, key_version, token_id)
    WHERE token_id IS NOT NULL;
CREATE INDEX team_key_wraps_user_only_idx ON team_key_wraps (user_id) WHERE user_id IS NOT NULL;
CREATE INDEX team_key_wraps_token_only_idx ON team_key_wraps (token_id) WHERE token_id IS NOT NULL;

-- Values: an envelope or a master-key ciphertext (key_id, nonce, ciphertext), one of the two.
ALTER TABLE secrets
    ALTER COLUMN key_id DROP NOT NULL,
    ALTER COLUMN nonce DROP NOT NULL,
    ALTER COLUMN ciphertext DROP NOT NULL,
    ADD COLUMN envelope text,
    ADD CONSTRAINT secrets_sealed_once CHECK (
        (envelope IS NULL AND key_id IS NOT NULL AND nonce IS NOT NULL AND ciphertext IS NOT NULL)
        OR (envelope IS NOT NULL AND key_id IS NULL AND nonce IS NULL AND ciphertext IS NULL)),
    ADD COLUMN e2e boolean GENERATED ALWAYS AS (envelope IS NOT NULL) STORED;
ALTER TABLE secret_versions
    ALTER COLUMN key_id DROP NOT NULL,
    ALTER COLUMN nonce DROP NOT NULL,
    ALTER COLUMN ciphertext DROP NOT NULL,
    ADD COLUMN envelope text,
    ADD CONSTRAINT secret_versions_sealed_once CHECK (
        (envelope IS NULL AND key_id IS NOT NULL AND nonce IS NOT NULL AND ciphertext IS NOT NULL)
        OR (envelope IS NOT NULL AND key_id IS NULL AND nonce IS NULL AND ciphertext IS NULL));
ALTER TABLE secret_shares
    ALTER COLUMN key_id DROP NOT NULL,
    ALTER COLUMN nonce DROP NOT NULL,
    ALTER COLUMN ciphertext DROP NOT NULL,
    ADD COLUMN envelope text,
    ADD CONSTRAINT secret_shares_sealed_once CHECK (
        (envelope IS NULL AND key_id IS NOT NULL AND nonce IS NOT NULL AND ciphertext IS NOT NULL)
        OR (envelope IS NOT NULL AND key_id IS NULL AND nonce IS NULL AND ciphertext IS NULL));

GRANT SELECT, INSERT, UPDATE, DELETE ON user_e2e_keys, team_key_wraps TO cvsm_app;
