-- 0.5 (migration 0043): the audit log's and the seals' keys on `pos` alone (issue 40, item 3:
-- fewer bytes per entry).
--
-- A key of a partitioned table must hold the partition key: `audit_logs` and `audit_seals` had
-- the primary key (pos, created_at) since 0024, a tuple of 24 B (+ 4 B of line pointer) an
-- entry in each, where (pos) alone takes 16 (+ 4): 16 B an entry for the two. Nothing looks an
-- entry or a seal up by (pos, created_at) that an index on `pos` cannot serve (`pos = X AND
-- created_at = Y` prunes to one partition and probes its `pos` index; `pos = X` alone probes
-- each partition's, as before).
--
-- - `audit_logs`: the primary key goes; `audit_logs_pos_idx` (pos) on the partitioned table, so
--   on every partition, the default and future months too. Not unique: `pos` comes from
--   `audit_logs_pos_seq` through the column's default (cvsm_audit_next_pos()); the server's role
--   cannot choose it, and no two entries get the same one.
-- - `audit_seals`: the seal of an entry stays unique (a second seal of one entry would fork its
--   chain; the primary key refused it). A unique index on (pos) alone cannot be made on the
--   partitioned table, but one on each partition (`<partition>_pos`, beside its `_chain_seq`)
--   is as strong: a seal always lives in the partition of its entry's `created_at`, one
--   partition an entry. The default partition has one, and every month partition made from now
--   on (cvsm_audit_make_months) or rebuilt by a compaction (cvsm_audit_compact_month) gets one.
--
-- The new indexes of the existing partitions are built at fillfactor 100 (0041), and every
-- index of every partition gets the setting (a month compacted since 0041 had the default: its
-- indexes were built by 0026's function, which did not set it); a compaction now builds every
-- index of its copies packed (they were built at the default 90%, then never grown).
--
-- Measured (bench/growth.py, a fresh fill of 200k entries, idle 2-core machine): each key 29 ->
-- 21 B an entry; log + seals + their indexes 640 -> 623 B an entry (78 + 44 -> 76 + 42 MB); the
-- sealer's batch, the pages and verification as fast as before. Upgrading that fill: 0.3 s
-- (the new indexes are built on every partition holding the tables' write lock).

ALTER TABLE audit_logs DROP CONSTRAINT audit_logs_pkey;
ALTER TABLE audit_seals DROP CONSTRAINT audit_seals_pkey;

-- The log's: the partitioned index first (ONLY), then each partition's, built packed, attached.
CREATE INDEX audit_logs_pos_idx ON ONLY audit_logs (pos);
DO $$
DECLARE
    p regclass;
BEGIN
    FOR p IN SELECT i.inhrelid::regclass FROM pg_inherits i
             WHERE i.inhparent = 'audit_logs'::regclass ORDER BY 1 LOOP
        EXECUTE format('CREATE INDEX %I ON %s (pos) WITH (fillfactor = 100)',
                       p::text || '_pos_idx', p);
        EXECUTE format('ALTER INDEX audit_logs_pos_idx ATTACH PARTITION %I', p::text || '_pos_idx');
    END LOOP;
    FOR p IN SELECT i.inhrelid::regclass FROM pg_inherits i
             WHERE i.inhparent = 'audit_seals'::regclass ORDER BY 1 LOOP
        EXECUTE format('CREATE UNIQUE INDEX %I ON %s (pos) WITH (fillfactor = 100)',
                       p::text || '_pos', p);
    END LOOP;
END $$;
-- and every index of every partition set to it (a month compacted before now had the default)
SELECT cvsm_audit_pack_indexes(i.inhrelid::regclass)
FROM pg_inherits i
WHERE i.inhparent IN ('audit_logs'::regclass, 'audit_seals'::regclass);

-- 0041's, with the seal partition's unique (pos).
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

-- 0026's: the copies have no primary key to add; the seals' copy gets its unique (pos) beside
-- its (chain_id, seq), and every index of the copies is built packed (fillfactor 100, 0041).
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
            WHEN EXISTS (SELECT 1 FROM audit_seals s WHERE s.chain_id = c.chain_id
                           AND s.seq <= c.cut AND (s.created_at < $1 OR s.created_at >= $2))
                THEN 'chain ' || c.chain_id || ' has entries up to its cut outside the month'
            WHEN EXISTS (SELECT 1 FROM %s s WHERE s.chain_id = c.chain_id AND s.seq <= c.cut
                           AND s.created_at >= now() - make_interval(days => c.days))
                THEN 'chain ' || c.chain_id || ' has entries up to its cut not expired'
            END
        FROM cvsm_compact_cut c
        WHERE c.days IS NULL
           OR coalesce((SELECT k.seq FROM audit_checkpoints k WHERE k.chain_id = c.chain_id
                        ORDER BY k.seq DESC LIMIT 1), 0) < c.cut
           OR EXISTS (SELECT 1 FROM audit_seals s WHERE s.chain_id = c.chain_id
                        AND s.seq <= c.cut AND (s.created_at < $1 OR s.created_at >= $2))
           OR EXISTS (SELECT 1 FROM %s s WHERE s.chain_id = c.chain_id AND s.seq <= c.cut
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
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (chain_id, seq) WITH (fillfactor = 100)',
                   new_seals || '_chain_seq', new_seals);
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
    EXECUTE format('ALTER INDEX %I RENAME TO %I', new_seals || '_chain_seq',
                   'audit_seals_' || suffix || '_chain_seq');
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
