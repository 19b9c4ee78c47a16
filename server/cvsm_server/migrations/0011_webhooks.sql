-- 0.4 (issue 17): signed webhooks per team, and the queue of their deliveries.
--
-- A webhook's signing secret is sealed with the master key (the server must sign with it; AAD
-- `cvsm:webhook:<id>`, see crypto.webhook_aad) and re-sealed by `cvsm-server rotate-key`.
-- A delivery is one event for one webhook: its body (resource metadata, never a secret value)
-- is written in the transaction of the action that caused it, and a background sender posts it
-- (webhook_sender.py): `FOR UPDATE SKIP LOCKED`, `NOTIFY cvsm_webhooks`, exponential backoff.
CREATE TABLE webhooks (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    team_id     uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    url         text NOT NULL,
    events      text[] NOT NULL,
    description text NOT NULL DEFAULT '',
    key_id      text NOT NULL,
    nonce       bytea NOT NULL,
    ciphertext  bytea NOT NULL,
    created_by  uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhooks_team_idx ON webhooks (team_id);
CREATE INDEX webhooks_key_id_idx ON webhooks (key_id);

CREATE TABLE webhook_deliveries (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    webhook_id       uuid NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id         uuid NOT NULL,
    event_type       text NOT NULL,
    payload          jsonb NOT NULL,
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_attempt_at  timestamptz,
    last_status_code integer,
    last_error       text,
    delivered_at     timestamptz,
    failed_at        timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_webhook_idx ON webhook_deliveries (webhook_id, created_at DESC);

GRANT SELECT, INSERT, UPDATE, DELETE ON webhooks, webhook_deliveries TO cvsm_app;
