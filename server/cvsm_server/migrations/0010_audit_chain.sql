-- 0.4: the audit log as hash chains you can prove untouched (issue 17).
--
-- Each team's entries form one chain; entries without a team (account events) form the
-- account chain, keyed by the nil UUID. `chain_id` is the team id at insert time and never
-- changes (deleting a team nulls `team_id`, not `chain_id`). Every entry stores `seq` (per chain,
-- 1, 2, 3, ... gap-free), `prev_hash` (the previous entry's `hash`; 32 zero bytes for seq 1) and
-- `hash` = SHA-256 of the UTF-8 bytes of `cvsm_audit_canonical(...)`: a JSON object with sorted
-- keys and no spaces,
--   {"action":..,"chain":"<uuid>","created_at":"YYYY-MM-DDTHH:MM:SS.ffffffZ","id":"<uuid>",
--    "ip_address":..,"metadata":"<metadata as PostgreSQL's jsonb text>","prev_hash":"<hex>",
--    "resource":..,"resource_id":..,"seq":<n>,"user_agent":..,"user_email":..,"v":1}
-- strings escaped as JSON, NULLs written as null. `user_id` and `team_id` are not hashed: the
-- database nulls them when that user or team is deleted (`user_email` and `chain` keep who and
-- where). A BEFORE INSERT trigger computes the chain fields for every writer (audit.record, the
-- single-statement secret read, anything else), under a per-chain advisory lock, so concurrent
-- appenders in any number of processes keep one order.
--
-- `audit_checkpoints` holds signed chain heads (Ed25519, see audit_chain.py). The retention purge
-- removes whole prefixes of a chain and leaves a signed `purge` checkpoint at the new start; the
-- guard lets an expired entry be deleted only when a checkpoint at or after it exists.

ALTER TABLE audit_logs
    ADD COLUMN chain_id  uuid,
    ADD COLUMN seq       bigint,
    ADD COLUMN prev_hash bytea,
    ADD COLUMN hash      bytea;

CREATE FUNCTION cvsm_audit_canonical(p_chain uuid, p_seq bigint, p_id uuid, p_created timestamptz,
                                     p_user_email text, p_action text, p_resource text,
                                     p_resource_id text, p_ip text, p_user_agent text,
                                     p_metadata jsonb, p_prev bytea) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT '{"action":' || coalesce(to_json(p_action)::text, 'null')
        || ',"chain":"' || p_chain::text
        || '","created_at":"' || to_char(p_created AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
        || '","id":"' || p_id::text
        || '","ip_address":' || coalesce(to_json(p_ip)::text, 'null')
        || ',"metadata":' || coalesce(to_json(p_metadata::text)::text, 'null')
        || ',"prev_hash":"' || encode(p_prev, 'hex')
        || '","resource":' || coalesce(to_json(p_resource)::text, 'null')
        || ',"resource_id":' || coalesce(to_json(p_resource_id)::text, 'null')
        || ',"seq":' || p_seq::text
        || ',"user_agent":' || coalesce(to_json(p_user_agent)::text, 'null')
        || ',"user_email":' || coalesce(to_json(p_user_email)::text, 'null')
        || ',"v":1}'
$$;

CREATE FUNCTION cvsm_audit_hash(p_chain uuid, p_seq bigint, p_id uuid, p_created timestamptz,
                                p_user_email text, p_action text, p_resource text,
                                p_resource_id text, p_ip text, p_user_agent text,
                                p_metadata jsonb, p_prev bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT sha256(convert_to(cvsm_audit_canonical(p_chain, p_seq, p_id, p_created, p_user_email,
                                                  p_action, p_resource, p_resource_id, p_ip,
                                                  p_user_agent, p_metadata, p_prev), 'UTF8'))
$$;

CREATE TABLE audit_checkpoints (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    chain_id   uuid NOT NULL,
    team_id    uuid,             -- no foreign key: a deleted team's checkpoints stay
    seq        bigint NOT NULL,
    head_hash  bytea NOT NULL,
    kind       text NOT NULL CHECK (kind IN ('periodic', 'demand', 'purge')),
    signed_at  timestamptz NOT NULL,
    key_id     text NOT NULL,
    public_key bytea NOT NULL,
    signature  bytea NOT NULL
);
CREATE INDEX audit_checkpoints_chain_idx ON audit_checkpoints (chain_id, seq DESC);

-- Chain the entries already there: per chain in (created_at, id) order.
DO $$
DECLARE
    r record;
    cur_chain uuid := NULL;
    n bigint := 0;
    prev bytea;
    h bytea;
BEGIN
    FOR r IN SELECT * FROM audit_logs
             ORDER BY coalesce(team_id, '00000000-0000-0000-0000-000000000000'), created_at, id
    LOOP
        IF cur_chain IS DISTINCT FROM coalesce(r.team_id, '00000000-0000-0000-0000-000000000000') THEN
            cur_chain := coalesce(r.team_id, '00000000-0000-0000-0000-000000000000');
            n := 0;
            prev := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
        END IF;
        n := n + 1;
        h := cvsm_audit_hash(cur_chain, n, r.id, r.created_at, r.user_email, r.action, r.resource,
                             r.resource_id, r.ip_address, r.user_agent, r.metadata, prev);
        UPDATE audit_logs SET chain_id = cur_chain, seq = n, prev_hash = prev, hash = h
            WHERE id = r.id;
        prev := h;
    END LOOP;
END $$;

ALTER TABLE audit_logs
    ALTER COLUMN chain_id SET NOT NULL,
    ALTER COLUMN seq SET NOT NULL,
    ALTER COLUMN prev_hash SET NOT NULL,
    ALTER COLUMN hash SET NOT NULL;
CREATE UNIQUE INDEX audit_logs_chain_seq_idx ON audit_logs (chain_id, seq);

-- The chain fields of every new entry, whatever it was given. SECURITY DEFINER (owned by the
-- schema owner): the server's role needs no privilege beyond INSERT. The advisory lock
-- (class 0x63767361, "cvsa"; object: the chain) is held to the end of the transaction, so the
-- next appender reads this entry as the head; a rolled-back entry leaves no gap.
CREATE FUNCTION cvsm_audit_chain() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    head_seq bigint;
    head_hash bytea;
BEGIN
    NEW.chain_id := coalesce(NEW.team_id, '00000000-0000-0000-0000-000000000000'::uuid);
    PERFORM pg_advisory_xact_lock(1668707169, hashtext(NEW.chain_id::text));
    SELECT a.seq, a.hash INTO head_seq, head_hash FROM audit_logs a
        WHERE a.chain_id = NEW.chain_id ORDER BY a.seq DESC LIMIT 1;
    IF head_seq IS NULL THEN  -- a new chain, or one the retention purge emptied
        SELECT c.seq, c.head_hash INTO head_seq, head_hash FROM audit_checkpoints c
            WHERE c.chain_id = NEW.chain_id ORDER BY c.seq DESC LIMIT 1;
    END IF;
    NEW.seq := coalesce(head_seq, 0) + 1;
    NEW.prev_hash := coalesce(head_hash,
        '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea);
    NEW.hash := cvsm_audit_hash(NEW.chain_id, NEW.seq, NEW.id, NEW.created_at, NEW.user_email,
                                NEW.action, NEW.resource, NEW.resource_id, NEW.ip_address,
                                NEW.user_agent, NEW.metadata, NEW.prev_hash);
    RETURN NEW;
END $$;

CREATE TRIGGER audit_logs_chain
    BEFORE INSERT ON audit_logs
    FOR EACH ROW EXECUTE FUNCTION cvsm_audit_chain();

-- The guard of 0004, now also keeping the chain fields, and letting an expired entry go only
-- when a signed checkpoint at or after it stands (the purge writes it first).
CREATE OR REPLACE FUNCTION cvsm_audit_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    days integer;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (NEW.id, NEW.user_email, NEW.action, NEW.resource, NEW.resource_id, NEW.ip_address,
            NEW.user_agent, NEW.metadata, NEW.created_at, NEW.chain_id, NEW.seq, NEW.prev_hash,
            NEW.hash)
           IS NOT DISTINCT FROM
           (OLD.id, OLD.user_email, OLD.action, OLD.resource, OLD.resource_id, OLD.ip_address,
            OLD.user_agent, OLD.metadata, OLD.created_at, OLD.chain_id, OLD.seq, OLD.prev_hash,
            OLD.hash)
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

-- Checkpoints are written, never changed: the server's role may read and add them only.
GRANT SELECT, INSERT ON audit_checkpoints TO cvsm_app;
REVOKE ALL ON FUNCTION cvsm_audit_chain() FROM PUBLIC;
