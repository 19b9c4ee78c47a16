-- 0.4: audit entries are sealed into their chain just after they commit, in batches, instead of
-- one at a time while their transaction is open (issue 17).
--
-- Until now the BEFORE INSERT trigger of 0010 took the chain's advisory lock and held it to the
-- end of the writer's transaction, WAL flush included: every append to one team's chain waited
-- for the one before to commit, so a busy team was capped at one commit at a time. Now a writer
-- inserts the entry with its chain fields NULL (the server's role may not even name them: its
-- INSERT privilege covers the entry's own columns only) and commits at once, concurrently with
-- any other writer. `cvsm_audit_seal` then links every committed entry not sealed yet, in the
-- order it was inserted (`pos`), to the end of its chain: `chain_id`, `seq`, `prev_hash`, `hash`
-- exactly as 0010 defines them (canonical form and hash unchanged), each set once. Sealers in any
-- number of processes take one advisory lock, so a chain keeps one gap-free order; entries of a
-- transaction still open are invisible to the sealer and join a later batch. The server's
-- background jobs run the sealer every CVSM_AUDIT_SEAL_SECONDS (1 s by default), and
-- verification, export, checkpoints and the retention purge run it first (audit_chain.py).
--
-- An entry's chain is its team at insert time: the sealer takes `team_id` (nil UUID for account
-- events), and if the team is deleted before its entries are sealed, the guard pins their
-- `chain_id` to the team before the foreign key nulls `team_id`.

DROP TRIGGER audit_logs_chain ON audit_logs;
DROP FUNCTION cvsm_audit_chain();

