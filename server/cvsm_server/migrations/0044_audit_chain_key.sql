-- 0.5 (migration 0044): the seals' chain key in 28 B an entry instead of ~72 (issue 40, item 3:
-- narrow seals, fewer bytes per entry).
--
-- Each month partition of `audit_seals` had a unique index on (chain_id, seq): a tuple of 24 B
-- of key (a uuid and a bigint). A chain's seals arrive in seq order but the chains interleave,
-- so every chain grows at its own place in the index; PostgreSQL keeps the page it splits full
-- there ("split after the new item") only for keys of up to 16 B. Wider, each split left half
-- pages behind: 71 B an entry at 1M entries (bench/growth.py), for 28 B of tuple.
--
-- The key is now (uuid_hash_extended(chain_id, 0), seq): the chain's 64-bit hash and its seq,
-- 16 B, on the partitioned table (so on every partition, made or attached). Every statement
-- that looks a chain's seals up names the hash (what the index finds) and the chain itself
-- (what it keeps): `uuid_hash_extended(s.chain_id, 0) = uuid_hash_extended(X, 0) AND
-- s.chain_id = X`. Two chains sharing a 64-bit hash would only cost reading the other's seals.
-- `uuid_hash_extended` is PostgreSQL's hash-partitioning support function for uuid: immutable
-- and stable across versions.
--
-- The key is no longer unique. A chain's seqs are written by the sealer alone, under its lock,
-- one after its head; verification reports a seq that appears twice (as it did where a
-- tampered database dropped the key). An entry still has one seal at most (the seals' key
-- on `pos`).
--
-- The chains themselves were found by skip scans of the old key (the checkpoint job, the purge,
-- a month's drop and archive); a hash cannot list them exactly, so `audit_chains` lists every
-- chain that has ever had a seal: the sealer adds a chain the first time it meets it (a chain
-- without seals: new, or emptied by the purge), in the batch's transaction. Filled here from
-- the seals and the checkpoints; rows are never removed (a few bytes a team).

CREATE TABLE audit_chains (chain_id uuid PRIMARY KEY);
INSERT INTO audit_chains SELECT chain_id FROM audit_seals UNION SELECT chain_id FROM audit_checkpoints;
GRANT SELECT ON audit_chains TO cvsm_app;

-- The partitioned index first (ONLY), then each partition's, built packed (0041), attached;
-- then the old keys go.
CREATE INDEX audit_seals_chain_idx ON ONLY audit_seals (uuid_hash_extended(chain_id, 0), seq);
DO $$
DECLARE
    p regclass;
    ix regclass;
BEGIN
    FOR p IN SELECT i.inhrelid::regclass FROM pg_inherits i
             WHERE i.inhparent = 'audit_seals'::regclass ORDER BY 1 LOOP
        -- named as PostgreSQL names the one it makes on a partition created later
        EXECUTE format('CREATE INDEX %I ON %s (uuid_hash_extended(chain_id, 0), seq) '
                       'WITH (fillfactor = 100)', p::text || '_uuid_hash_extended_seq_idx', p);
        EXECUTE format('ALTER INDEX audit_seals_chain_idx ATTACH PARTITION %I',
                       p::text || '_uuid_hash_extended_seq_idx');
    END LOOP;
    FOR ix IN SELECT i.indexrelid::regclass FROM pg_index i
              JOIN pg_class c ON c.oid = i.indexrelid
              JOIN pg_inherits h ON h.inhrelid = i.indrelid
              WHERE h.inhparent = 'audit_seals'::regclass AND c.relname ~ '_chain_seq$' LOOP
        EXECUTE format('DROP INDEX %s', ix);
    END LOOP;
END $$;

-- 0042's link of an entry, the seal before it found by the chain key.
CREATE OR REPLACE FUNCTION cvsm_audit_prev_hash(p_chain uuid, p_seq bigint) RETURNS bytea
LANGUAGE sql STABLE SET search_path = public, pg_temp AS $$
    SELECT CASE WHEN p_seq <= 1
                THEN '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea
                ELSE coalesce(
                    (SELECT s.hash FROM audit_seals s
                     WHERE uuid_hash_extended(s.chain_id, 0) = uuid_hash_extended(p_chain, 0)
                       AND s.chain_id = p_chain AND s.seq = p_seq - 1 ORDER BY s.pos LIMIT 1),
                    (SELECT c.head_hash FROM audit_checkpoints c
                     WHERE c.chain_id = p_chain AND c.seq = p_seq - 1 AND c.kind = 'purge'
                     ORDER BY c.signed_at LIMIT 1))
           END
$$;

-- 0042's sealer, its chains' heads found by the chain key, and every chain it meets first
-- in the registry.
CREATE OR REPLACE FUNCTION cvsm_audit_seal(p_limit integer, p_wait boolean) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    st audit_seal_state;
    horizon xid8;
    top bigint;
    fresh xid8;
    r record;
    chain uuid := NULL;
    fresh_chains uuid[] := '{}';
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
                WHERE uuid_hash_extended(s.chain_id, 0) = uuid_hash_extended(chain, 0) AND s.chain_id = chain ORDER BY s.seq DESC LIMIT 1;
            IF head_seq IS NULL THEN  -- a new chain, or one the retention purge emptied
                fresh_chains := fresh_chains || chain;
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
    -- the chains met without a seal (new, or emptied by the purge) listed, in this transaction
    INSERT INTO audit_chains (chain_id) SELECT unnest(fresh_chains) ON CONFLICT DO NOTHING;
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

-- 0024's, the month's chains from the registry.
CREATE OR REPLACE FUNCTION cvsm_audit_drop_month(p_month date) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    suffix text := to_char(p_month, '"y"YYYY"m"MM');
    lo timestamptz := (p_month::timestamp AT TIME ZONE 'UTC');
    hi timestamptz := ((p_month + interval '1 month')::timestamp AT TIME ZONE 'UTC');
    logs regclass := to_regclass('audit_logs_' || suffix);
    seals regclass := to_regclass('audit_seals_' || suffix);
    bad text;
    n_logs bigint;
    n_seals bigint;
BEGIN
    SET LOCAL lock_timeout = '2s';  -- the detach waits for readers; writers queue behind it
    IF logs IS NULL OR seals IS NULL OR date_trunc('month', p_month) <> p_month THEN
        RAISE EXCEPTION 'audit month %: no such partition', p_month;
    END IF;
    EXECUTE format('SELECT count(*) FROM %s', logs) INTO n_logs;
    EXECUTE format('SELECT count(*) FROM %s', seals) INTO n_seals;
    IF n_logs <> n_seals OR EXISTS (
            SELECT 1 FROM audit_logs a WHERE a.created_at >= lo AND a.created_at < hi
              AND NOT EXISTS (SELECT 1 FROM audit_seals s WHERE s.pos = a.pos
                                AND s.created_at >= lo AND s.created_at < hi)) THEN
        RAISE EXCEPTION 'audit month %: entries and seals differ (unsealed entries?)', p_month;
    END IF;
    WITH heads AS (
        SELECT k.chain_id AS id, h.seq, cvsm_audit_retention_days(k.chain_id) AS days
        FROM audit_chains k CROSS JOIN LATERAL (
            SELECT s.seq FROM audit_seals s WHERE s.created_at >= lo AND s.created_at < hi
               AND uuid_hash_extended(s.chain_id, 0) = uuid_hash_extended(k.chain_id, 0) AND s.chain_id = k.chain_id ORDER BY s.seq DESC LIMIT 1) h)
    SELECT CASE
        WHEN h.days IS NULL THEN 'chain ' || h.id || ' keeps its entries'
        WHEN hi > now() - make_interval(days => h.days) THEN 'chain ' || h.id || ' has entries not expired'
        WHEN coalesce((SELECT c.seq FROM audit_checkpoints c WHERE c.chain_id = h.id
                       ORDER BY c.seq DESC LIMIT 1), 0) < h.seq
            THEN 'chain ' || h.id || ' has no checkpoint at its last entry'
        WHEN EXISTS (SELECT 1 FROM audit_seals s WHERE uuid_hash_extended(s.chain_id, 0) = uuid_hash_extended(h.id, 0) AND s.chain_id = h.id AND s.seq < h.seq
                       AND (s.created_at < lo OR s.created_at >= hi))
            THEN 'chain ' || h.id || ' has earlier entries outside the month'
        END INTO bad
    FROM heads h
    WHERE h.days IS NULL OR hi > now() - make_interval(days => h.days)
       OR coalesce((SELECT c.seq FROM audit_checkpoints c WHERE c.chain_id = h.id
                    ORDER BY c.seq DESC LIMIT 1), 0) < h.seq
       OR EXISTS (SELECT 1 FROM audit_seals s WHERE uuid_hash_extended(s.chain_id, 0) = uuid_hash_extended(h.id, 0) AND s.chain_id = h.id AND s.seq < h.seq
                    AND (s.created_at < lo OR s.created_at >= hi))
    LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'audit month %: %', p_month, bad;
    END IF;
    EXECUTE format('ALTER TABLE audit_logs DETACH PARTITION %s', logs);
    EXECUTE format('ALTER TABLE audit_seals DETACH PARTITION %s', seals);
    EXECUTE format('DROP TABLE %s', logs);
    EXECUTE format('DROP TABLE %s', seals);
    RETURN n_logs;
END $$;

-- 0043's, the chain key copied with the partitioned table's other indexes.
CREATE OR REPLACE FUNCTION cvsm_audit_compact_month(p_month date, p_chains uuid[], p_cuts bigint[])
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    suffix text := to_char(p_month, '"y"YYYY"m"MM');
    lo timestamptz := (p_month::timestamp AT TIME ZONE 'UTC');
    hi timestamptz := ((p_month + interval '1 month')::timestamp AT TIME ZONE 'UTC');
    logs regclass := to_regclass('audit_logs_' || suffix);
    seals regclass := to_regclass('audit_seals_' || suffix);
    new_logs text := 'audit_logs_' || suffix || '_c';
    new_seals text := 'audit_seals_' || suffix || '_c';
    bad text;
    n_before bigint;
    n_logs bigint;
    n_seals bigint;
    n_seals_before bigint;
    ix record;
    def text;
BEGIN
    SET LOCAL lock_timeout = '2s';  -- the swap waits for readers; writers queue behind it
    IF logs IS NULL OR seals IS NULL OR date_trunc('month', p_month) <> p_month
       OR cardinality(p_chains) IS DISTINCT FROM cardinality(p_cuts) THEN
        RAISE EXCEPTION 'audit month %: no such partition', p_month;
    END IF;
    EXECUTE format('LOCK TABLE %s, %s IN SHARE MODE', logs, seals);
    CREATE TEMP TABLE cvsm_compact_cut ON COMMIT DROP AS
        SELECT c.chain_id, c.cut, cvsm_audit_retention_days(c.chain_id) AS days
        FROM unnest(p_chains, p_cuts) AS c(chain_id, cut);
    -- The guard's checks, once a chain.
    EXECUTE format($q$
        SELECT CASE
            WHEN c.days IS NULL THEN 'chain ' || c.chain_id || ' keeps its entries'
            WHEN coalesce((SELECT k.seq FROM audit_checkpoints k WHERE k.chain_id = c.chain_id
                           ORDER BY k.seq DESC LIMIT 1), 0) < c.cut
                THEN 'chain ' || c.chain_id || ' has no checkpoint at its cut'
            WHEN EXISTS (SELECT 1 FROM audit_seals s WHERE uuid_hash_extended(s.chain_id, 0) = uuid_hash_extended(c.chain_id, 0)
                           AND s.chain_id = c.chain_id
                           AND s.seq <= c.cut AND (s.created_at < $1 OR s.created_at >= $2))
                THEN 'chain ' || c.chain_id || ' has entries up to its cut outside the month'
            WHEN EXISTS (SELECT 1 FROM %s s WHERE uuid_hash_extended(s.chain_id, 0) = uuid_hash_extended(c.chain_id, 0)
                           AND s.chain_id = c.chain_id AND s.seq <= c.cut
                           AND s.created_at >= now() - make_interval(days => c.days))
                THEN 'chain ' || c.chain_id || ' has entries up to its cut not expired'
            END
        FROM cvsm_compact_cut c
        WHERE c.days IS NULL
           OR coalesce((SELECT k.seq FROM audit_checkpoints k WHERE k.chain_id = c.chain_id
                        ORDER BY k.seq DESC LIMIT 1), 0) < c.cut
           OR EXISTS (SELECT 1 FROM audit_seals s WHERE uuid_hash_extended(s.chain_id, 0) = uuid_hash_extended(c.chain_id, 0)
                           AND s.chain_id = c.chain_id
                        AND s.seq <= c.cut AND (s.created_at < $1 OR s.created_at >= $2))
           OR EXISTS (SELECT 1 FROM %s s WHERE uuid_hash_extended(s.chain_id, 0) = uuid_hash_extended(c.chain_id, 0)
                           AND s.chain_id = c.chain_id AND s.seq <= c.cut
                        AND s.created_at >= now() - make_interval(days => c.days))
        LIMIT 1$q$, seals, seals) INTO bad USING lo, hi;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'audit month %: %', p_month, bad;
    END IF;
    -- The copies: what stays, in insertion order, then the indexes of the partitioned tables.
    EXECUTE format('CREATE TABLE %I (LIKE audit_logs INCLUDING DEFAULTS)', new_logs);
    EXECUTE format('CREATE TABLE %I (LIKE audit_seals INCLUDING DEFAULTS)', new_seals);
    EXECUTE format($q$
        INSERT INTO %I SELECT a.* FROM %s a
        WHERE NOT EXISTS (SELECT 1 FROM %s s JOIN cvsm_compact_cut c ON c.chain_id = s.chain_id
                          WHERE s.pos = a.pos AND s.seq <= c.cut)
        ORDER BY a.pos$q$, new_logs, logs, seals);
    GET DIAGNOSTICS n_logs = ROW_COUNT;
    EXECUTE format($q$
        INSERT INTO %I SELECT s.* FROM %s s LEFT JOIN cvsm_compact_cut c ON c.chain_id = s.chain_id
        WHERE c.cut IS NULL OR s.seq > c.cut ORDER BY s.pos$q$, new_seals, seals);
    GET DIAGNOSTICS n_seals = ROW_COUNT;
    EXECUTE format('SELECT count(*) FROM %s', logs) INTO n_before;
    EXECUTE format('SELECT count(*) FROM %s', seals) INTO n_seals_before;
    IF n_before - n_logs <> n_seals_before - n_seals THEN
        RAISE EXCEPTION 'audit month %: entries and seals to remove differ', p_month;
    END IF;
    -- the indexes as the partitioned tables define them (ATTACH then takes each as the
    -- partition's), packed: a past month's entries are not added to
    FOR ix IN SELECT i.indexrelid, c.relname AS parent FROM pg_index i
              JOIN pg_class c ON c.oid = i.indrelid
              WHERE i.indrelid IN ('audit_logs'::regclass, 'audit_seals'::regclass) LOOP
        def := regexp_replace(pg_get_indexdef(ix.indexrelid),
                              '^CREATE (UNIQUE )?INDEX \S+ ON ONLY \S+ ',
                              'CREATE \1INDEX ON ' || quote_ident(
                                  CASE ix.parent WHEN 'audit_logs' THEN new_logs
                                                 ELSE new_seals END) || ' ');
        IF def !~ ' WITH \(' THEN
            def := regexp_replace(def, '( WHERE .*)?$', ' WITH (fillfactor = 100)\1');
        END IF;
        EXECUTE def;
    END LOOP;
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (pos) WITH (fillfactor = 100)',
                   new_seals || '_pos', new_seals);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (created_at >= %L AND created_at < %L)',
                   new_logs, new_logs || '_month', lo, hi);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (created_at >= %L AND created_at < %L)',
                   new_seals, new_seals || '_month', lo, hi);
    -- The swap (the writers of the log wait for this part only).
    EXECUTE format('ALTER TABLE audit_logs DETACH PARTITION %s', logs);
    EXECUTE format('ALTER TABLE audit_seals DETACH PARTITION %s', seals);
    EXECUTE format('DROP TABLE %s', logs);
    EXECUTE format('DROP TABLE %s', seals);
    EXECUTE format('ALTER TABLE %I RENAME TO %I', new_logs, 'audit_logs_' || suffix);
    EXECUTE format('ALTER TABLE %I RENAME TO %I', new_seals, 'audit_seals_' || suffix);
    EXECUTE format('ALTER INDEX %I RENAME TO %I', new_seals || '_pos',
                   'audit_seals_' || suffix || '_pos');
    EXECUTE format('ALTER TABLE audit_logs ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   'audit_logs_' || suffix, lo, hi);
    EXECUTE format('ALTER TABLE audit_seals ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   'audit_seals_' || suffix, lo, hi);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', 'audit_logs_' || suffix,
                   new_logs || '_month');
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', 'audit_seals_' || suffix,
                   new_seals || '_month');
    RETURN n_before - n_logs;
END $$;

-- 0043's, the chain key made with the partitioned table's other indexes.
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
                EXECUTE format('CREATE UNIQUE INDEX %I ON %I (pos)',
                               'audit_seals_' || suffix || '_pos', 'audit_seals_' || suffix);
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
