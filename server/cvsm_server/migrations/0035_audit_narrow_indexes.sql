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

-- 0017's, finding the team's entries by the time index's team hash.
CREATE OR REPLACE FUNCTION cvsm_audit_forget_teams() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    WHILE cvsm_audit_seal(5000, true) = 5000 LOOP
    END LOOP;
    UPDATE audit_logs a SET team_id = NULL FROM gone g
        WHERE uuid_hash(a.team_id) = uuid_hash(g.id) AND a.team_id = g.id
          AND EXISTS (SELECT 1 FROM audit_seals s WHERE s.pos = a.pos);
    RETURN NULL;
END $$;
