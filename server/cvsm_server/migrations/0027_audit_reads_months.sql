-- 0.5 (migration 0027): the read rollup stored by month too (issue 40, item 3).
--
-- Once the log's expired months went as partition drops and its boundary month by compaction
-- (0024, 0026), most of the retention purge's WAL was the read rollup's (`audit_reads`, 0022):
-- its expired days deleted row by row (55 MB at 1M entries, 110 B per removed entry).
-- `audit_reads` becomes partitioned by RANGE of `day`, a partition a UTC month
-- (`audit_reads_yYYYYmMM`, made with the log's: `cvsm_audit_make_months`) and a DEFAULT one.
-- `cvsm_audit_compact_reads(month)` removes the month's expired rows (a team's days past its
-- retention, the rows the purge's per-team delete removes) as a partition drop where none of
-- the month stays, else by copying the rows that stay into a fresh partition that replaces it,
-- where at most a third stays; otherwise it leaves them to the per-team delete. The months of
-- the rollup are made with the log's (`cvsm_audit_make_months`). Columns, keys,
-- the rollup trigger and grants are as they were.

LOCK TABLE audit_reads IN ACCESS EXCLUSIVE MODE;
ALTER TABLE audit_reads RENAME TO audit_reads_0026;
ALTER TABLE audit_reads_0026 RENAME CONSTRAINT audit_reads_pkey TO audit_reads_0026_pkey;
ALTER INDEX audit_reads_token_idx RENAME TO audit_reads_0026_i1;
ALTER INDEX audit_reads_team_day_idx RENAME TO audit_reads_0026_i2;

CREATE TABLE audit_reads (
    team_id    uuid NOT NULL,
    secret_id  text NOT NULL,
    day        date NOT NULL,
    user_email text NOT NULL,
    token_id   text NOT NULL,
    via_token  text,
    reads      bigint NOT NULL,
    last_at    timestamptz NOT NULL,
    last_ip    text,
    CONSTRAINT audit_reads_pkey PRIMARY KEY (team_id, secret_id, day, user_email, token_id)
) PARTITION BY RANGE (day);
CREATE TABLE audit_reads_default PARTITION OF audit_reads DEFAULT;
CREATE INDEX audit_reads_token_idx ON audit_reads (team_id, token_id, day) WHERE token_id <> '';
CREATE INDEX audit_reads_team_day_idx ON audit_reads (team_id, day);

-- The months of the log's partitions, as the log's.
CREATE FUNCTION cvsm_audit_make_reads_month(p_month date) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET lock_timeout = '2s' AS $$
DECLARE
    suffix text := to_char(p_month, '"y"YYYY"m"MM');
BEGIN
    IF to_regclass('audit_reads_' || suffix) IS NOT NULL
       OR EXISTS (SELECT 1 FROM audit_reads_default WHERE day >= p_month
                    AND day < (p_month + interval '1 month')::date) THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF audit_reads FOR VALUES FROM (%L) TO (%L)',
                   'audit_reads_' || suffix, p_month, (p_month + interval '1 month')::date);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END $$;
REVOKE ALL ON FUNCTION cvsm_audit_make_reads_month(date) FROM PUBLIC;

SELECT cvsm_audit_make_reads_month(to_date(substr(c.relname, 12), '"y"YYYY"m"MM'))
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'audit_logs'::regclass AND c.relname ~ '^audit_logs_y[0-9]{4}m[0-9]{2}$';
INSERT INTO audit_reads SELECT * FROM audit_reads_0026;
DROP TABLE audit_reads_0026;
GRANT SELECT, DELETE ON audit_reads TO cvsm_app;

-- The log's months (0024's function), and the rollup's with them.
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


