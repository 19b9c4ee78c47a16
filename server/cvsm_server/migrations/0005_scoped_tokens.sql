-- 0.4 (programs' access): API tokens may be scoped to one team, some environments, and reads.
-- A token bound to a team goes with the team.
ALTER TABLE api_tokens
    ADD COLUMN team_id uuid REFERENCES teams (id) ON DELETE CASCADE,
    ADD COLUMN environments text[]
        CHECK (environments IS NULL OR (cardinality(environments) > 0
               AND environments <@ ARRAY['production', 'staging', 'development'])),
    ADD COLUMN read_only boolean NOT NULL DEFAULT false;
