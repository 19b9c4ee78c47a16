-- 0.5 (migration 0035): fewer bytes per audit entry in the log's page indexes (issue 40, item 3).
--
-- The six page indexes of 0022 (kept on every month partition by 0024) keyed every entry by
-- its team (a uuid, 16 B), the filter's value as text (an action, an e-mail, a secret id of 36
-- characters, a secret's name) and (created_at, pos): 342 B an entry in all at 200k entries,
-- a third of the log's whole size. Each key is now a 4-byte hash (`uuid_hash` of the team,
-- `hashtext` of the value), and `pos` leaves the keys (ties of created_at are rare and few: the
-- page's order (created_at DESC, pos DESC) is an incremental sort of the index's order):
--
--   audit_logs_team_time_idx   (uuid_hash(team_id), created_at DESC)
--   audit_logs_team_action_idx (uuid_hash(team_id), hashtext(action), created_at DESC)
--   audit_logs_team_actor_idx  (uuid_hash(team_id), hashtext(lower(user_email)), created_at DESC)
--   audit_logs_team_secret_idx (uuid_hash(team_id), hashtext(resource_id), created_at DESC)
--                               WHERE resource = 'secret'
--   audit_logs_team_sname_idx  (uuid_hash(team_id), hashtext(metadata->>'name'), created_at DESC)
--                               WHERE resource IN ('secret', 'share')
--   audit_logs_team_sref_idx   (uuid_hash(team_id), hashtext(metadata->>'secret_id'),
--                               created_at DESC) WHERE ... AND metadata ? 'secret_id'
--
-- An index tuple is 24 B (+4 B its line pointer) whatever the value's length: ~31 B an entry an
-- index instead of 49-93. Every statement names the hashes (what the index finds) and the values
-- themselves (what it keeps: a hash shared by another team or value only costs reading that
-- entry). `uuid_hash` and `hashtext` are PostgreSQL's hash-index support functions, immutable
-- and stable across versions (hash indexes and hash partitions store them).
--
-- The nulling of a deleted team's entries (0017's `cvsm_audit_forget_teams`) finds them by the
-- team's hash, as the pages do. Nothing else (columns, the chain, its hashes, the seals) changes.
--
-- The audit page's filter choices (the actions and the people of a team's log) were skip scans
-- of the action and actor indexes, of every month partition at each page view. They come from
-- `audit_choices` now: one row a team (its chain), kind ('action' or 'person': the lower-cased
-- e-mail) and value, with the time of its newest entry (`last_at`, moved on when it is a day
-- newer at least), kept by the read rollup's trigger (0022/0024) as entries are sealed, from
-- the same join of the batch to the log. The page shows a value whose newest entry is within the
-- team's retention (a day's slack), plus the values of the log's unsealed tail.

DROP INDEX audit_logs_team_time_idx;
DROP INDEX audit_logs_team_action_idx;
DROP INDEX audit_logs_team_actor_idx;
DROP INDEX audit_logs_team_secret_idx;
DROP INDEX audit_logs_team_sname_idx;
DROP INDEX audit_logs_team_sref_idx;

CREATE INDEX audit_logs_team_time_idx ON audit_logs (uuid_hash(team_id), created_at DESC);
CREATE INDEX audit_logs_team_action_idx
    ON audit_logs (uuid_hash(team_id), hashtext(action), created_at DESC);
CREATE INDEX audit_logs_team_actor_idx
    ON audit_logs (uuid_hash(team_id), hashtext(lower(user_email)), created_at DESC);
CREATE INDEX audit_logs_team_secret_idx
    ON audit_logs (uuid_hash(team_id), hashtext(resource_id), created_at DESC)
    WHERE resource = 'secret';
CREATE INDEX audit_logs_team_sname_idx
    ON audit_logs (uuid_hash(team_id), hashtext(metadata->>'name'), created_at DESC)
    WHERE resource IN ('secret', 'share');
CREATE INDEX audit_logs_team_sref_idx
    ON audit_logs (uuid_hash(team_id), hashtext(metadata->>'secret_id'), created_at DESC)
    WHERE resource IN ('secret', 'share') AND metadata ? 'secret_id';


CREATE TABLE audit_choices (
    team_id uuid NOT NULL,  -- the entries' chain (their team at write time)
    kind    text NOT NULL CHECK (kind IN ('action', 'person')),
    value   text NOT NULL,
    last_at timestamptz NOT NULL,
    PRIMARY KEY (team_id, kind, value)
);
INSERT INTO audit_choices (team_id, kind, value, last_at)
    SELECT team_id, 'action', action, max(created_at) FROM audit_logs
    WHERE team_id IS NOT NULL GROUP BY 1, 3
    UNION ALL
    SELECT team_id, 'person', lower(user_email), max(created_at) FROM audit_logs
    WHERE team_id IS NOT NULL AND user_email IS NOT NULL GROUP BY 1, 3;
GRANT SELECT ON audit_choices TO cvsm_app;

-- 0017's, finding the team's entries by the time index's team hash, and dropping the team's
-- filter choices (no page shows a deleted team's log).
CREATE OR REPLACE FUNCTION cvsm_audit_forget_teams() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    WHILE cvsm_audit_seal(5000, true) = 5000 LOOP
    END LOOP;
    UPDATE audit_logs a SET team_id = NULL FROM gone g
        WHERE uuid_hash(a.team_id) = uuid_hash(g.id) AND a.team_id = g.id
          AND EXISTS (SELECT 1 FROM audit_seals s WHERE s.pos = a.pos);
    DELETE FROM audit_choices c USING gone g WHERE c.team_id = g.id;
    RETURN NULL;
END $$;

-- The read rollup of 0024, and the filter choices from the same join of the batch to the log.
-- (Planned without hash or merge joins, as 0037 sets: a database that took 0037 before this
-- file keeps its one probe per sealed entry, CREATE OR REPLACE resetting a function's settings.)
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
    SELECT a.chain_id, a.resource_id, (a.created_at AT TIME ZONE 'UTC')::date,
           coalesce(a.user_email, ''), coalesce(a.metadata->>'token_id', ''),
           (array_agg(a.metadata->>'via_token' ORDER BY a.created_at DESC, a.pos DESC))[1],
           count(*), max(a.created_at),
           (array_agg(a.ip_address ORDER BY a.created_at DESC, a.pos DESC))[1]
    FROM batch a
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

-- The planner's statistics of the new index expressions (the hashes), on every partition: a
-- past month is never analyzed again by autovacuum (nothing changes in it), and without them
-- a page's plan expects a handful of rows where there are thousands (and sorts them all).
ANALYZE audit_logs;
