-- 0.5 (operators): master-key rotation.
--
-- Token hashes (API tokens, share tokens, mail tokens) are HMACs under a hash key that must
-- outlive the master key it was first derived from: the tokens are not stored, so they cannot be
-- re-hashed. The hash key is kept here, sealed under each master key the server has run with
-- (one row per key id, like key_canaries); the server writes the row for its key at start-up.
CREATE TABLE token_hash_keys (
    key_id     text PRIMARY KEY,
    nonce      bytea NOT NULL,
    ciphertext bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT ON token_hash_keys TO cvsm_app;

-- Finding the rows still sealed under a given key (the start-up check, `cvsm-server rotate-key`).
CREATE INDEX secrets_key_id_idx ON secrets (key_id);
CREATE INDEX secret_versions_key_id_idx ON secret_versions (key_id);
CREATE INDEX secret_shares_key_id_idx ON secret_shares (key_id);
CREATE INDEX mail_outbox_key_id_idx ON mail_outbox (key_id);
CREATE INDEX users_totp_key_id_idx ON users (totp_key_id) WHERE totp_key_id IS NOT NULL;
