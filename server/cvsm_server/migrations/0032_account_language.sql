-- 0.5 (migration 0032): the language an account reads the pages and its mails in (issue 42,
-- item 1). NULL: not chosen; the pages then follow the browser's `Accept-Language`, else the
-- server's `CVSM_DEFAULT_LANGUAGE`. Set with `PATCH /me {language}` or on the account page.

ALTER TABLE users
    ADD COLUMN language text CHECK (language IN ('id', 'en'));
