-- 0.5 (issue 31): automatic secret rotation (secret_rotation.py, rotation_targets.py).
--
-- A policy says how often a secret rotates, how its next value is generated and where the value
-- is applied (a PostgreSQL role, two alternating roles, a signed webhook, or nothing but the
-- secret itself). The target's settings hold nothing secret: its admin credential is a
-- reference to another live secret of the same team, read (and audited) at each rotation; a
-- webhook target's signing secret is sealed with the master key (AAD `cvsm:rotation-target:<id>`).
--
-- A run is one rotation, after AWS's four steps: `created` (the pending value, sealed with AAD
-- `cvsm:rotation:<team>:<secret>:<run>`, is never in `secrets` or `secret_versions`, so no read,
-- export, rollback or share can serve it), `set` (applied on the target), `tested` (a connection
-- with it worked), then `finished` (the pending value became the current version, in the
-- transaction of its audit entry) or `failed`. At most one open run per secret; a process that
-- died mid-run leaves it open and the next pass resumes it.
CREATE TABLE secret_rotation_policies (
    secret_id        uuid PRIMARY KEY REFERENCES secrets (id) ON DELETE CASCADE,
    team_id          uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    interval_days    integer NOT NULL CHECK (interval_days BETWEEN 1 AND 3650),
    enabled          boolean NOT NULL DEFAULT true,
    generator        jsonb NOT NULL,
    target_kind      text NOT NULL,
    target           jsonb NOT NULL,
    id               uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    key_id           text,
    nonce            bytea,
    ciphertext       bytea,
    next_rotation_at timestamptz NOT NULL,
    last_rotated_at  timestamptz,
    failures         integer NOT NULL DEFAULT 0,
    last_error       text,
    last_failed_at   timestamptz,
    created_by       uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX secret_rotation_policies_due_idx ON secret_rotation_policies (next_rotation_at)
    WHERE enabled;
CREATE INDEX secret_rotation_policies_key_id_idx ON secret_rotation_policies (key_id);

CREATE TABLE secret_rotations (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    secret_id    uuid NOT NULL REFERENCES secrets (id) ON DELETE CASCADE,
    team_id      uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    from_version integer NOT NULL,
    to_version   integer,
    step         text NOT NULL DEFAULT 'created'
                 CHECK (step IN ('created', 'set', 'tested', 'finished', 'failed')),
    requested_by uuid REFERENCES users (id) ON DELETE SET NULL,
    target_user  text,
    key_id       text,
    nonce        bytea,
    ciphertext   bytea,
    error        text,
    started_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);
CREATE UNIQUE INDEX secret_rotations_open_idx ON secret_rotations (secret_id)
    WHERE step IN ('created', 'set', 'tested');
CREATE INDEX secret_rotations_history_idx ON secret_rotations (secret_id, started_at DESC);
CREATE INDEX secret_rotations_key_id_idx ON secret_rotations (key_id);

GRANT SELECT, INSERT, UPDATE, DELETE ON secret_rotation_policies, secret_rotations TO cvsm_app;
