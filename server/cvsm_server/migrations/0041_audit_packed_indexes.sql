-- 0.5 (migration 0041): the audit log's indexes fill their pages (issue 40, item 3: fewer bytes
-- per entry).
--
-- Measured (bench/growth.py, and a table shaped like `audit_seals` filled with 500k seals of 100
-- chains in batches of 5,000): the seals' primary key (pos, created_at) took 41-48 B an entry
-- where its tuples need 28: the sealer inserted each batch chain by chain, so every batch
-- wrote positions all over the key's last pages, splitting them half full. It now inserts a
-- batch in the entries' order (`pos`): the key grows at its right edge, 31.5 B an entry at the
-- default fill (90%).
--
-- Every index of the log's and the seals' month partitions then fills its leaf pages to 100%
-- (`fillfactor`, set on each partition's indexes as the month is made; a partitioned index
-- takes no storage parameter): their keys grow at the right edge of each team's range (the
-- page indexes: team hash and time; PostgreSQL's split keeps a left page full when a
-- key's prefix is equal and its last part ascends, for tuples of up to 16 B of key) or of the
-- whole index (the keys by `pos`), and entries are only appended (a deleted team's entries lose
-- their team once, 0017: those few land wherever they split). What a page would keep free (10%)
-- was never used. 28.5 B an entry for the seals' key at 100%; 28-29 B for each
-- page index of the log (32 at 90%). The seals' (chain_id, seq) key is not helped (its 24 B of
-- key is past what the split's rule looks at: half-full pages, ~72 B an entry).
--
-- Existing partitions get the setting too (it shapes their pages from their next split on);
-- nothing is rebuilt. Nothing else changes: columns, keys, the sealer's chain order and hashes.

-- Every index of an audit partition: leaf pages filled to 100%.
CREATE FUNCTION cvsm_audit_pack_indexes(p_table regclass) RETURNS void
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
DECLARE
    ix regclass;
BEGIN
    FOR ix IN SELECT i.indexrelid::regclass FROM pg_index i WHERE i.indrelid = p_table LOOP
        EXECUTE format('ALTER INDEX %s SET (fillfactor = 100)', ix);
    END LOOP;
END $$;
REVOKE ALL ON FUNCTION cvsm_audit_pack_indexes(regclass) FROM PUBLIC;

SELECT cvsm_audit_pack_indexes(i.inhrelid::regclass)
FROM pg_inherits i
WHERE i.inhparent IN ('audit_logs'::regclass, 'audit_seals'::regclass);

-- 0027's, packing the indexes of each month it makes.
CREATE OR REPLACE FUNCTION cvsm_audit_make_months(p_from date, p_to date) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET lock_timeout = '2s' AS $$
DECLARE
    m date := date_trunc('month', p_from)::date;
    lo timestamptz;
    hi timestamptz;
    suffix text;
    made integer := 0;
BEGIN
    WHILE m < p_to LOOP
        suffix := to_char(m, '"y"YYYY"m"MM');
        lo := (m::timestamp AT TIME ZONE 'UTC');
        hi := ((m + interval '1 month')::timestamp AT TIME ZONE 'UTC');
        IF to_regclass('audit_logs_' || suffix) IS NULL
           AND NOT EXISTS (SELECT 1 FROM audit_logs_default WHERE created_at >= lo AND created_at < hi)
           AND NOT EXISTS (SELECT 1 FROM audit_seals_default WHERE created_at >= lo AND created_at < hi)
        THEN
            BEGIN
                EXECUTE format('CREATE TABLE %I PARTITION OF audit_logs FOR VALUES FROM (%L) TO (%L)',
                               'audit_logs_' || suffix, lo, hi);
                EXECUTE format('CREATE TABLE %I PARTITION OF audit_seals FOR VALUES FROM (%L) TO (%L)',
                               'audit_seals_' || suffix, lo, hi);
                EXECUTE format('CREATE UNIQUE INDEX %I ON %I (chain_id, seq)',
                               'audit_seals_' || suffix || '_chain_seq', 'audit_seals_' || suffix);
                PERFORM cvsm_audit_pack_indexes(('audit_logs_' || suffix)::regclass);
                PERFORM cvsm_audit_pack_indexes(('audit_seals_' || suffix)::regclass);
                made := made + 1;
            EXCEPTION WHEN lock_not_available THEN
                RAISE NOTICE 'audit month %: its tables are busy, made later', m;
            END;
        END IF;
        PERFORM cvsm_audit_make_reads_month(m);
        m := (m + interval '1 month')::date;
    END LOOP;
    RETURN made;
END $$;

-- 0037's sealer, inserting each batch's seals in the entries' order.
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
    -- in the entries' order (`pos`): the seals' key grows at its right edge only
    INSERT INTO audit_seals (pos, chain_id, seq, prev_hash, hash, created_at)
        SELECT * FROM unnest(positions, chains, seqs, prevs, hashes, times)
            AS u(pos, chain_id, seq, prev_hash, hash, created_at)
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
