-- 0.5 (issue 36, migration 0019): an id that ever named a team or a secret never names another.
--
-- An end-to-end team and its secrets carry ids their client chooses (the wraps and envelopes
-- are bound to them). The audit log keeps a deleted team's entries in the chain keyed by its id
-- (`audit_seals.chain_id`, `audit_checkpoints`), and a deleted secret's under its id
-- (`resource_id`): whoever could create a team or a secret with such an id would reach them
-- (`GET /teams/<id>/audit/export`, `audit/verify`, filters by resource).
--
-- `retired_ids` holds every id whose team or secret is gone. The database fills it, in the
-- transaction that deletes the row, whatever deletes it (a team's deletion, the account purge
-- that deletes an owner's last teams, the cascade to a team's secrets, anything later), and
-- refuses to create a team or a secret with a retired id. The server checks first and answers
-- with the 409 of an id in use (`teams.create_team`, `secrets.insert_secret`); the trigger is
-- the floor under any other writer. The server's role may read and add, never remove.
CREATE TABLE retired_ids (
    id         uuid PRIMARY KEY,
    kind       text NOT NULL CHECK (kind IN ('team', 'secret')),
    retired_at timestamptz NOT NULL DEFAULT now()
);

GRANT SELECT, INSERT ON retired_ids TO cvsm_app;

CREATE FUNCTION cvsm_retire_teams() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO retired_ids (id, kind) SELECT id, 'team' FROM gone ON CONFLICT (id) DO NOTHING;
    RETURN NULL;
END $$;

CREATE FUNCTION cvsm_retire_secrets() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO retired_ids (id, kind) SELECT id, 'secret' FROM gone ON CONFLICT (id) DO NOTHING;
    RETURN NULL;
END $$;

-- Per statement, with the deleted rows as a transition table: a team's deletion cascading to
-- thousands of secrets is one insert each.
CREATE TRIGGER teams_retire_ids AFTER DELETE ON teams
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION cvsm_retire_teams();
CREATE TRIGGER secrets_retire_ids AFTER DELETE ON secrets
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION cvsm_retire_secrets();

CREATE FUNCTION cvsm_refuse_retired_id() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM retired_ids WHERE id = NEW.id) THEN
        RAISE EXCEPTION 'id % named a deleted % and is retired', NEW.id, TG_TABLE_NAME
            USING ERRCODE = 'unique_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER teams_refuse_retired BEFORE INSERT ON teams
    FOR EACH ROW EXECUTE FUNCTION cvsm_refuse_retired_id();
CREATE TRIGGER secrets_refuse_retired BEFORE INSERT ON secrets
    FOR EACH ROW EXECUTE FUNCTION cvsm_refuse_retired_id();

-- What was deleted before this migration: every id the audit log still keys entries by whose
-- team or secret no longer exists (chains, checkpoints, entries' teams and resources).
INSERT INTO retired_ids (id, kind)
    SELECT DISTINCT ON (id) id, kind FROM (
        SELECT chain_id AS id, 'team' AS kind FROM audit_seals
        UNION ALL SELECT chain_id, 'team' FROM audit_checkpoints
        UNION ALL SELECT team_id, 'team' FROM audit_logs WHERE team_id IS NOT NULL
        UNION ALL
        SELECT resource_id::uuid, resource FROM audit_logs
            WHERE resource IN ('team', 'secret')
              AND resource_id ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
    ) used
    WHERE id <> '00000000-0000-0000-0000-000000000000'::uuid
      AND NOT EXISTS (SELECT 1 FROM teams t WHERE t.id = used.id)
      AND NOT EXISTS (SELECT 1 FROM secrets s WHERE s.id = used.id)
    ORDER BY id, kind <> 'team'
ON CONFLICT (id) DO NOTHING;
