-- 0.5 (issue 41, migration 0034): the instance's own settings, chosen in its pages rather than in
-- the environment. One row at most (`id` is always true).
--
-- `default_plan`: the plan new teams get, chosen by the first admin on the set-up page and
-- changed later in the admin panel (`instance.settings`). NULL until chosen: new teams then get
-- the operator's `CVSM_DEFAULT_PLAN` (starter when unset), as before this migration.
CREATE TABLE instance_settings (
    id           boolean PRIMARY KEY DEFAULT true CHECK (id),
    default_plan text CHECK (default_plan IN ('starter', 'professional', 'enterprise')),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

GRANT SELECT, INSERT, UPDATE ON instance_settings TO cvsm_app;
