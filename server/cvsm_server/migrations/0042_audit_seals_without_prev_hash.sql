-- 0.5 (migration 0042): a seal no longer stores its entry's link (issue 40, item 3: narrow
-- seals, fewer bytes per entry).
--
-- A seal held `prev_hash`, the hash of the entry before it in its chain: the `hash` of the seal
-- at seq - 1, or for the first entry after a purge the head of the signed `purge` checkpoint at
-- seq - 1, or 32 zero bytes at seq 1 (0010, 0017). It is exactly what the chain already holds
-- one row earlier, written a second time: 33 B of a seal's 141 (bench/growth.py at 5M entries:
-- 645 B an entry for the log, the seals and their indexes). It is dropped; whoever needs an
-- entry's link reads the seal before it (`cvsm_audit_prev_hash(chain, seq)`, one probe of the
-- seals' (chain_id, seq) key, or of the checkpoints' key) or, walking a chain in order, takes the
-- hash of the row before (verification, the export and the archive do).
--
-- Nothing a hash covers changes: the canonical form still names `prev_hash` (0010), the sealer
-- hashes each entry with its chain's head as before, and every hash already stored stays right.
-- Verification checks the same thing with one column fewer to trust: an entry's hash must be
-- the SHA-256 of its canonical form with the hash of the entry before it (an edited link, as an
-- edited entry, no longer matches its hash; a removed entry leaves its seq missing). The export
-- and the archive still carry each entry's `prev_hash` (the 0.4 API lock), computed as they
-- walk the chain. Seals written before keep their bytes until their month leaves (a dropped
-- column's space returns as rows are rewritten or dropped); new seals are 108 B.

DROP VIEW audit_chain_entries;
ALTER TABLE audit_seals DROP COLUMN prev_hash;
CREATE VIEW audit_chain_entries AS
    SELECT a.*, s.chain_id, s.seq, s.hash
    FROM audit_logs a JOIN audit_seals s ON s.pos = a.pos;
GRANT SELECT ON audit_chain_entries TO cvsm_app;

-- The link of a chain's entry `p_seq`: the hash of the entry before it (its seal; with two
-- seals at that seq, which only a tampered chain has, the first by `pos`), or the signed purge
-- checkpoint's head there where the purge removed it, or 32 zero bytes for the chain's first
-- entry; NULL where none is (a chain that lost entries without a purge checkpoint).
CREATE FUNCTION cvsm_audit_prev_hash(p_chain uuid, p_seq bigint) RETURNS bytea
LANGUAGE sql STABLE SET search_path = public, pg_temp AS $$
    SELECT CASE WHEN p_seq <= 1
                THEN '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea
                ELSE coalesce(
                    (SELECT s.hash FROM audit_seals s
                     WHERE s.chain_id = p_chain AND s.seq = p_seq - 1 ORDER BY s.pos LIMIT 1),
                    (SELECT c.head_hash FROM audit_checkpoints c
                     WHERE c.chain_id = p_chain AND c.seq = p_seq - 1 AND c.kind = 'purge'
                     ORDER BY c.signed_at LIMIT 1))
           END
$$;
GRANT EXECUTE ON FUNCTION cvsm_audit_prev_hash(uuid, bigint) TO cvsm_app;

-- 0041's sealer, without the seals' link.
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
    hashes bytea[] := '{}';
    times timestamptz[] := '{}';
    top_seen bigint;
    gaps bigint[];
    scanned bigint;
    mark bigint;
BEGIN
    IF p_wait THEN
        PERFORM pg_advisory_xact_lock(1668707169, 0);
    ELSIF NOT pg_try_advisory_xact_lock(1668707169, 0) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO st FROM audit_seal_state;
    horizon := pg_snapshot_xmin(pg_current_snapshot());
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
            WHERE a.pos = ANY(st.holes) AND a.pos >= st.sealed_below
              AND NOT EXISTS (SELECT 1 FROM audit_seals s
                              WHERE s.pos = a.pos AND s.created_at = a.created_at)
            UNION ALL
            (SELECT a.id, coalesce(a.team_id, '00000000-0000-0000-0000-000000000000'::uuid),
                    a.pos, a.created_at, a.user_email, a.action, a.resource, a.resource_id,
                    a.ip_address, a.user_agent, a.metadata
             FROM audit_logs a
             WHERE a.pos >= greatest(st.scanned_below, st.sealed_below)
               AND NOT EXISTS (SELECT 1 FROM audit_seals s
                               WHERE s.pos = a.pos AND s.created_at = a.created_at)
             ORDER BY a.pos LIMIT p_limit)
            ORDER BY pos LIMIT p_limit) u
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
        times := times || r.created_at;
        head_seq := head_seq + 1;
        head_hash := cvsm_audit_hash(chain, head_seq, r.id, r.created_at, r.user_email, r.action,
                                     r.resource, r.resource_id, r.ip_address, r.user_agent,
                                     r.metadata, head_hash);
        seqs := seqs || head_seq;
        hashes := hashes || head_hash;
    END LOOP;
    -- in the entries' order (`pos`): the seals' key grows at its right edge only
    INSERT INTO audit_seals (pos, chain_id, seq, hash, created_at)
        SELECT * FROM unnest(positions, chains, seqs, hashes, times)
            AS u(pos, chain_id, seq, hash, created_at)
        ORDER BY u.pos;
    -- Where the next call starts: past the highest entry sealed now, plus the holes below it
    -- (positions with no visible entry: a writer's transaction still open, or rolled back).
    scanned := greatest(st.scanned_below, st.sealed_below);
    gaps := st.holes;
    top_seen := (SELECT max(p) FROM unnest(positions) p);
    IF top_seen IS NOT NULL AND top_seen >= scanned THEN
        gaps := ARRAY(
            SELECT h FROM unnest(st.holes) h
            UNION
            SELECT g FROM generate_series(scanned, top_seen) g
            EXCEPT SELECT unnest(positions)
            EXCEPT SELECT s.pos FROM audit_seals s WHERE s.pos >= scanned AND s.pos <= top_seen
            ORDER BY 1);
        scanned := top_seen + 1;
    ELSIF cardinality(positions) > 0 THEN
        gaps := ARRAY(SELECT h FROM unnest(st.holes) h EXCEPT SELECT unnest(positions)
                       ORDER BY 1);
    END IF;
    mark := st.sealed_below;
    IF fresh IS NOT NULL AND cardinality(positions) < p_limit AND horizon >= st.pending_xmax THEN
        mark := greatest(st.sealed_below, st.pending_below);
        UPDATE audit_seal_state
            SET sealed_below = mark,
                pending_below = greatest(st.sealed_below, st.pending_below, top + 1),
                pending_xmax = fresh;
    END IF;
    IF mark > st.sealed_below OR scanned <> st.scanned_below OR gaps <> st.holes THEN
        UPDATE audit_seal_state
            SET scanned_below = greatest(scanned, mark),
                holes = ARRAY(SELECT h FROM unnest(gaps) h WHERE h >= mark ORDER BY 1);
    END IF;
    RETURN cardinality(positions);
END $$;