ALTER TABLE audit_logs
    ALTER COLUMN chain_id DROP NOT NULL,
    ALTER COLUMN seq DROP NOT NULL,
    ALTER COLUMN prev_hash DROP NOT NULL,
    ALTER COLUMN hash DROP NOT NULL,
    ADD COLUMN pos bigint GENERATED ALWAYS AS IDENTITY,
    -- sealed: all chain fields at once; unsealed: none but (a deleted team's) chain_id
    ADD CONSTRAINT audit_logs_sealed_check CHECK (
        (seq IS NULL) = (prev_hash IS NULL) AND (seq IS NULL) = (hash IS NULL)
        AND (seq IS NULL OR chain_id IS NOT NULL));

-- Sealed entries by chain position; unsealed ones (few, briefly) by insertion order.
DROP INDEX audit_logs_chain_seq_idx;
CREATE UNIQUE INDEX audit_logs_chain_seq_idx ON audit_logs (chain_id, seq) WHERE seq IS NOT NULL;
CREATE INDEX audit_logs_unsealed_idx ON audit_logs (pos) WHERE seq IS NULL;

-- The server's role inserts an entry's own columns; the chain fields, `id`, `created_at` and
-- `pos` take their defaults (the sealer writes the chain fields).
REVOKE INSERT ON audit_logs FROM cvsm_app;
GRANT INSERT (team_id, user_id, user_email, action, resource, resource_id, ip_address, user_agent,
              metadata) ON audit_logs TO cvsm_app;

-- Seal up to p_limit committed entries (oldest `pos` first); returns how many, or NULL when
-- p_wait is false and another sealer holds the lock. SECURITY DEFINER (owned by the schema
-- owner): the server's role has no UPDATE on the log. The lock (class "cvsa", object 0) is held
-- to the end of the caller's transaction, so the next sealer reads these entries as the heads.
-- The hashes are chained in a loop, then written by one UPDATE.
CREATE FUNCTION cvsm_audit_seal(p_limit integer, p_wait boolean) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    r record;
    chain uuid := NULL;
    head_seq bigint;
    head_hash bytea;
    ids uuid[] := '{}';
    chains uuid[] := '{}';
    seqs bigint[] := '{}';
    prevs bytea[] := '{}';
    hashes bytea[] := '{}';
    sealed integer;
BEGIN
    IF p_wait THEN
        PERFORM pg_advisory_xact_lock(1668707169, 0);
    ELSIF NOT pg_try_advisory_xact_lock(1668707169, 0) THEN
        RETURN NULL;
    END IF;
    FOR r IN
        SELECT u.* FROM (
            SELECT a.id, coalesce(a.chain_id, a.team_id,
                                  '00000000-0000-0000-0000-000000000000'::uuid) AS chain,
                   a.pos, a.created_at, a.user_email, a.action, a.resource, a.resource_id,
                   a.ip_address, a.user_agent, a.metadata
            FROM audit_logs a WHERE a.seq IS NULL ORDER BY a.pos LIMIT p_limit) u
        ORDER BY u.chain, u.pos
    LOOP
        IF chain IS DISTINCT FROM r.chain THEN
            chain := r.chain;
            head_seq := NULL;
            head_hash := NULL;
            SELECT a.seq, a.hash INTO head_seq, head_hash FROM audit_logs a
                WHERE a.chain_id = chain AND a.seq IS NOT NULL ORDER BY a.seq DESC LIMIT 1;
            IF head_seq IS NULL THEN  -- a new chain, or one the retention purge emptied
                SELECT c.seq, c.head_hash INTO head_seq, head_hash FROM audit_checkpoints c
                    WHERE c.chain_id = chain ORDER BY c.seq DESC LIMIT 1;
            END IF;
            head_seq := coalesce(head_seq, 0);
            head_hash := coalesce(head_hash,
                '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea);
        END IF;
        ids := ids || r.id;
        chains := chains || chain;
        prevs := prevs || head_hash;
        head_seq := head_seq + 1;
        head_hash := cvsm_audit_hash(chain, head_seq, r.id, r.created_at, r.user_email, r.action,
                                     r.resource, r.resource_id, r.ip_address, r.user_agent,
                                     r.metadata, head_hash);
        seqs := seqs || head_seq;
        hashes := hashes || head_hash;
    END LOOP;
    -- If a deleted user or team nulled an entry's reference meanwhile, this updates the newer
    -- version (same hashed content; the guard pinned a team's chain). Nothing else can change
    -- or remove an unsealed entry, so all of them are written, or none.
    UPDATE audit_logs a SET chain_id = u.chain, seq = u.seq, prev_hash = u.prev, hash = u.hash
        FROM unnest(ids, chains, seqs, prevs, hashes) AS u(id, chain, seq, prev, hash)
        WHERE a.id = u.id AND a.seq IS NULL;
    GET DIAGNOSTICS sealed = ROW_COUNT;
    IF sealed <> cardinality(ids) THEN
        RAISE EXCEPTION 'audit sealing: % of % entries changed while being sealed',
            cardinality(ids) - sealed, cardinality(ids);
    END IF;
    RETURN sealed;
END $$;
REVOKE ALL ON FUNCTION cvsm_audit_seal(integer, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cvsm_audit_seal(integer, boolean) TO cvsm_app;

-- The guard of 0010, now also letting the sealer set an entry's chain fields once, and pinning
-- an unsealed entry's chain when its team goes. A sealing update (chain fields set, nothing else
-- changed) is told apart by the trigger's WHEN and skips the function: sealing stays cheap.
CREATE OR REPLACE FUNCTION cvsm_audit_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    days integer;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF OLD.seq IS NULL AND OLD.chain_id IS NULL AND NEW.chain_id IS NULL
           AND OLD.team_id IS NOT NULL AND NEW.team_id IS NULL THEN
            NEW.chain_id := OLD.team_id;
        END IF;
        IF (NEW.id, NEW.user_email, NEW.action, NEW.resource, NEW.resource_id, NEW.ip_address,
            NEW.user_agent, NEW.metadata, NEW.created_at, NEW.pos)
           IS NOT DISTINCT FROM
           (OLD.id, OLD.user_email, OLD.action, OLD.resource, OLD.resource_id, OLD.ip_address,
            OLD.user_agent, OLD.metadata, OLD.created_at, OLD.pos)
           AND ((NEW.chain_id, NEW.seq, NEW.prev_hash, NEW.hash)
                IS NOT DISTINCT FROM (OLD.chain_id, OLD.seq, OLD.prev_hash, OLD.hash)
                -- sealing (or pinning): the chain fields go from unset to set, once
                OR (OLD.seq IS NULL AND NEW.chain_id IS NOT NULL
                    AND (OLD.chain_id IS NULL OR NEW.chain_id = OLD.chain_id)))
           AND (NEW.user_id IS NOT DISTINCT FROM OLD.user_id
                OR (NEW.user_id IS NULL AND NOT EXISTS (SELECT 1 FROM users WHERE id = OLD.user_id)))
           AND (NEW.team_id IS NOT DISTINCT FROM OLD.team_id
                OR (NEW.team_id IS NULL AND NOT EXISTS (SELECT 1 FROM teams WHERE id = OLD.team_id)))
        THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'audit log entries are immutable' USING ERRCODE = 'insufficient_privilege';
    ELSIF TG_OP = 'DELETE' THEN
        days := cvsm_audit_retention_days(OLD.team_id);
        IF days IS NOT NULL AND OLD.created_at < now() - make_interval(days => days)
           AND EXISTS (SELECT 1 FROM audit_checkpoints c
                       WHERE c.chain_id = OLD.chain_id AND c.seq >= OLD.seq) THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'audit log entries are immutable' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER audit_logs_immutable ON audit_logs;
CREATE TRIGGER audit_logs_immutable
    BEFORE DELETE ON audit_logs
    FOR EACH ROW EXECUTE FUNCTION cvsm_audit_guard();
CREATE TRIGGER audit_logs_immutable_update
    BEFORE UPDATE ON audit_logs
    FOR EACH ROW
    WHEN (NOT (OLD.seq IS NULL AND NEW.seq IS NOT NULL
               AND (OLD.chain_id IS NULL OR NEW.chain_id = OLD.chain_id)
               AND (NEW.id, NEW.team_id, NEW.user_id, NEW.user_email, NEW.action, NEW.resource,
                    NEW.resource_id, NEW.ip_address, NEW.user_agent, NEW.metadata,
                    NEW.created_at, NEW.pos)
                   IS NOT DISTINCT FROM
                   (OLD.id, OLD.team_id, OLD.user_id, OLD.user_email, OLD.action, OLD.resource,
                    OLD.resource_id, OLD.ip_address, OLD.user_agent, OLD.metadata,
                    OLD.created_at, OLD.pos)))
    EXECUTE FUNCTION cvsm_audit_guard();