-- Remove the month's expired rows (see the header); returns how many went, NULL where the
-- month was left to the per-team delete (more than a third of it stays, or nothing expired).
CREATE FUNCTION cvsm_audit_compact_reads(p_month date) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    suffix text := to_char(p_month, '"y"YYYY"m"MM');
    part regclass := to_regclass('audit_reads_' || suffix);
    fresh text := 'audit_reads_' || suffix || '_c';
    hi date := (p_month + interval '1 month')::date;
    n_all bigint;
    n_kept bigint;
BEGIN
    SET LOCAL lock_timeout = '2s';
    IF part IS NULL OR date_trunc('month', p_month) <> p_month THEN
        RAISE EXCEPTION 'audit reads month %: no such partition', p_month;
    END IF;
    -- nothing expired (the hourly run's usual answer): one probe a team of its (team_id, day)
    -- index, the team's oldest day against its retention
    EXECUTE format($q$
        WITH RECURSIVE k(id) AS (
            (SELECT team_id FROM %1$s ORDER BY team_id LIMIT 1)
            UNION ALL
            SELECT (SELECT team_id FROM %1$s WHERE team_id > k.id ORDER BY team_id LIMIT 1)
            FROM k WHERE k.id IS NOT NULL)
        SELECT count(*) FROM k WHERE k.id IS NOT NULL
           AND (SELECT min(day) FROM %1$s WHERE team_id = k.id)
               < ((now() - make_interval(days => coalesce(cvsm_audit_retention_days(k.id),
                                                          36500))) AT TIME ZONE 'UTC')::date$q$,
        part) INTO n_all;
    IF n_all = 0 THEN
        RETURN NULL;
    END IF;
    EXECUTE format('LOCK TABLE %s IN SHARE MODE', part);
    -- the rows kept: those the per-team delete keeps (`audit_chain._PURGE_READS`)
    EXECUTE format($q$
        SELECT count(*), count(*) FILTER (WHERE r.day >= ((now() - make_interval(days => coalesce(
                   cvsm_audit_retention_days(r.team_id), 36500))) AT TIME ZONE 'UTC')::date)
        FROM %s r$q$, part) INTO n_all, n_kept;
    IF n_all = n_kept OR n_kept * 3 > n_all THEN
        RETURN NULL;
    END IF;
    IF n_kept > 0 THEN
        EXECUTE format('CREATE TABLE %I (LIKE audit_reads INCLUDING DEFAULTS)', fresh);
        EXECUTE format($q$
            INSERT INTO %I SELECT r.* FROM %s r
            WHERE r.day >= ((now() - make_interval(days => coalesce(
                      cvsm_audit_retention_days(r.team_id), 36500))) AT TIME ZONE 'UTC')::date
            ORDER BY r.team_id, r.secret_id, r.day$q$, fresh, part);
        EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (team_id, secret_id, day, user_email, '
                       'token_id)', fresh);
        EXECUTE format('CREATE INDEX ON %I (team_id, token_id, day) WHERE token_id <> %L',
                       fresh, '');
        EXECUTE format('CREATE INDEX ON %I (team_id, day)', fresh);
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (day >= %L AND day < %L)',
                       fresh, fresh || '_month', p_month, hi);
    END IF;
    -- the swap (the sealer's rollup waits for this part only); a month with nothing kept is
    -- dropped and not made again (no read of it can come: its entries are past)
    EXECUTE format('ALTER TABLE audit_reads DETACH PARTITION %s', part);
    EXECUTE format('DROP TABLE %s', part);
    IF n_kept > 0 THEN
        EXECUTE format('ALTER TABLE %I RENAME TO %I', fresh, 'audit_reads_' || suffix);
        EXECUTE format('ALTER TABLE audit_reads ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       'audit_reads_' || suffix, p_month, hi);
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', 'audit_reads_' || suffix,
                       fresh || '_month');
    END IF;
    RETURN n_all - n_kept;
END $$;
REVOKE ALL ON FUNCTION cvsm_audit_compact_reads(date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cvsm_audit_compact_reads(date) TO cvsm_app;
