-- 0.5 (CLI sign-in, RFC 8628): a device authorization a terminal asked for (`cvsm login`),
-- confirmed or refused by a signed-in member on the dashboard's /device page. The device code is
-- stored only as its keyed hash; the token is minted when the terminal polls after approval, so
-- it is never stored in the clear here either.
CREATE TABLE device_authorizations (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    device_code_hash  bytea NOT NULL UNIQUE,
    user_code         text NOT NULL CHECK (user_code ~ '^[BCDFGHJKLMNPQRSTVWXZ]{8}$'),
    client_ip         text,
    client_user_agent text NOT NULL DEFAULT '',
    hostname          text NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL DEFAULT now(),
    expires_at        timestamptz NOT NULL,
    interval_seconds  integer NOT NULL DEFAULT 5 CHECK (interval_seconds BETWEEN 1 AND 60),
    last_polled_at    timestamptz,
    status            text NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'approved', 'denied', 'spent')),
    decided_by        uuid REFERENCES users (id) ON DELETE CASCADE,
    decided_at        timestamptz,
    team_id           uuid REFERENCES teams (id) ON DELETE CASCADE,
    environments      text[]
        CHECK (environments IS NULL OR (cardinality(environments) > 0
               AND environments <@ ARRAY['production', 'staging', 'development'])),
    read_only         boolean NOT NULL DEFAULT true,
    token_id          uuid REFERENCES api_tokens (id) ON DELETE SET NULL,
    CHECK (status NOT IN ('approved', 'spent') OR (decided_by IS NOT NULL AND team_id IS NOT NULL))
);

-- A user code names one authorization while it can still be decided.
CREATE UNIQUE INDEX device_authorizations_live_user_code
    ON device_authorizations (user_code) WHERE status = 'pending';
CREATE INDEX device_authorizations_expires_at ON device_authorizations (expires_at);

GRANT SELECT, INSERT, UPDATE, DELETE ON device_authorizations TO cvsm_app;
