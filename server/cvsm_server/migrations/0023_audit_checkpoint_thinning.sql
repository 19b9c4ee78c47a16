-- 0.5 (migration 0023): signed checkpoints thinned as they age, and purged with the entries they
-- cover (issue 40). The 5-minute job signs every grown chain: 288 checkpoints a chain a day,
-- 2.33M rows (879 MB) for 100 teams over 180 days, never removed, each loaded and checked by a
-- whole-chain verification. What verification and the purge need of them:
-- * the chain's newest `purge` checkpoint: the anchor of its first kept entry (older purge
--   checkpoints, and every checkpoint below the anchor, cover only entries already removed);
-- * the chain's newest checkpoint (the guard lets the purge delete up to it; the sealer starts an
--   emptied chain from it; `audit verify --from-checkpoint` resumes from it);
-- * enough signed heads along the chain to date it: here one a UTC day (the day's highest) once
--   a checkpoint is older than the kept span, every one before that.
-- `cvsm_audit_thin_checkpoints` removes the rest, at most `p_limit` rows a call (the retention
-- job calls it until it returns less). It runs as the schema owner: the server's role still
-- holds no DELETE on the table, and the function decides what goes by these rules alone.

CREATE FUNCTION cvsm_audit_thin_checkpoints(p_keep interval, p_limit integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    gone integer;
BEGIN
    IF p_keep < interval '1 hour' THEN
        p_keep := interval '1 hour';
    END IF;
    WITH ranked AS (
        SELECT c.id, c.chain_id, c.seq, c.kind, c.signed_at,
               max(c.seq) FILTER (WHERE c.kind = 'purge') OVER (PARTITION BY c.chain_id) AS anchor,
               max(c.seq) OVER (PARTITION BY c.chain_id) AS newest,
               row_number() OVER (PARTITION BY c.chain_id,
                                  (c.signed_at AT TIME ZONE 'UTC')::date
                                  ORDER BY c.seq DESC, c.signed_at DESC) AS in_day
        FROM audit_checkpoints c),
    doomed AS (
        SELECT id FROM ranked
        WHERE seq < anchor                               -- covers removed entries only
           OR (seq < newest AND kind <> 'purge'          -- aged: one a day is kept
               AND signed_at < now() - p_keep AND in_day > 1)
        LIMIT p_limit)
    DELETE FROM audit_checkpoints c USING doomed d WHERE c.id = d.id;
    GET DIAGNOSTICS gone = ROW_COUNT;
    RETURN gone;
END $$;

REVOKE ALL ON FUNCTION cvsm_audit_thin_checkpoints(interval, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cvsm_audit_thin_checkpoints(interval, integer) TO cvsm_app;
