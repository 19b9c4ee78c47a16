-- 0.1.0: users, teams, members, encrypted secrets with versions, API tokens, audit log.
CREATE TABLE users (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email            text NOT NULL,
    name             text NOT NULL DEFAULT '',
    password_hash    text,
    is_admin         boolean NOT NULL DEFAULT false,
    email_verified   boolean NOT NULL DEFAULT false,
    newsletter_opt_in boolean NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email_key ON users (lower(email));

CREATE TABLE teams (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    slug        text NOT NULL UNIQUE,
    name        text NOT NULL,
    plan        text NOT NULL DEFAULT 'starter'
                CHECK (plan IN ('starter', 'professional', 'enterprise')),
    max_secrets integer CHECK (max_secrets IS NULL OR max_secrets >= 0),
    max_members integer CHECK (max_members IS NULL OR max_members >= 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE team_members (
    team_id    uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role       text NOT NULL CHECK (role IN ('Owner', 'Admin', 'Member', 'Viewer')),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (team_id, user_id)
);
CREATE INDEX team_members_user_idx ON team_members (user_id);

CREATE TABLE secrets (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    team_id     uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name        text NOT NULL,
    type        text NOT NULL DEFAULT 'credential',
    environment text NOT NULL CHECK (environment IN ('production', 'staging', 'development')),
    description text NOT NULL DEFAULT '',
    version     integer NOT NULL DEFAULT 1,
    key_id      text NOT NULL,
    nonce       bytea NOT NULL,
    ciphertext  bytea NOT NULL,
    created_by  uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    deleted_at  timestamptz
);
CREATE UNIQUE INDEX secrets_live_name_key ON secrets (team_id, environment, name)
    WHERE deleted_at IS NULL;
CREATE INDEX secrets_team_idx ON secrets (team_id) WHERE deleted_at IS NULL;

CREATE TABLE secret_versions (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    secret_id  uuid NOT NULL REFERENCES secrets (id) ON DELETE CASCADE,
    version    integer NOT NULL,
    key_id     text NOT NULL,
    nonce      bytea NOT NULL,
    ciphertext bytea NOT NULL,
    created_by uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (secret_id, version)
);

CREATE TABLE api_tokens (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id      uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         text NOT NULL,
    token_prefix text NOT NULL,
    token_hash   bytea NOT NULL UNIQUE,
    expires_at   timestamptz,
    revoked_at   timestamptz,
    last_used_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX api_tokens_prefix_idx ON api_tokens (token_prefix);
CREATE INDEX api_tokens_user_idx ON api_tokens (user_id);

CREATE TABLE audit_logs (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    team_id     uuid REFERENCES teams (id) ON DELETE SET NULL,
    user_id     uuid REFERENCES users (id) ON DELETE SET NULL,
    user_email  text,
    action      text NOT NULL,
    resource    text NOT NULL,
    resource_id text,
    ip_address  text,
    user_agent  text,
    metadata    jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX audit_logs_team_idx ON audit_logs (team_id, created_at DESC);
