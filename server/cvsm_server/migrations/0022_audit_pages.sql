-- 0.5 (migration 0022): the audit log at scale, part one (issue 40). Pages, filters, the
-- secret page's readers and the read insights in O(page), whatever the size of the log.
--
-- * Pages by keyset: the audit list and its filters walk an index in (created_at, pos) order
--   from a cursor (`before`), newest first. `pos` (unique, the insertion order) breaks ties of
--   created_at, so one index serves the order and the cursor:
--     audit_logs_team_time_idx   (team_id, created_at DESC, pos DESC): the plain list, from/to;
--                                 replaces audit_logs_team_idx (team_id, created_at DESC)
--     audit_logs_team_action_idx (team_id, action, ...):               filter by action
--     audit_logs_team_actor_idx  (team_id, lower(user_email), ...):    filter by person
--     audit_logs_team_secret_idx (team_id, resource_id, ...) WHERE resource = 'secret'
--     audit_logs_team_sname_idx  (team_id, metadata->>'name', ...)   WHERE a secret or share
--     audit_logs_team_sref_idx   (team_id, metadata->>'secret_id', ...) WHERE a secret or share
--                                 naming one: the filter by secret (its id or its name) is
--                                 three index walks merged in order (audit.py).
--   The filter choices (the actions and people of a team) are skip scans of the action and
--   actor indexes: one index probe per distinct value.
-- * Read rollups: `audit_reads` keeps, per team, secret, UTC day and reader (e-mail and token),
--   how many reads and the last one (time, address, token name). A statement trigger on
--   `audit_seals` adds every batch the sealer links, so the rollup is current as entries are
--   sealed (the last second's entries, not sealed yet, are read from the log's unsealed tail by
--   `insights`). The secret page's readers and the unread secrets come from here; the retention
--   purge drops days past the team's retention.
-- * The guard's check that a signed checkpoint covers an expired entry it lets go: one probe of
--   audit_checkpoints_chain_idx (the newest checkpoint of the chain), written so that no plan
--   can turn it into a scan of the table (1 ms per deleted entry at 2M checkpoints).

DROP INDEX audit_logs_team_idx;
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

CREATE TABLE audit_reads (
    team_id    uuid NOT NULL,   -- the entry's chain (its team at write time)
    secret_id  text NOT NULL,   -- the entry's resource_id
    day        date NOT NULL,   -- UTC
    user_email text NOT NULL,   -- '' for none (a system reader)
    token_id   text NOT NULL,   -- '' for a session
    via_token  text,            -- the token's name at the last read
    reads      bigint NOT NULL,
    last_at    timestamptz NOT NULL,
    last_ip    text,
    PRIMARY KEY (team_id, secret_id, day, user_email, token_id)
);
CREATE INDEX audit_reads_token_idx ON audit_reads (team_id, token_id, day) WHERE token_id <> '';
CREATE INDEX audit_reads_team_day_idx ON audit_reads (team_id, day);  -- the purge's expired days

-- The reads among `entries` (rows with pos, chain_id) summed into audit_reads.
CREATE FUNCTION cvsm_audit_roll_reads() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO audit_reads AS r (team_id, secret_id, day, user_email, token_id, via_token, reads,
                                  last_at, last_ip)
    SELECT n.chain_id, a.resource_id, (a.created_at AT TIME ZONE 'UTC')::date,
           coalesce(a.user_email, ''), coalesce(a.metadata->>'token_id', ''),
           (array_agg(a.metadata->>'via_token' ORDER BY a.created_at DESC, a.pos DESC))[1],
           count(*), max(a.created_at),
           (array_agg(a.ip_address ORDER BY a.created_at DESC, a.pos DESC))[1]
    FROM sealed n JOIN audit_logs a ON a.pos = n.pos
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
CREATE TRIGGER audit_seals_roll_reads
    AFTER INSERT ON audit_seals REFERENCING NEW TABLE AS sealed
    FOR EACH STATEMENT EXECUTE FUNCTION cvsm_audit_roll_reads();
REVOKE ALL ON FUNCTION cvsm_audit_roll_reads() FROM PUBLIC;

-- What is sealed already, once.
INSERT INTO audit_reads (team_id, secret_id, day, user_email, token_id, via_token, reads, last_at,
                         last_ip)
SELECT s.chain_id, a.resource_id, (a.created_at AT TIME ZONE 'UTC')::date,
       coalesce(a.user_email, ''), coalesce(a.metadata->>'token_id', ''),
       (array_agg(a.metadata->>'via_token' ORDER BY a.created_at DESC, a.pos DESC))[1],
       count(*), max(a.created_at),
       (array_agg(a.ip_address ORDER BY a.created_at DESC, a.pos DESC))[1]
FROM audit_seals s JOIN audit_logs a ON a.pos = s.pos
WHERE a.action = 'read' AND a.resource = 'secret' AND a.resource_id IS NOT NULL
GROUP BY 1, 2, 3, 4, 5;

-- The server reads the rollup, and the retention purge drops its expired days; the sealer's
-- mark tells where the log's unsealed tail starts (the totals and the rollups add it).
GRANT SELECT, DELETE ON audit_reads TO cvsm_app;
GRANT SELECT ON audit_seal_state TO cvsm_app;

-- The guard of 0017, its checkpoint check one index probe.
CREATE OR REPLACE FUNCTION cvsm_audit_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    days integer;
    s_chain uuid;
    s_seq bigint;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (NEW.id, NEW.user_email, NEW.action, NEW.resource, NEW.resource_id, NEW.ip_address,
            NEW.user_agent, NEW.metadata, NEW.created_at, NEW.pos)
           IS NOT DISTINCT FROM
           (OLD.id, OLD.user_email, OLD.action, OLD.resource, OLD.resource_id, OLD.ip_address,
            OLD.user_agent, OLD.metadata, OLD.created_at, OLD.pos)
           AND (NEW.user_id IS NOT DISTINCT FROM OLD.user_id
                OR (NEW.user_id IS NULL AND NOT EXISTS (SELECT 1 FROM users WHERE id = OLD.user_id)))
           AND (NEW.team_id IS NOT DISTINCT FROM OLD.team_id
                OR (NEW.team_id IS NULL AND NOT EXISTS (SELECT 1 FROM teams WHERE id = OLD.team_id)
                    AND EXISTS (SELECT 1 FROM audit_seals s WHERE s.pos = OLD.pos)))
        THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'audit log entries are immutable' USING ERRCODE = 'insufficient_privilege';
    ELSIF TG_OP = 'DELETE' THEN
        days := cvsm_audit_retention_days(OLD.team_id);
        IF days IS NOT NULL AND OLD.created_at < now() - make_interval(days => days) THEN
            SELECT s.chain_id, s.seq INTO s_chain, s_seq FROM audit_seals s WHERE s.pos = OLD.pos;
            IF s_seq IS NOT NULL AND s_seq <= (SELECT c.seq FROM audit_checkpoints c
                                               WHERE c.chain_id = s_chain
                                               ORDER BY c.seq DESC LIMIT 1) THEN
                RETURN OLD;
            END IF;
        END IF;
        RAISE EXCEPTION 'audit log entries are immutable' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END $$;
