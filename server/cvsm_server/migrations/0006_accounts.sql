-- 0.4 (accounts and mail): a mail outbox, single-use mail tokens, invitations, the newsletter,
-- sign-in through identity providers, and account deletion with a 7-day window.

-- Mail waits here until the sender delivers it (SMTP, or an .eml file in the outbox directory).
-- The message (it holds single-use links) is sealed with the master key and the row is deleted
-- once delivered; a failed attempt moves `next_attempt_at` back (see mail.py).
CREATE TABLE mail_outbox (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    recipient       text NOT NULL,
    purpose         text NOT NULL,
    key_id          text NOT NULL,
    nonce           bytea NOT NULL,
    ciphertext      bytea NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    failed_at       timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX mail_outbox_due_idx ON mail_outbox (next_attempt_at) WHERE failed_at IS NULL;

-- Tokens sent by mail (email verification, password reset, newsletter confirmation and
-- unsubscribe): only their HMAC is stored; each is used once and expires.
CREATE TABLE mail_tokens (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    purpose    text NOT NULL CHECK (purpose IN ('verify_email', 'password_reset',
                                                 'newsletter_confirm', 'newsletter_unsubscribe')),
    token_hash bytea NOT NULL UNIQUE,
    user_id    uuid REFERENCES users (id) ON DELETE CASCADE,
    email      text NOT NULL,
    expires_at timestamptz NOT NULL,
    used_at    timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX mail_tokens_user_idx ON mail_tokens (user_id, purpose);

-- Invitations to a team by email. Pending ones (neither accepted, revoked nor expired) count
-- toward the plan's `max_members`.
CREATE TABLE team_invites (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    team_id     uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    email       text NOT NULL,
    role        text NOT NULL CHECK (role IN ('Owner', 'Admin', 'Member', 'Viewer')),
    token_hash  bytea NOT NULL UNIQUE,
    invited_by  uuid REFERENCES users (id) ON DELETE SET NULL,
    expires_at  timestamptz NOT NULL,
    accepted_at timestamptz,
    accepted_by uuid REFERENCES users (id) ON DELETE SET NULL,
    revoked_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX team_invites_pending_key ON team_invites (team_id, lower(email))
    WHERE accepted_at IS NULL AND revoked_at IS NULL;
CREATE INDEX team_invites_team_idx ON team_invites (team_id);

-- Newsletter subscribers, with or without an account: `pending` until the confirmation link is
-- followed (double opt-in), then `confirmed` until unsubscribed.
CREATE TABLE newsletter_subscriptions (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email           text NOT NULL,
    status          text NOT NULL CHECK (status IN ('pending', 'confirmed', 'unsubscribed')),
    source          text NOT NULL CHECK (source IN ('form', 'register', 'oauth')),
    confirmed_at    timestamptz,
    unsubscribed_at timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX newsletter_subscriptions_email_key ON newsletter_subscriptions (lower(email));

-- Accounts linked to an identity provider (`provider` is the path's <idp>, `subject` its `sub`).
CREATE TABLE user_identities (
    provider   text NOT NULL,
    subject    text NOT NULL,
    user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    email      text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, subject)
);
CREATE INDEX user_identities_user_idx ON user_identities (user_id);

-- A sign-in through a provider in flight: the `state` (its HMAC), the PKCE verifier and the
-- nonce, kept in the database so any server process can take the callback. Used once.
-- `link_user_id`: a flow started by a signed-in user to link the identity to their account.
CREATE TABLE oauth_flows (
    state_hash    bytea PRIMARY KEY,
    provider      text NOT NULL,
    code_verifier text NOT NULL,
    nonce         text NOT NULL,
    link_user_id  uuid REFERENCES users (id) ON DELETE CASCADE,
    expires_at    timestamptz NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- Account deletion: requested with `delete_after` = request + 7 days; cancelled by clearing it.
ALTER TABLE users ADD COLUMN delete_after timestamptz;
CREATE INDEX users_delete_after_idx ON users (delete_after) WHERE delete_after IS NOT NULL;

GRANT SELECT, INSERT, UPDATE, DELETE ON mail_outbox, mail_tokens, team_invites,
    newsletter_subscriptions, user_identities, oauth_flows TO cvsm_app;
