-- 0.5 (migration 0040): an audited read writes two page-index entries fewer (issue 38's read
-- figures, issue 40's bytes per entry).
--
-- Reads are nearly every entry of a busy log, and every read wrote into all six page indexes of
-- 0035 that its row matched: time, action, actor, secret by id, and secret by name (WAL 870 B
-- a read against 490 B before the page indexes, PostgreSQL CPU a sixth more). Two of those are
-- not needed for reads:
--
-- - the action index: a page filtered by action `read` walks the time index (reads are the
--   log's bulk: nearly every entry it meets is one); any other action walks this index, which
--   now leaves reads out (`WHERE action <> 'read'`). It keys the action itself, not its hash:
--   PostgreSQL takes no statistics from a partial index's expressions, so a hash's share of
--   the rows was a guess (1 in 200), and a page of a common action (a third of a month's
--   entries) was read whole and sorted instead of walked (112 ms at 5M entries); the column's
--   own statistics estimate `action = ...` right. Only the entries that are not reads are in it.
-- - the secret-by-name index: a read always names its secret by id (`resource_id`), and a
--   secret's name never changes, so the reads of the secrets a name has named in the team are
--   found by the secret-by-id index, one walk for each such secret (`audit/listing.py`); the
--   name index keeps every other entry that names a secret or a share by name.
--
-- `secrets_team_name_idx` finds the secrets a name has named in a team, deleted ones too.

CREATE INDEX audit_logs_team_action_nr_idx
    ON audit_logs (uuid_hash(team_id), action, created_at DESC)
    WHERE action <> 'read';
DROP INDEX audit_logs_team_action_idx;
ALTER INDEX audit_logs_team_action_nr_idx RENAME TO audit_logs_team_action_idx;

CREATE INDEX audit_logs_team_sname_nr_idx
    ON audit_logs (uuid_hash(team_id), hashtext(metadata->>'name'), created_at DESC)
    WHERE resource IN ('secret', 'share') AND action <> 'read';
DROP INDEX audit_logs_team_sname_idx;
ALTER INDEX audit_logs_team_sname_nr_idx RENAME TO audit_logs_team_sname_idx;

CREATE INDEX secrets_team_name_idx ON secrets (team_id, name);
