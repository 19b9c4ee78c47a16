-- 0.5 (migration 0037): a sealer batch in O(batch) whatever the log's size (issue 40: <= 100 ms).
--
-- Measured at 200k entries (a batch of 1,000): most of a batch's time was the read rollup's
-- trigger (`cvsm_audit_roll_reads`, 0022/0024): its join of the batch (`sealed`, a transition
-- table) to `audit_logs` on (pos, created_at) was planned as a hash join over a scan of the
-- whole log (the planner costs a probe of every month partition per row, not the one partition
-- the run-time pruning leaves), ~1.8 s a batch at 200k entries and growing with the log. The
-- function now plans without hash or merge joins (a nested loop: one probe of the entry's month
-- per sealed entry); its body stays as it is. (Whoever replaces the function again keeps these
-- settings: CREATE OR REPLACE drops them.)
--
-- The sealer itself: its candidates' `NOT EXISTS` probe of `audit_seals` by `pos` alone probed
-- every month partition per entry; with the entry's time it is one probe of its month. Nothing
-- else changes (order, chain fields, hashes, the mark and the holes of 0025).
--
-- And each entry's hash: `cvsm_audit_hash` and `cvsm_audit_canonical` (0010) were declared
-- IMMUTABLE over STABLE built-ins (`to_char`, `to_json`), which keeps PostgreSQL from inlining
-- them: the sealer ran two SQL functions per entry (~40% of a batch's CPU). STABLE is what they
-- are; inlined, the canonical text and its hash are the same expression, computed in place.

ALTER FUNCTION cvsm_audit_roll_reads() SET enable_hashjoin = off;
ALTER FUNCTION cvsm_audit_roll_reads() SET enable_mergejoin = off;
ALTER FUNCTION cvsm_audit_canonical(uuid, bigint, uuid, timestamptz, text, text, text, text, text,
                                    text, jsonb, bytea) STABLE;
ALTER FUNCTION cvsm_audit_hash(uuid, bigint, uuid, timestamptz, text, text, text, text, text, text,
                               jsonb, bytea) STABLE;

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
        prevs := prevs || head_hash;
        times := times || r.created_at;
        head_seq := head_seq + 1;
        head_hash := cvsm_audit_hash(chain, head_seq, r.id, r.created_at, r.user_email, r.action,
                                     r.resource, r.resource_id, r.ip_address, r.user_agent,
                                     r.metadata, head_hash);
        seqs := seqs || head_seq;
        hashes := hashes || head_hash;
    END LOOP;
    INSERT INTO audit_seals (pos, chain_id, seq, prev_hash, hash, created_at)
        SELECT * FROM unnest(positions, chains, seqs, prevs, hashes, times);
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
