-- 0.5 (migration 0036): the help articles in English beside Indonesian (issue 42). Each article
-- is stored once per language (`cvsm_server/help/<slug>.md` Indonesian, `help/en/<slug>.md`
-- English, the same slugs); an English article is searched with PostgreSQL's `english` text
-- search configuration (stemming and stop words), an Indonesian one with `cvsm_help` as before
-- (migration 0009). The rows are the shipped files' copy: `support.load_articles` fills them again
-- at start-up.

ALTER TABLE help_passages DROP CONSTRAINT help_passages_slug_fkey;
ALTER TABLE help_passages DROP CONSTRAINT help_passages_pkey;
ALTER TABLE help_articles DROP CONSTRAINT help_articles_pkey;

ALTER TABLE help_articles
    ADD COLUMN language text NOT NULL DEFAULT 'id' CHECK (language IN ('id', 'en'));
ALTER TABLE help_passages ADD COLUMN language text NOT NULL DEFAULT 'id';

ALTER TABLE help_articles ADD PRIMARY KEY (language, slug);
ALTER TABLE help_passages ADD PRIMARY KEY (language, slug, position);
ALTER TABLE help_passages ADD FOREIGN KEY (language, slug)
    REFERENCES help_articles (language, slug) ON DELETE CASCADE;

-- The search vectors follow the row's language (a generated column's expression cannot be
-- altered before PostgreSQL 17: dropped and added again, with its index).
DROP INDEX help_articles_search_idx;
ALTER TABLE help_articles DROP COLUMN search;
ALTER TABLE help_articles ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector(CASE WHEN language = 'en' THEN 'english'::regconfig
                               ELSE 'cvsm_help'::regconfig END, title), 'A') ||
    setweight(to_tsvector(CASE WHEN language = 'en' THEN 'english'::regconfig
                               ELSE 'cvsm_help'::regconfig END, body), 'B')) STORED;
CREATE INDEX help_articles_search_idx ON help_articles USING gin (search);

DROP INDEX help_passages_search_idx;
ALTER TABLE help_passages DROP COLUMN search;
ALTER TABLE help_passages ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector(CASE WHEN language = 'en' THEN 'english'::regconfig
                               ELSE 'cvsm_help'::regconfig END, heading), 'A') ||
    setweight(to_tsvector(CASE WHEN language = 'en' THEN 'english'::regconfig
                               ELSE 'cvsm_help'::regconfig END, text), 'B')) STORED;
CREATE INDEX help_passages_search_idx ON help_passages USING gin (search);
