-- 0.5 (issue 41, migration 0028): billing through Stripe (`CVSM_BILLING=stripe`, docs/billing.md).
--
-- `team_billing` is a team's side of Stripe: its Customer (made once, at its first checkout) and
-- the subscription state last fetched from Stripe (never an event's snapshot): the
-- subscription, its Price, Stripe's status, the end of the paid period, whether it ends there.
-- `past_due_since` is when the subscription was first seen past due or unpaid: the team keeps
-- its plan for the grace period (`CVSM_BILLING_GRACE_DAYS`) from then, then falls to Starter
-- (`billing.service.expire_grace`). The team's plan itself stays in `teams.plan`.
--
-- `billing_events` holds the id of every webhook event applied, so a replay (Stripe retries, a
-- forged resend of a signed body within the tolerance) is applied once.
CREATE TABLE team_billing (
    team_id              uuid PRIMARY KEY REFERENCES teams (id) ON DELETE CASCADE,
    customer_id          text NOT NULL UNIQUE,
    subscription_id      text,
    price_id             text,
    status               text,
    current_period_end   timestamptz,
    cancel_at_period_end boolean NOT NULL DEFAULT false,
    past_due_since       timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX team_billing_past_due_idx ON team_billing (past_due_since)
    WHERE past_due_since IS NOT NULL;

CREATE TABLE billing_events (
    id          text PRIMARY KEY,
    type        text NOT NULL,
    team_id     uuid REFERENCES teams (id) ON DELETE SET NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);

GRANT SELECT, INSERT, UPDATE, DELETE ON team_billing TO cvsm_app;
GRANT SELECT, INSERT ON billing_events TO cvsm_app;
