-- 0.4 (operators): disabling an account from the admin panel.
-- A disabled user's sessions and API tokens stop working at once (the credential checks read
-- this column, and disabling bumps the credential epoch); enabling again restores them.
ALTER TABLE users ADD COLUMN disabled_at timestamptz;
