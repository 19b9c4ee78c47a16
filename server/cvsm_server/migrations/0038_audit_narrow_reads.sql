-- 0.5 (migration 0038): a narrower read rollup (issue 40, item 3: fewer bytes per entry).
--
-- Measured by bench/growth.py: the read rollup (`audit_reads`, 0022/0027) was the third of the
-- audit storage per entry (169 B an entry at 1M entries: nearly a row a read where a team reads
-- little, ~300 B a row with its keys). Its secret and token ids were text (37 B each, in the row
-- and again in the primary key and the token index); they are uuids now (16 B), the token's
-- absent value the nil uuid (it was ''), and the fixed-width columns come first (no padding
-- between them). Nothing else changes: the same rows, keys, partitions by month, indexes
-- (shaped as before), grants and trigger; the log, its chain and hashes are untouched (the
-- rollup is derived from the log as it is sealed).
--
-- A read whose resource_id or token_id is not a uuid (none is: the server writes a secret's id
-- and a token's id; an entry written by hand might) is not rolled up (its secret) or counts as
-- a session read (its token): `cvsm_audit_uuid_or_null` casts without raising, so no entry can
-- stop the sealer. The rows of the rollup are copied once (the rollup is a row a day per
-- secret and reader, not a row an entry: bounded by the rollup's size, not the log's).

LOCK TABLE audit_reads IN ACCESS EXCLUSIVE MODE;

-- A text as a uuid, or NULL where it is not one (inlined: one regular expression).
CREATE FUNCTION cvsm_audit_uuid_or_null(p text) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'
                THEN p::uuid END
$$;
GRANT EXECUTE ON FUNCTION cvsm_audit_uuid_or_null(text) TO cvsm_app;

ALTER TABLE audit_reads RENAME TO audit_reads_0037;
ALTER TABLE audit_reads_0037 RENAME CONSTRAINT audit_reads_pkey TO audit_reads_0037_pkey;
ALTER INDEX audit_reads_token_idx RENAME TO audit_reads_0037_i1;
ALTER INDEX audit_reads_team_day_idx RENAME TO audit_reads_0037_i2;
-- the old partitions keep their names until they are dropped with their table: rename them out
-- of the way of the new ones
DO $$
DECLARE
    p record;
BEGIN
    FOR p IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'audit_reads_0037'::regclass LOOP
        EXECUTE format('ALTER TABLE %I RENAME TO %I', p.relname,
                       replace(p.relname, 'audit_reads_', 'audit_reads_0037_'));
    END LOOP;
END $$;

CREATE TABLE audit_reads (
    reads      bigint NOT NULL,
    last_at    timestamptz NOT NULL,
    team_id    uuid NOT NULL,   -- the entry's chain (its team at write time)
    secret_id  uuid NOT NULL,   -- the entry's resource_id
    token_id   uuid NOT NULL,   -- the nil uuid for a session
    day        date NOT NULL,   -- UTC
    user_email text NOT NULL,   -- '' for none (a system reader)
    via_token  text,            -- the token's name at the last read
    last_ip    text,
    CONSTRAINT audit_reads_pkey PRIMARY KEY (team_id, secret_id, day, user_email, token_id)
) PARTITION BY RANGE (day);
CREATE TABLE audit_reads_default PARTITION OF audit_reads DEFAULT;
CREATE INDEX audit_reads_token_idx ON audit_reads (team_id, token_id, day)
    WHERE token_id <> '00000000-0000-0000-0000-000000000000';
CREATE INDEX audit_reads_team_day_idx ON audit_reads (team_id, day);

-- The months of the log and of the old rollup (cvsm_audit_make_reads_month of 0027).
SELECT cvsm_audit_make_reads_month(m) FROM (
    SELECT to_date(substr(c.relname, 12), '"y"YYYY"m"MM') AS m
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'audit_logs'::regclass AND c.relname ~ '^audit_logs_y[0-9]{4}m[0-9]{2}$'
    UNION
    SELECT to_date(substr(c.relname, 18), '"y"YYYY"m"MM')
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'audit_reads_0037'::regclass
      AND c.relname ~ '^audit_reads_0037_y[0-9]{4}m[0-9]{2}$') months ORDER BY m;
INSERT INTO audit_reads (reads, last_at, team_id, secret_id, token_id, day, user_email, via_token,
                         last_ip)
    SELECT sum(r.reads), max(r.last_at), r.team_id, cvsm_audit_uuid_or_null(r.secret_id),
           coalesce(cvsm_audit_uuid_or_null(r.token_id), '00000000-0000-0000-0000-000000000000'),
           r.day, r.user_email, (array_agg(r.via_token ORDER BY r.last_at DESC))[1],
           (array_agg(r.last_ip ORDER BY r.last_at DESC))[1]
    FROM audit_reads_0037 r
    WHERE cvsm_audit_uuid_or_null(r.secret_id) IS NOT NULL
    GROUP BY 3, 4, 5, 6, 7;
DROP TABLE audit_reads_0037;
GRANT SELECT, DELETE ON audit_reads TO cvsm_app;

-- The rollup of 0035 (with the filter choices), writing the uuids; planned without hash or
-- merge joins as 0037 set (CREATE OR REPLACE drops a function's settings: they are named here).
CREATE OR REPLACE FUNCTION cvsm_audit_roll_reads() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
SET enable_hashjoin = off SET enable_mergejoin = off AS $$
BEGIN
    WITH batch AS MATERIALIZED (
        SELECT n.chain_id, a.pos, a.created_at, a.user_email, a.action, a.resource,
               a.resource_id, a.ip_address, a.metadata
        FROM sealed n JOIN audit_logs a ON a.pos = n.pos AND a.created_at = n.created_at),
    choices AS (
        INSERT INTO audit_choices AS c (team_id, kind, value, last_at)
        SELECT chain_id, 'action', action, max(created_at) FROM batch GROUP BY 1, 3
        UNION ALL
        SELECT chain_id, 'person', lower(user_email), max(created_at) FROM batch
        WHERE user_email IS NOT NULL GROUP BY 1, 3
        ON CONFLICT (team_id, kind, value) DO UPDATE SET last_at = excluded.last_at
        WHERE excluded.last_at > c.last_at + interval '1 day')
    INSERT INTO audit_reads AS r (team_id, secret_id, day, user_email, token_id, via_token, reads,
                                  last_at, last_ip)
    SELECT a.chain_id, cvsm_audit_uuid_or_null(a.resource_id),
           (a.created_at AT TIME ZONE 'UTC')::date, coalesce(a.user_email, ''),
           coalesce(cvsm_audit_uuid_or_null(a.metadata->>'token_id'),
                    '00000000-0000-0000-0000-000000000000'),
           (array_agg(a.metadata->>'via_token' ORDER BY a.created_at DESC, a.pos DESC))[1],
           count(*), max(a.created_at),
           (array_agg(a.ip_address ORDER BY a.created_at DESC, a.pos DESC))[1]
    FROM batch a
    WHERE a.action = 'read' AND a.resource = 'secret'
      AND cvsm_audit_uuid_or_null(a.resource_id) IS NOT NULL
    GROUP BY 1, 2, 3, 4, 5
    ON CONFLICT (team_id, secret_id, day, user_email, token_id) DO UPDATE SET
        reads = r.reads + excluded.reads,
        last_at = greatest(r.last_at, excluded.last_at),
        last_ip = CASE WHEN excluded.last_at >= r.last_at THEN excluded.last_ip ELSE r.last_ip END,
        via_token = CASE WHEN excluded.last_at >= r.last_at THEN excluded.via_token
                         ELSE r.via_token END;
    RETURN NULL;
END $$;

-- 0027's compaction of a rollup month, building the token index of the fresh partition with
-- the nil uuid for "no token" (the rest as it was).
CREATE OR REPLACE FUNCTION cvsm_audit_compact_reads(p_month date) RETURNS bigint
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
                       fresh, '00000000-0000-0000-0000-000000000000');
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
