-- 0.5 (migration 0024): the audit log stored by month (issue 40, item 3).
--
-- `audit_logs` and `audit_seals` become PostgreSQL declarative partitioned tables, by RANGE of
-- `created_at` (the entry's time; a seal carries a copy of its entry's, written by the sealer),
-- one partition a UTC month (`audit_logs_yYYYYmMM`, `audit_seals_yYYYYmMM`) and a DEFAULT
-- partition each for a time no month partition covers (an entry never misses a partition).
-- `cvsm_audit_make_partitions(ahead)` makes the partitions of the current month and the `ahead`
-- months after it (the hourly retention job calls it, so the default partitions stay empty
-- but for entries written with a time far off); it skips a month the default already holds rows
-- of (those stay there, removed by the per-entry purge).
--
-- Retention drops a whole month (`cvsm_audit_drop_month`, called by the purge,
-- audit_chain.purge_expired): where every entry of the month is past its chain's retention, the
-- month is a prefix of every chain in it (no entry of the chain elsewhere has a lower seq: the
-- purge removed the few stragglers of the next month first, in the same transaction), every
-- entry is sealed in the month's seal partition and a signed `purge` checkpoint stands at each
-- chain's last entry of the month (the purge signs it first: the chain's new start, as for the
-- per-entry purge). Then both partitions are detached and dropped: no per-entry WAL, and the
-- space goes back at once. Anything else (a boundary month, a chain that keeps its entries
-- longer, the default partitions) keeps the bounded per-chain delete of 0017/0022.
--
-- Keys on a partitioned table include the partition key: the log's primary key is
-- (pos, created_at), the seals' (pos, created_at); a seal's (chain_id, seq) is unique per
-- partition (one index per seal partition; verification still reports a seq that appears
-- twice). Lookups by `pos` alone probe each partition's key (a few a year of retention).
-- Everything else (columns, defaults, grants, triggers, the chain's canonical form and hashes)
-- is as it was: the table is converted in place, every entry and seal kept.

LOCK TABLE audit_logs, audit_seals IN ACCESS EXCLUSIVE MODE;

DROP VIEW audit_chain_entries;
ALTER SEQUENCE audit_logs_pos_seq OWNED BY NONE;
ALTER TABLE audit_logs RENAME TO audit_logs_0023;
ALTER TABLE audit_seals RENAME TO audit_seals_0023;
ALTER TABLE audit_logs_0023 RENAME CONSTRAINT audit_logs_pkey TO audit_logs_0023_pkey;
ALTER TABLE audit_seals_0023 RENAME CONSTRAINT audit_seals_pkey TO audit_seals_0023_pkey;
ALTER TABLE audit_seals_0023 RENAME CONSTRAINT audit_seals_chain_seq_key TO audit_seals_0023_cs;
ALTER INDEX audit_logs_team_time_idx RENAME TO audit_logs_0023_i1;
ALTER INDEX audit_logs_team_action_idx RENAME TO audit_logs_0023_i2;
ALTER INDEX audit_logs_team_actor_idx RENAME TO audit_logs_0023_i3;
ALTER INDEX audit_logs_team_secret_idx RENAME TO audit_logs_0023_i4;
ALTER INDEX audit_logs_team_sname_idx RENAME TO audit_logs_0023_i5;
ALTER INDEX audit_logs_team_sref_idx RENAME TO audit_logs_0023_i6;

CREATE TABLE audit_logs (
    id          uuid NOT NULL DEFAULT gen_random_uuid(),
    team_id     uuid,
    user_id     uuid,
    user_email  text,
    action      text NOT NULL,
    resource    text NOT NULL,
    resource_id text,
    ip_address  text,
    user_agent  text,
    metadata    jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    pos         bigint NOT NULL DEFAULT cvsm_audit_next_pos(),
    CONSTRAINT audit_logs_pkey PRIMARY KEY (pos, created_at)
) PARTITION BY RANGE (created_at);
ALTER SEQUENCE audit_logs_pos_seq OWNED BY audit_logs.pos;

CREATE TABLE audit_seals (
    pos        bigint NOT NULL,       -- audit_logs.pos
    chain_id   uuid NOT NULL,
    seq        bigint NOT NULL,
    prev_hash  bytea NOT NULL,
    hash       bytea NOT NULL,
    created_at timestamptz NOT NULL,  -- the entry's: the seal lives in its entry's month
    CONSTRAINT audit_seals_pkey PRIMARY KEY (pos, created_at)
) PARTITION BY RANGE (created_at);

CREATE TABLE audit_logs_default PARTITION OF audit_logs DEFAULT;
CREATE TABLE audit_seals_default PARTITION OF audit_seals DEFAULT;
CREATE UNIQUE INDEX audit_seals_default_chain_seq ON audit_seals_default (chain_id, seq);

-- The month partitions of both tables for [p_from, p_to) (months), skipping any the default
-- partition holds rows of; returns how many months were made. A partition's creation locks its
-- table: one that waits more than 2 s for a reader (an export streaming) gives up, leaving the
-- month for the next call (made two months ahead, there are many), rather than holding every
-- writer behind it.
CREATE FUNCTION cvsm_audit_make_months(p_from date, p_to date) RETURNS integer
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
        m := (m + interval '1 month')::date;
    END LOOP;
    RETURN made;
END $$;

-- The current month's partitions and the next `p_ahead` months' (the hourly job's call).
CREATE FUNCTION cvsm_audit_make_partitions(p_ahead integer) RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT cvsm_audit_make_months((now() AT TIME ZONE 'UTC')::date,
        (date_trunc('month', now() AT TIME ZONE 'UTC')
         + make_interval(months => greatest(p_ahead, 0) + 1))::date)
$$;

-- Every month the entries span, and two ahead; then the entries and seals, unchanged.
SELECT cvsm_audit_make_months(
    coalesce((SELECT min(created_at) AT TIME ZONE 'UTC' FROM audit_logs_0023)::date,
             (now() AT TIME ZONE 'UTC')::date),
    (date_trunc('month', greatest(now(), (SELECT max(created_at) FROM audit_logs_0023))
                         AT TIME ZONE 'UTC') + interval '3 months')::date);
INSERT INTO audit_logs (id, team_id, user_id, user_email, action, resource, resource_id,
                        ip_address, user_agent, metadata, created_at, pos)
    SELECT id, team_id, user_id, user_email, action, resource, resource_id, ip_address,
           user_agent, metadata, created_at, pos
    FROM audit_logs_0023 ORDER BY pos;
INSERT INTO audit_seals (pos, chain_id, seq, prev_hash, hash, created_at)
    SELECT s.pos, s.chain_id, s.seq, s.prev_hash, s.hash, coalesce(a.created_at, now())
    FROM audit_seals_0023 s LEFT JOIN audit_logs_0023 a ON a.pos = s.pos ORDER BY s.pos;
DROP TABLE audit_logs_0023;
DROP TABLE audit_seals_0023;

-- The page indexes of 0022, on every partition.
CREATE INDEX audit_logs_team_time_idx ON audit_logs (team_id, created_at DESC, pos DESC);
CREATE INDEX audit_logs_team_action_idx ON audit_logs (team_id, action, created_at DESC, pos DESC);
CREATE INDEX audit_logs_team_actor_idx
    ON audit_logs (team_id, lower(user_email), created_at DESC, pos DESC);
CREATE INDEX audit_logs_team_secret_idx
    ON audit_logs (team_id, resource_id, created_at DESC, pos DESC) WHERE resource = 'secret';
CREATE INDEX audit_logs_team_sname_idx
    ON audit_logs (team_id, (metadata->>'name'), created_at DESC, pos DESC)
    WHERE resource IN ('secret', 'share');
CREATE INDEX audit_logs_team_sref_idx
    ON audit_logs (team_id, (metadata->>'secret_id'), created_at DESC, pos DESC)
    WHERE resource IN ('secret', 'share') AND metadata ? 'secret_id';

-- Triggers, as before (row triggers are cloned to every partition, statement triggers with
-- their transition tables stay on the parent).
CREATE TRIGGER audit_logs_immutable BEFORE DELETE ON audit_logs
    FOR EACH ROW EXECUTE FUNCTION cvsm_audit_guard();
CREATE TRIGGER audit_logs_immutable_update BEFORE UPDATE ON audit_logs
    FOR EACH ROW EXECUTE FUNCTION cvsm_audit_guard();
CREATE TRIGGER audit_logs_no_truncate BEFORE TRUNCATE ON audit_logs
    FOR EACH STATEMENT EXECUTE FUNCTION cvsm_audit_no_truncate();
CREATE TRIGGER audit_logs_unseal_removed
    AFTER DELETE ON audit_logs REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION cvsm_audit_unseal_removed();
CREATE TRIGGER audit_seals_immutable BEFORE UPDATE OR DELETE ON audit_seals
    FOR EACH ROW EXECUTE FUNCTION cvsm_audit_seal_guard();
CREATE TRIGGER audit_seals_no_truncate BEFORE TRUNCATE ON audit_seals
    FOR EACH STATEMENT EXECUTE FUNCTION cvsm_audit_no_truncate();
CREATE TRIGGER audit_seals_roll_reads
    AFTER INSERT ON audit_seals REFERENCING NEW TABLE AS sealed
    FOR EACH STATEMENT EXECUTE FUNCTION cvsm_audit_roll_reads();

CREATE VIEW audit_chain_entries AS
    SELECT a.*, s.chain_id, s.seq, s.prev_hash, s.hash
    FROM audit_logs a JOIN audit_seals s ON s.pos = a.pos;

GRANT SELECT, DELETE ON audit_logs TO cvsm_app;
GRANT INSERT (team_id, user_id, user_email, action, resource, resource_id, ip_address, user_agent,
              metadata) ON audit_logs TO cvsm_app;
GRANT SELECT ON audit_seals, audit_chain_entries TO cvsm_app;
REVOKE ALL ON FUNCTION cvsm_audit_make_months(date, date), cvsm_audit_make_partitions(integer)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cvsm_audit_make_partitions(integer) TO cvsm_app;

-- The read rollup of 0022: a batch's entries are in the seals' months (pruned joins).
CREATE OR REPLACE FUNCTION cvsm_audit_roll_reads() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO audit_reads AS r (team_id, secret_id, day, user_email, token_id, via_token, reads,
                                  last_at, last_ip)
    SELECT n.chain_id, a.resource_id, (a.created_at AT TIME ZONE 'UTC')::date,
           coalesce(a.user_email, ''), coalesce(a.metadata->>'token_id', ''),
           (array_agg(a.metadata->>'via_token' ORDER BY a.created_at DESC, a.pos DESC))[1],
           count(*), max(a.created_at),
           (array_agg(a.ip_address ORDER BY a.created_at DESC, a.pos DESC))[1]
    FROM sealed n JOIN audit_logs a ON a.pos = n.pos AND a.created_at = n.created_at
    WHERE a.action = 'read' AND a.resource = 'secret' AND a.resource_id IS NOT NULL
    GROUP BY 1, 2, 3, 4, 5
    ON CONFLICT (team_id, secret_id, day, user_email, token_id) DO UPDATE SET
        reads = r.reads + excluded.reads,
        last_at = greatest(r.last_at, excluded.last_at),
        last_ip = CASE WHEN excluded.last_at >= r.last_at THEN excluded.last_ip ELSE r.last_ip END,
        via_token = CASE WHEN excluded.last_at >= r.last_at THEN excluded.via_token
                         ELSE r.via_token END;
    RETURN NULL;
END $$;

-- The sealer of 0017, writing each seal with its entry's time (the seal's partition).
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
    IF fresh IS NOT NULL AND cardinality(positions) < p_limit AND horizon >= st.pending_xmax THEN
        UPDATE audit_seal_state
            SET sealed_below = greatest(st.sealed_below, st.pending_below),
                pending_below = greatest(st.sealed_below, st.pending_below, top + 1),
                pending_xmax = fresh;
    END IF;
    RETURN cardinality(positions);
END $$;

-- Drop the month starting at p_month (both partitions), if and only if nothing a chain or its
-- verification needs goes with it (see the header); raises otherwise, naming the reason.
CREATE FUNCTION cvsm_audit_drop_month(p_month date) RETURNS bigint
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
    WITH RECURSIVE k(id) AS (
        (SELECT chain_id FROM audit_seals WHERE created_at >= lo AND created_at < hi
         ORDER BY chain_id LIMIT 1)
        UNION ALL
        SELECT (SELECT chain_id FROM audit_seals WHERE created_at >= lo AND created_at < hi
                  AND chain_id > k.id ORDER BY chain_id LIMIT 1)
        FROM k WHERE k.id IS NOT NULL),
    heads AS (
        SELECT k.id, h.seq, cvsm_audit_retention_days(k.id) AS days
        FROM k CROSS JOIN LATERAL (
            SELECT s.seq FROM audit_seals s WHERE s.created_at >= lo AND s.created_at < hi
               AND s.chain_id = k.id ORDER BY s.seq DESC LIMIT 1) h
        WHERE k.id IS NOT NULL)
    SELECT CASE
        WHEN h.days IS NULL THEN 'chain ' || h.id || ' keeps its entries'
        WHEN hi > now() - make_interval(days => h.days) THEN 'chain ' || h.id || ' has entries not expired'
        WHEN coalesce((SELECT c.seq FROM audit_checkpoints c WHERE c.chain_id = h.id
                       ORDER BY c.seq DESC LIMIT 1), 0) < h.seq
            THEN 'chain ' || h.id || ' has no checkpoint at its last entry'
        WHEN EXISTS (SELECT 1 FROM audit_seals s WHERE s.chain_id = h.id AND s.seq < h.seq
                       AND (s.created_at < lo OR s.created_at >= hi))
            THEN 'chain ' || h.id || ' has earlier entries outside the month'
        END INTO bad
    FROM heads h
    WHERE h.days IS NULL OR hi > now() - make_interval(days => h.days)
       OR coalesce((SELECT c.seq FROM audit_checkpoints c WHERE c.chain_id = h.id
                    ORDER BY c.seq DESC LIMIT 1), 0) < h.seq
       OR EXISTS (SELECT 1 FROM audit_seals s WHERE s.chain_id = h.id AND s.seq < h.seq
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
REVOKE ALL ON FUNCTION cvsm_audit_drop_month(date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cvsm_audit_drop_month(date) TO cvsm_app;
