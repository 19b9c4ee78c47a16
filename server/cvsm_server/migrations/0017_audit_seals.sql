-- 0.4 (migration 0017): a leaner audit write path (issue 25). An audited read wrote its entry,
-- checked two foreign keys (each a FOR KEY SHARE lock on the team's and the user's row: WAL and,
-- under concurrency, multixacts), and a second later the sealer rewrote the whole row to set its
-- chain fields (a new row version that could not stay HOT, so three more index entries, and a
-- dead version for vacuum). Now the entry is written once and never rewritten:
--
-- * Seals live beside the log: `audit_seals` holds one small row per sealed entry (its `pos`,
--   `chain_id`, `seq`, `prev_hash`, `hash`, exactly as 0010 defines them: canonical form and
--   hash unchanged), appended by `cvsm_audit_seal` in the entry's insertion order (`pos`).
--   `audit_chain_entries` is the log joined to its seals (what verification, proofs, checkpoints,
--   the export and the purge read). Seals are append-only (a guard refuses any UPDATE, and a
--   DELETE except of the seal of an entry the retention purge removed, which a trigger does).
-- * Finding the entries not sealed yet without a mark on them: `pos` comes from
--   `cvsm_audit_next_pos()`, which gives the writer's transaction its id before it takes the
--   position. So every entry with `pos` up to the last position taken at time t belongs to a
--   transaction whose id is below any id assigned after t; `audit_seal_state` keeps the position
--   below which every entry is sealed (`sealed_below`) and a candidate (`pending_below`) that
--   becomes it once every transaction older than `pending_xmax` has ended (all their entries are
--   then visible, and sealed by the next call). The sealer scans only `pos >= sealed_below` (the
--   primary key's index) for entries without a seal. An entry of a transaction still open waits,
--   as before, for a later batch. A writing transaction left open holds the mark back (as it
--   holds back vacuum), so meanwhile each call scans every entry since: more work, never a miss.
--
-- audit_logs, constraint by constraint and index by index:
-- * PRIMARY KEY (id): moved to `pos` (audit_logs_pkey). A random uuid lands on a random leaf of
--   its index (after each checkpoint, a full-page image in the WAL for almost every insert);
--   nothing looks an entry up by id (the seals link by `pos`), and the server's role cannot
--   choose an id (gen_random_uuid() gives it). `pos` ascends: its inserts go to the rightmost
--   leaf, and the sealer's scan from its mark needs that index anyway.
-- * FOREIGN KEY team_id -> teams ON DELETE SET NULL: dropped; its check locked the team row on
--   every audited read. The nulling is done by `teams_audit_forget` (AFTER DELETE, per
--   statement), which first seals every committed entry (an entry's chain is its team at insert
--   time) and then nulls the team of the sealed ones. An entry committed after the team's delete
--   (it was written concurrently) keeps the deleted team's id: its chain is still right, and
--   retention treats a team that no longer exists like no team (90 days).
-- * FOREIGN KEY user_id -> users ON DELETE SET NULL: dropped (it locked the user row on every
--   entry); `users_audit_forget` nulls the actor when users are deleted (one scan per statement,
--   as the foreign key's action did per row: no index on user_id, deletions are rare).
-- * audit_logs_team_idx (team_id, created_at DESC): kept; the audit page, its filters and
--   choices, insights (readers, unread secrets) and the team nulling use it.
-- * audit_logs_chain_seq_idx (chain_id, seq): moved to audit_seals (its unique key).
-- * audit_logs_unsealed_idx (pos) WHERE seq IS NULL: dropped; the primary key on `pos` serves
--   the sealer's scan from `sealed_below`. Two index entries per insert instead of three.
-- * audit_logs_sealed_check and the chain columns: gone with the columns (moved to the seals).
-- * Triggers: the guard (UPDATE, DELETE, TRUNCATE) stays; the sealing exception of 0012's
--   UPDATE trigger goes: the only change to an entry left is nulling a deleted actor.

-- Everything committed is sealed first, by 0012's sealer (it honours a pinned chain_id), under a
-- lock that waits for every writer in flight.
LOCK TABLE audit_logs IN ACCESS EXCLUSIVE MODE;
DO $$
BEGIN
    WHILE cvsm_audit_seal(5000, true) = 5000 LOOP
    END LOOP;
END $$;

CREATE TABLE audit_seals (
    pos       bigint PRIMARY KEY,  -- audit_logs.pos; no foreign key (its check locks the entry)
    chain_id  uuid NOT NULL,
    seq       bigint NOT NULL,
    prev_hash bytea NOT NULL,
    hash      bytea NOT NULL,
    CONSTRAINT audit_seals_chain_seq_key UNIQUE (chain_id, seq)
);
INSERT INTO audit_seals (pos, chain_id, seq, prev_hash, hash)
    SELECT pos, chain_id, seq, prev_hash, hash FROM audit_logs WHERE seq IS NOT NULL;

DROP TRIGGER audit_logs_immutable_update ON audit_logs;
DROP INDEX audit_logs_chain_seq_idx;
DROP INDEX audit_logs_unsealed_idx;
ALTER TABLE audit_logs
    DROP CONSTRAINT audit_logs_sealed_check,
    DROP CONSTRAINT audit_logs_team_id_fkey,
    DROP CONSTRAINT audit_logs_user_id_fkey,
    DROP CONSTRAINT audit_logs_pkey,
    DROP COLUMN chain_id,
    DROP COLUMN seq,
    DROP COLUMN prev_hash,
    DROP COLUMN hash;

-- `pos`: from a plain sequence through cvsm_audit_next_pos() instead of an identity. CACHE 1 (the
-- default) matters: positions are handed out in order, never ahead by another session's cache.
ALTER TABLE audit_logs ALTER COLUMN pos DROP IDENTITY;  -- drops the identity's sequence
CREATE SEQUENCE audit_logs_pos_seq AS bigint OWNED BY audit_logs.pos;
SELECT setval('audit_logs_pos_seq', coalesce((SELECT max(pos) FROM audit_logs), 0) + 1, false);

-- The writer's transaction id first (the CASE evaluates its condition first), then the
-- position. An SQL function the planner inlines: no call per insert.
CREATE FUNCTION cvsm_audit_next_pos() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN pg_current_xact_id() IS NOT NULL THEN nextval('audit_logs_pos_seq') END
$$;
ALTER TABLE audit_logs ALTER COLUMN pos SET DEFAULT cvsm_audit_next_pos();
ALTER TABLE audit_logs
    ADD CONSTRAINT audit_logs_pkey PRIMARY KEY (pos),
    ALTER COLUMN id SET NOT NULL;
GRANT USAGE ON SEQUENCE audit_logs_pos_seq TO cvsm_app;

CREATE TABLE audit_seal_state (
    id            boolean PRIMARY KEY DEFAULT true CHECK (id),
    sealed_below  bigint NOT NULL,  -- every entry with a lower pos is sealed
    pending_below bigint NOT NULL,  -- becomes sealed_below once every transaction whose id is
    pending_xmax  xid8 NOT NULL     -- below pending_xmax has ended (and a sealer ran after)
);
INSERT INTO audit_seal_state (sealed_below, pending_below, pending_xmax)
    SELECT coalesce(max(pos), 0) + 1, coalesce(max(pos), 0) + 1, '0'::xid8 FROM audit_logs;

CREATE VIEW audit_chain_entries AS
    SELECT a.*, s.chain_id, s.seq, s.prev_hash, s.hash
    FROM audit_logs a JOIN audit_seals s ON s.pos = a.pos;

GRANT SELECT ON audit_seals, audit_chain_entries TO cvsm_app;

-- Retention: an entry without a team, or whose team no longer exists, is kept 90 days.
CREATE OR REPLACE FUNCTION cvsm_audit_retention_days(p_team_id uuid) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN t.id IS NULL THEN 90
        WHEN t.plan = 'starter' THEN 30
        WHEN t.plan = 'professional' THEN 90
        ELSE NULL
    END
    FROM (SELECT 1) one LEFT JOIN teams t ON t.id = p_team_id
$$;

-- Seal up to p_limit committed entries (oldest `pos` first); returns how many, or NULL when
-- p_wait is false and another sealer holds the lock. As 0012's, with the chain fields appended
-- to audit_seals instead of written into the entries, and the scan starting at `sealed_below`.
CREATE OR REPLACE FUNCTION cvsm_audit_seal(p_limit integer, p_wait boolean) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    st audit_seal_state;
    horizon xid8;
    top bigint;
    fresh xid8;
    r record;
    chain uuid := NULL;
    head_seq bigint;
    head_hash bytea;
    positions bigint[] := '{}';
    chains uuid[] := '{}';
    seqs bigint[] := '{}';
    prevs bytea[] := '{}';
    hashes bytea[] := '{}';
BEGIN
    IF p_wait THEN
        PERFORM pg_advisory_xact_lock(1668707169, 0);
    ELSIF NOT pg_try_advisory_xact_lock(1668707169, 0) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO st FROM audit_seal_state;
    -- Every transaction whose id is below this has ended before the scan takes its snapshot.
    horizon := pg_snapshot_xmin(pg_current_snapshot());
    -- The next candidate: the last position taken so far, then a transaction id assigned now
    -- (above that of every writer holding a position up to it). Only where this transaction
    -- has no id yet, and under READ COMMITTED (fresh snapshots per statement, which the
    -- reasoning needs); otherwise the mark simply stays where it is this time.
    IF pg_current_xact_id_if_assigned() IS NULL
       AND current_setting('transaction_isolation') = 'read committed' THEN
        top := pg_sequence_last_value('audit_logs_pos_seq');
        IF top IS NOT NULL
           AND NOT (top + 1 = st.pending_below AND st.sealed_below = st.pending_below) THEN
            fresh := pg_current_xact_id();
        END IF;
    END IF;
    FOR r IN
        SELECT u.* FROM (
            SELECT a.id, coalesce(a.team_id, '00000000-0000-0000-0000-000000000000'::uuid) AS chain,
                   a.pos, a.created_at, a.user_email, a.action, a.resource, a.resource_id,
                   a.ip_address, a.user_agent, a.metadata
            FROM audit_logs a
            WHERE a.pos >= st.sealed_below
              AND NOT EXISTS (SELECT 1 FROM audit_seals s WHERE s.pos = a.pos)
            ORDER BY a.pos LIMIT p_limit) u
        ORDER BY u.chain, u.pos
    LOOP
        IF chain IS DISTINCT FROM r.chain THEN
            chain := r.chain;
            head_seq := NULL;
            head_hash := NULL;
            SELECT s.seq, s.hash INTO head_seq, head_hash FROM audit_seals s
                WHERE s.chain_id = chain ORDER BY s.seq DESC LIMIT 1;
            IF head_seq IS NULL THEN  -- a new chain, or one the retention purge emptied
                SELECT c.seq, c.head_hash INTO head_seq, head_hash FROM audit_checkpoints c
                    WHERE c.chain_id = chain ORDER BY c.seq DESC LIMIT 1;
            END IF;
            head_seq := coalesce(head_seq, 0);
            head_hash := coalesce(head_hash,
                '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea);
        END IF;
        positions := positions || r.pos;
        chains := chains || chain;
        prevs := prevs || head_hash;
        head_seq := head_seq + 1;
        head_hash := cvsm_audit_hash(chain, head_seq, r.id, r.created_at, r.user_email, r.action,
                                     r.resource, r.resource_id, r.ip_address, r.user_agent,
                                     r.metadata, head_hash);
        seqs := seqs || head_seq;
        hashes := hashes || head_hash;
    END LOOP;
    INSERT INTO audit_seals (pos, chain_id, seq, prev_hash, hash)
        SELECT * FROM unnest(positions, chains, seqs, prevs, hashes);
    -- Every visible entry from sealed_below on is sealed now (unless the batch was cut short):
    -- once every transaction below the candidate's id has ended, it becomes the mark, and this
    -- call's candidate the next one.
    IF fresh IS NOT NULL AND cardinality(positions) < p_limit AND horizon >= st.pending_xmax THEN
        UPDATE audit_seal_state
            SET sealed_below = greatest(st.sealed_below, st.pending_below),
                pending_below = greatest(st.sealed_below, st.pending_below, top + 1),
                pending_xmax = fresh;
    END IF;
    RETURN cardinality(positions);
END $$;

-- Entries are immutable: the only change is nulling the actor of a deleted user, or the team
-- of a deleted team once the entry is sealed (its chain is fixed then); the only deletion is
-- the retention purge's, of an expired entry whose seal a signed checkpoint covers.
CREATE OR REPLACE FUNCTION cvsm_audit_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    days integer;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (NEW.id, NEW.user_email, NEW.action, NEW.resource, NEW.resource_id, NEW.ip_address,
            NEW.user_agent, NEW.metadata, NEW.created_at, NEW.pos)
           IS NOT DISTINCT FROM
           (OLD.id, OLD.user_email, OLD.action, OLD.resource, OLD.resource_id, OLD.ip_address,
            OLD.user_agent, OLD.metadata, OLD.created_at, OLD.pos)
           AND (NEW.user_id IS NOT DISTINCT FROM OLD.user_id
                OR (NEW.user_id IS NULL AND NOT EXISTS (SELECT 1 FROM users WHERE id = OLD.user_id)))
           AND (NEW.team_id IS NOT DISTINCT FROM OLD.team_id
                OR (NEW.team_id IS NULL AND NOT EXISTS (SELECT 1 FROM teams WHERE id = OLD.team_id)
                    AND EXISTS (SELECT 1 FROM audit_seals s WHERE s.pos = OLD.pos)))
        THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'audit log entries are immutable' USING ERRCODE = 'insufficient_privilege';
    ELSIF TG_OP = 'DELETE' THEN
        days := cvsm_audit_retention_days(OLD.team_id);
        IF days IS NOT NULL AND OLD.created_at < now() - make_interval(days => days)
           AND EXISTS (SELECT 1 FROM audit_seals s
                       JOIN audit_checkpoints c ON c.chain_id = s.chain_id AND c.seq >= s.seq
                       WHERE s.pos = OLD.pos) THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'audit log entries are immutable' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER audit_logs_immutable_update
    BEFORE UPDATE ON audit_logs
    FOR EACH ROW EXECUTE FUNCTION cvsm_audit_guard();

-- A removed entry's seal goes with it (the purge; the guard let the entry go).
CREATE FUNCTION cvsm_audit_unseal_removed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    DELETE FROM audit_seals s USING removed r WHERE s.pos = r.pos;
    RETURN NULL;
END $$;
CREATE TRIGGER audit_logs_unseal_removed
    AFTER DELETE ON audit_logs REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION cvsm_audit_unseal_removed();

-- Seals are appended, never changed; one goes only after its entry went.
CREATE FUNCTION cvsm_audit_seal_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND NOT EXISTS (SELECT 1 FROM audit_logs WHERE pos = OLD.pos) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit seals are immutable' USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER audit_seals_immutable
    BEFORE UPDATE OR DELETE ON audit_seals
    FOR EACH ROW EXECUTE FUNCTION cvsm_audit_seal_guard();
CREATE TRIGGER audit_seals_no_truncate
    BEFORE TRUNCATE ON audit_seals
    FOR EACH STATEMENT EXECUTE FUNCTION cvsm_audit_no_truncate();

-- What the dropped foreign keys did on delete. A team's entries are sealed before their team
-- reference goes (the sealer takes the chain from it); this holds the sealer's lock to the end
-- of the deleting transaction.
CREATE FUNCTION cvsm_audit_forget_teams() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    WHILE cvsm_audit_seal(5000, true) = 5000 LOOP
    END LOOP;
    UPDATE audit_logs a SET team_id = NULL FROM gone g
        WHERE a.team_id = g.id AND EXISTS (SELECT 1 FROM audit_seals s WHERE s.pos = a.pos);
    RETURN NULL;
END $$;
CREATE TRIGGER teams_audit_forget
    AFTER DELETE ON teams REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION cvsm_audit_forget_teams();

CREATE FUNCTION cvsm_audit_forget_users() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    UPDATE audit_logs a SET user_id = NULL FROM gone g WHERE a.user_id = g.id;
    RETURN NULL;
END $$;
CREATE TRIGGER users_audit_forget
    AFTER DELETE ON users REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION cvsm_audit_forget_users();

REVOKE ALL ON FUNCTION cvsm_audit_unseal_removed(), cvsm_audit_forget_teams(),
    cvsm_audit_forget_users() FROM PUBLIC;
