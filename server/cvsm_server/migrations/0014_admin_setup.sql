-- 0.4 (issue 28, migration 0014): a fresh install's first administrator, without editing the database.
--
-- At the start of an install with no admin, the server prints a one-time setup link on its
-- terminal (setup_link.py); the signed-in account that opens it and confirms becomes admin.
-- The link's token is random and kept here only as its HMAC (`Keyring.token_hash`, like the
-- mail tokens), expires, works once, and works only while no admin exists. Each start issues a
-- new one and ends the ones before; granting anyone admin ends them all.
CREATE TABLE admin_setup_tokens (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    token_hash bytea NOT NULL UNIQUE,
    expires_at timestamptz NOT NULL,
    used_at    timestamptz,
    used_by    uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

GRANT SELECT, INSERT, UPDATE, DELETE ON admin_setup_tokens TO cvsm_app;
