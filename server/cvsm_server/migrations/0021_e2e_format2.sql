-- 0.5 (issue 37, migration 0021): end-to-end format 2 (docs/e2e.md, "Format 2").
--
-- The server stays a store of what it cannot open or make:
-- - `team_key_wraps.auth`: the recipient's authentication (HMAC under the key version's
--   recipient key over the recipient's kind, id and public key), made by the client that added
--   the recipient; null for wraps of the first format, which clients treat as unauthenticated;
-- - `team_key_links`: per key version v >= 2 the back-link (`cvsm-link1.`), K_{v-1} sealed
--   under K_v by the member who re-keyed; a version of the first format has none;
-- - `team_e2e_anchors`: per (member, team) the member's anchor (`cvsm-anchor1.`), the newest
--   key version and commitment their client verified, sealed under a key only their private key
--   gives. Deleted with the member's account or the team, and when they leave the team.
ALTER TABLE team_key_wraps ADD COLUMN auth text;

CREATE TABLE team_key_links (
    team_id     uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    key_version integer NOT NULL CHECK (key_version >= 2),
    link        text NOT NULL,
    created_by  uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (team_id, key_version)
);

CREATE TABLE team_e2e_anchors (
    user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    team_id    uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    anchor     text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, team_id)
);
CREATE INDEX team_e2e_anchors_team_idx ON team_e2e_anchors (team_id);

GRANT SELECT, INSERT, UPDATE, DELETE ON team_key_links, team_e2e_anchors TO cvsm_app;
