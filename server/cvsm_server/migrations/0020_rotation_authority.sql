-- 0.5 (issue 36, migration 0020): rotation policies run with the authority of whoever set them,
-- and a secret a policy uses as its admin credential is a kind of its own.
--
-- `secrets.admin_credential`: set when a rotation policy names the secret as its
-- `admin_secret_id` (and kept while one does). Such a value (a database admin URL) is read by
-- Admins and Owners only, never through a scoped token, never exported (so never in an SDK's
-- get_all, inject or `cvsm run`), never shared, and changed by Admins only (secrets.py).
--
-- `secret_rotation_policies.set_by` / `set_by_token`: the account (and, when it came through an
-- API token, that token) that last saved the policy. Each run checks again that this account is
-- still an Admin of the team and that the token, if any, is live and its scope still reaches
-- every secret the policy names; otherwise the run fails with a recorded error
-- (secret_rotation.py). `set_by_token` has no foreign key on purpose: a token row that is gone
-- must fail the check, not turn into "no token".
ALTER TABLE secrets ADD COLUMN admin_credential boolean NOT NULL DEFAULT false;

ALTER TABLE secret_rotation_policies
    ADD COLUMN set_by uuid REFERENCES users (id) ON DELETE SET NULL,
    ADD COLUMN set_by_token uuid;

UPDATE secret_rotation_policies SET set_by = created_by;

UPDATE secrets s SET admin_credential = true
WHERE EXISTS (SELECT 1 FROM secret_rotation_policies p
              WHERE p.target ->> 'admin_secret_id' = s.id::text);

CREATE INDEX secret_rotation_policies_admin_idx
    ON secret_rotation_policies ((target ->> 'admin_secret_id'))
    WHERE target ? 'admin_secret_id';
