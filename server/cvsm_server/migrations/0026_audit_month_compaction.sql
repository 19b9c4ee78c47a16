-- 0.5 (migration 0026): retention of a month mostly expired by copying what stays, not by
-- deleting what goes (issue 40, item 3: <= 100 B of WAL per removed entry).
--
-- A month that cannot be dropped whole (its newest entries not expired yet: the boundary
-- month) was purged entry by entry: each deleted entry and seal writes a WAL record, and the
-- first change of each page after a checkpoint its full image (~500 B of WAL per removed entry,
-- and the table does not shrink). `cvsm_audit_compact_month(month, chains, cuts)` removes, for
-- each chain given, its entries of the month up to seq `cut` (a prefix of the chain) by copying
-- the month's other entries and seals into fresh tables (indexes built after the copy), which
-- then replace the month's partitions (detach, attach, drop): WAL in proportion to the rows
-- kept, not the rows removed, and the space goes back at once. The purge
-- (audit_months.compact_boundary_month) uses it where copying writes less than deleting would
-- (at most a third of the month stays), else it deletes entry by entry as before.
--
-- It checks, in bulk, what the guard (cvsm_audit_guard) checks for each deleted entry: every
-- entry removed is past its chain's retention and covered by a signed checkpoint (the purge
-- signs one at each cut first), and no entry of the chain outside the month has a seq up to
-- the cut (the month's part is a prefix of the chain); it raises otherwise, naming the reason,
-- and nothing changes. The entries kept (rows, ids, times, positions, seals) are copied as they
-- are: every hash and checkpoint stays valid. The copies go into tables outside `audit_logs`
-- (no statement trigger fires: the read rollup does not count the kept reads twice), and the
-- writers of the log wait only for the swap at the end (a month's entries are past: none is
-- written into it meanwhile; the copy holds the old partitions in SHARE mode).

CREATE FUNCTION cvsm_audit_compact_month(p_month date, p_chains uuid[], p_cuts bigint[])
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
    -- the keys as constraints (ATTACH matches a key only to a key), the other indexes as the
    -- partitioned tables define them
    EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (pos, created_at)', new_logs);
    EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (pos, created_at)', new_seals);
    FOR ix IN SELECT i.indexrelid, c.relname AS parent FROM pg_index i
              JOIN pg_class c ON c.oid = i.indrelid
              WHERE i.indrelid IN ('audit_logs'::regclass, 'audit_seals'::regclass)
                AND NOT i.indisprimary LOOP
        EXECUTE regexp_replace(pg_get_indexdef(ix.indexrelid),
                               '^CREATE (UNIQUE )?INDEX \S+ ON ONLY \S+ ',
                               'CREATE \1INDEX ON ' || quote_ident(
                                   CASE ix.parent WHEN 'audit_logs' THEN new_logs
                                                  ELSE new_seals END) || ' ');
    END LOOP;
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (chain_id, seq)',
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
REVOKE ALL ON FUNCTION cvsm_audit_compact_month(date, uuid[], bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cvsm_audit_compact_month(date, uuid[], bigint[]) TO cvsm_app;
