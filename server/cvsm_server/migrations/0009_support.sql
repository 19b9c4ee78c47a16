-- 0.4 (operators): the support assistant. Help articles shipped in the package are loaded at
-- start-up (`support.load_articles`, by slug and content hash) and searched with PostgreSQL
-- full-text search; conversations with the assistant are kept per user, and a conversation
-- escalated to a human becomes a ticket that admins answer in the panel and by mail.

-- One text search configuration for the help texts: Indonesian stemming where the server has
-- it (PostgreSQL 12 and later ship `indonesian`), otherwise `simple`.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_ts_config WHERE cfgname = 'indonesian') THEN
        CREATE TEXT SEARCH CONFIGURATION cvsm_help (COPY = pg_catalog.indonesian);
    ELSE
        CREATE TEXT SEARCH CONFIGURATION cvsm_help (COPY = pg_catalog.simple);
    END IF;
END
$$;

CREATE TABLE help_articles (
    slug         text PRIMARY KEY,
    title        text NOT NULL,
    body         text NOT NULL,
    content_hash text NOT NULL,
    search       tsvector GENERATED ALWAYS AS (
                     setweight(to_tsvector('cvsm_help', title), 'A') ||
                     setweight(to_tsvector('cvsm_help', body), 'B')) STORED,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX help_articles_search_idx ON help_articles USING gin (search);

-- An article's paragraphs (a heading goes with the paragraph after it): the answer quotes the
-- best one.
CREATE TABLE help_passages (
    slug     text NOT NULL REFERENCES help_articles (slug) ON DELETE CASCADE,
    position integer NOT NULL,
    heading  text NOT NULL DEFAULT '',
    text     text NOT NULL,
    search   tsvector GENERATED ALWAYS AS (
                 setweight(to_tsvector('cvsm_help', heading), 'A') ||
                 setweight(to_tsvector('cvsm_help', text), 'B')) STORED,
    PRIMARY KEY (slug, position)
);
CREATE INDEX help_passages_search_idx ON help_passages USING gin (search);

CREATE TABLE support_conversations (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX support_conversations_user_idx ON support_conversations (user_id, updated_at DESC);

-- `author`: the user, the assistant, or an admin answering a ticket (`admin_id`).
CREATE TABLE support_messages (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    conversation_id uuid NOT NULL REFERENCES support_conversations (id) ON DELETE CASCADE,
    author          text NOT NULL CHECK (author IN ('user', 'assistant', 'admin')),
    admin_id        uuid REFERENCES users (id) ON DELETE SET NULL,
    body            text NOT NULL,
    articles        jsonb NOT NULL DEFAULT '[]',
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX support_messages_conversation_idx ON support_messages (conversation_id, created_at);

-- A conversation handed to a human. At most one open ticket per conversation.
CREATE TABLE support_tickets (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    conversation_id uuid NOT NULL REFERENCES support_conversations (id) ON DELETE CASCADE,
    user_id         uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    note            text NOT NULL,
    status          text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'closed')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    closed_at       timestamptz,
    closed_by       uuid REFERENCES users (id) ON DELETE SET NULL
);
CREATE UNIQUE INDEX support_tickets_open_key ON support_tickets (conversation_id)
    WHERE status = 'open';
CREATE INDEX support_tickets_status_idx ON support_tickets (status, created_at DESC);

GRANT SELECT, INSERT, UPDATE, DELETE ON help_articles, help_passages, support_conversations,
    support_messages, support_tickets TO cvsm_app;
