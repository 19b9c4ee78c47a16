"""The one route table. Ids in paths are constrained to UUIDs, so `/secrets/bulk`,
`/secrets/export` and `/secrets/by-name/...` can never be taken for a secret id, whatever the
order of registration; a malformed id matches no route and is a 404. `{team_id}` is a team's id
or its slug (`web.request.team_of`)."""

from __future__ import annotations

from aiohttp import web

from . import accounts, apidoc, dashboard, metrics, pages, secrets, shares, teams

UUID = r"{%s:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}}"
TEAM = "/api/v1/teams/{team_id}"
SECRET = f"{TEAM}/secrets/{UUID % 'secret_id'}"

ROUTES = [
    web.get("/api/v1/health", shares.health),
    web.get("/api/v1/public/stats", shares.stats),
    web.get("/api/v1/openapi.json", apidoc.openapi_json),
    web.get("/api/v1/docs", pages.docs_page),
    web.get("/api/v1/public/share/{token}", shares.view_share),

    web.post("/api/v1/auth/register", accounts.register),
    web.post("/api/v1/auth/login", accounts.login),
    web.post("/api/v1/auth/verify-email/request", accounts.request_verification),
    web.post("/api/v1/auth/verify-email", accounts.verify_email),
    web.post("/api/v1/auth/password-reset/request", accounts.request_password_reset),
    web.post("/api/v1/auth/password-reset", accounts.reset_password),
    web.get("/api/v1/me", accounts.me),
    web.post("/api/v1/me/logout-all", accounts.logout_all),
    web.post("/api/v1/me/2fa/setup", accounts.totp_setup),
    web.post("/api/v1/me/2fa/enable", accounts.totp_enable),
    web.post("/api/v1/me/2fa/disable", accounts.totp_disable),
    web.get("/api/v1/tokens", accounts.list_tokens),
    web.post("/api/v1/tokens", accounts.create_token),
    web.delete(f"/api/v1/tokens/{UUID % 'token_id'}", accounts.revoke_token),

    web.get("/api/v1/teams", teams.list_teams),
    web.post("/api/v1/teams", teams.create_team),
    web.get(TEAM, teams.get_team),
    web.delete(TEAM, teams.delete_team),
    web.get(f"{TEAM}/members", teams.list_members),
    web.post(f"{TEAM}/members", teams.add_member),
    web.patch(f"{TEAM}/members/{UUID % 'user_id'}", teams.update_member),
    web.delete(f"{TEAM}/members/{UUID % 'user_id'}", teams.remove_member),
    web.get(f"{TEAM}/audit", teams.list_audit),

    web.get(f"{TEAM}/secrets", secrets.list_secrets),
    web.post(f"{TEAM}/secrets", secrets.create_secret),
    web.get(f"{TEAM}/secrets/export", secrets.export),
    web.post(f"{TEAM}/secrets/bulk", secrets.bulk_create),
    web.delete(f"{TEAM}/secrets/bulk", secrets.bulk_delete),
    web.post(f"{TEAM}/secrets/bulk/import-dotenv", secrets.import_dotenv),
    web.post(f"{TEAM}/secrets/bulk/move-env", secrets.move_env),
    web.get(f"{TEAM}/secrets/by-name/{{name}}", secrets.read_secret_by_name),
    web.get(SECRET, secrets.read_secret),
    web.put(SECRET, secrets.update_secret),
    web.delete(SECRET, secrets.delete_secret),
    web.get(f"{SECRET}/versions", secrets.list_versions),
    web.post(f"{SECRET}/rollback", secrets.rollback),
    web.post(f"{SECRET}/shares", shares.create_share),
    web.get(f"{SECRET}/shares", shares.list_shares),
    web.delete(f"{SECRET}/shares/{UUID % 'share_id'}", shares.revoke_share),

    web.get("/share/{token}", pages.share_page),
    # Prometheus metrics: a 404 unless CVSM_METRICS_TOKEN is set (web/metrics.py).
    web.get("/metrics", metrics.metrics_page),
    web.get("/static/{name}", pages.asset),

    # The dashboard: pages for people, over the same domain functions as the API above.
    web.get("/", dashboard.index),
    web.get("/signin", dashboard.signin_page),
    web.post("/signin", dashboard.signin),
    web.post("/signin/2fa", dashboard.signin_code),
    web.get("/signup", dashboard.signup_page),
    web.post("/signup", dashboard.signup),
    web.get("/forgot-password", dashboard.forgot_page),
    web.post("/forgot-password", dashboard.forgot),
    web.get("/reset-password", dashboard.reset_page),
    web.post("/reset-password", dashboard.reset_password),
    web.get("/verify-email", dashboard.verify_page),
    web.post("/verify-email", dashboard.verify_email),
    web.post("/signout", dashboard.signout),
    web.get("/app/teams", dashboard.teams_page),
    web.post("/app/teams", dashboard.create_team),
    web.get("/app/teams/{team}/secrets", dashboard.secrets_page),
    web.post("/app/teams/{team}/secrets", dashboard.create_secret),
    web.post(f"/app/teams/{{team}}/secrets/{UUID % 'secret_id'}/reveal", dashboard.reveal_secret),
    web.post(f"/app/teams/{{team}}/secrets/{UUID % 'secret_id'}/delete", dashboard.delete_secret),
    web.get(f"/app/teams/{{team}}/secrets/{UUID % 'secret_id'}", dashboard.secret_page),
    web.post(f"/app/teams/{{team}}/secrets/{UUID % 'secret_id'}", dashboard.update_secret),
    web.post(f"/app/teams/{{team}}/secrets/{UUID % 'secret_id'}/rollback", dashboard.rollback_secret),
    web.post(f"/app/teams/{{team}}/secrets/{UUID % 'secret_id'}/shares", dashboard.create_share),
    web.post(f"/app/teams/{{team}}/secrets/{UUID % 'secret_id'}/shares/{UUID % 'share_id'}/revoke",
             dashboard.revoke_share),
    web.post("/app/teams/{team}/import", dashboard.import_dotenv),
    web.post("/app/teams/{team}/export", dashboard.export_dotenv),
    web.get("/app/teams/{team}/members", dashboard.members_page),
    web.post("/app/teams/{team}/members", dashboard.add_member),
    web.post(f"/app/teams/{{team}}/members/{UUID % 'user_id'}", dashboard.change_member),
    web.get("/app/teams/{team}/audit", dashboard.audit_page),
    web.get("/app/tokens", dashboard.tokens_page),
    web.post("/app/tokens", dashboard.create_token),
    web.post(f"/app/tokens/{UUID % 'token_id'}/revoke", dashboard.revoke_token),
    web.get("/app/account", dashboard.account_page),
    web.post("/app/account/verify-email", dashboard.request_verification),
    web.post("/app/account/2fa/setup", dashboard.totp_setup),
    web.post("/app/account/2fa/enable", dashboard.totp_enable),
]


def setup_routes(app: web.Application) -> None:
    app.router.add_routes(ROUTES)
