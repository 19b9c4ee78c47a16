-- 0.2.0: usernames. Existing users get one derived from their email prefix, made valid
-- (ASCII letters, digits, underscore; 3 to 40 characters; not reserved) and unique
-- case-insensitively, oldest account first.
ALTER TABLE users ADD COLUMN username text;

DO $$
DECLARE
    u record;
    base text;
    candidate text;
    n integer;
    reserved text[] := ARRAY['admin', 'administrator', 'root', 'system', 'support', 'api', 'help',
        'security', 'staff', 'owner', 'me', 'null', 'undefined', 'settings', 'login', 'logout',
        'register', 'auth', 'public', 'health', 'www'];
BEGIN
    FOR u IN SELECT id, email FROM users WHERE username IS NULL ORDER BY created_at, id LOOP
        base := regexp_replace(split_part(u.email, '@', 1), '[^A-Za-z0-9_]', '_', 'g');
        base := left(base, 40);
        IF length(base) < 3 THEN
            base := rpad(base, 3, '_');
        END IF;
        IF lower(base) = ANY (reserved) THEN
            base := left(base, 38) || '_1';
        END IF;
        candidate := base;
        n := 1;
        WHILE EXISTS (SELECT 1 FROM users WHERE lower(username) = lower(candidate)) LOOP
            n := n + 1;
            candidate := left(base, 40 - length(n::text) - 1) || '_' || n::text;
        END LOOP;
        UPDATE users SET username = candidate WHERE id = u.id;
    END LOOP;
END $$;

ALTER TABLE users ALTER COLUMN username SET NOT NULL;
CREATE UNIQUE INDEX users_username_key ON users (lower(username));
