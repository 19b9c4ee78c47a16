"""The audit page made fast without changing what it shows (issue 40): its rows are the template's
former macro cell for cell (escaping and translations included), and the insights page's last
reads come from each secret's newest rollup day."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from urllib.parse import urlencode

import jinja2
import pytest

from conftest import query
from cvsm_server import db
from cvsm_server.audit import chain as audit_chain, insights
from cvsm_server.core import i18n
from cvsm_server.core.actor import Actor
from cvsm_server.web.pages import audit_rows

# The audit page's rows as its template made them before (the `target` macro and the row).
FORMER = """{% macro target(entry) %}
{%- set m = entry.metadata or {} -%}
{{ entry.resource }}
{%- if entry.resource in ("secret", "share") and m.name %} <a href="{{ link(secret=m.name) }}" aria-label="{{ _("Saring secret %(name)s", name=m.name) }}"><code>{{ m.name }}</code></a>{% if m.environment %} <span class="muted">{{ m.environment }}</span>{% endif %}{% if m.version %} {{ _("versi %(version)s", version=m.version) }}{% endif %}
{%- elif entry.resource in ("member", "invite") and m.email %} {{ m.email }}{% if m["from"] and m.to %} ({{ m["from"] }} → {{ m.to }}){% elif m.role %} ({{ m.role }}){% endif %}
{%- elif entry.resource == "api_token" and m.name %} {{ _("token") }} <code>{{ m.name }}</code>
{%- elif m.name %} <code>{{ m.name }}</code>
{%- elif m.slug %} <code>{{ m.slug }}</code>
{%- endif %}
{%- endmacro %}
{%- for entry in entries %}{% set m = entry.metadata or {} %}<tr><td>{{ entry.created_at.strftime("%Y-%m-%d %H:%M:%S") }}</td><td>{% if entry.user_email %}<a href="{{ link(person=entry.user_email|lower) }}" aria-label="{{ _("Saring orang %(user_email)s", user_email=entry.user_email) }}">{{ entry.user_email }}</a>{% else %}—{% endif %}{% if m.via_token %} <span class="muted">{{ _("via token") }} <code>{{ m.via_token }}</code></span>{% endif %}</td><td><a href="{{ link(action=entry.action) }}" aria-label="{{ _("Saring tindakan %(action)s", action=entry.action) }}">{{ entry.action }}</a></td><td>{{ target(entry) }}</td><td>{{ entry.ip_address or "—" }}</td></tr>
{% endfor %}"""
NOW = "{% for row in rows %}<tr><td>{{ row.when }}</td><td>{{ row.by }}</td><td>{{ row.action }}</td><td>{{ row.target }}</td><td>{{ row.ip }}</td></tr>\n{% endfor %}"

HOSTILE = '<script>"x"&\'y\''


def entry(**fields: object) -> dict:
    return {"created_at": datetime(2026, 5, 4, 3, 2, 1, tzinfo=timezone.utc),
            "user_email": "Ana@Example.com", "action": "read", "resource": "secret",
            "ip_address": "10.0.0.1", "metadata": {}, **fields}


ENTRIES = [
    entry(metadata={"name": "DB_URL", "environment": "production", "version": 3}),
    entry(metadata={"name": "DB_URL", "environment": "production", "version": 3}),  # again
    entry(metadata={"name": "DB_URL", "via_token": "ci-1"}, user_email=None, ip_address=None),
    entry(resource="share", metadata={"name": HOSTILE, "environment": HOSTILE,
                                      "version": HOSTILE}),
    entry(resource="member", action="role_change",
          metadata={"email": "b@example.com", "from": "Viewer", "to": "Admin"}),
    entry(resource="invite", metadata={"email": HOSTILE, "role": "Admin"}),
    entry(resource="member", metadata={"email": "c@example.com"}),
    entry(resource="api_token", action="token_create", metadata={"name": HOSTILE}),
    entry(resource="team", action="team_update", metadata={"slug": "acme"}),
    entry(resource="webhook", metadata={"name": "hook", "slug": "ignored"}),
    entry(resource=None, action="login", metadata=None, user_email=HOSTILE),
    entry(resource="secret", metadata=["not", "an", "object"]),
    entry(resource="secret", metadata={"name": "X", "environment": None, "version": 0,
                                       "via_token": HOSTILE, "tags": ["a", "b"]}),
]


@pytest.mark.parametrize("language", ["id", "en"])
def test_the_rows_are_the_former_templates_cell_for_cell(language: str) -> None:
    i18n.load_catalogs()
    env = jinja2.Environment(autoescape=True, extensions=["jinja2.ext.i18n"])
    env.install_gettext_callables(i18n.gettext, i18n.ngettext, newstyle=True)

    def link(**changes: str) -> str:
        return "/app/teams/t/audit?" + urlencode(changes) + "&page=1"

    with i18n.use_language(language):
        former = env.from_string(FORMER).render(entries=ENTRIES, link=link)
        now = env.from_string(NOW).render(rows=audit_rows.rows(ENTRIES, link))
    assert now == former
    assert "&lt;script&gt;" in now and "<script>" not in now
    assert ("Saring" in now) == (language == "id")


def actor_of(user: dict) -> Actor:
    return Actor.anonymous("127.0.0.1").as_user(uuid.UUID(user["id"]), user["email"])


async def test_unread_secrets_show_the_newest_read_of_the_rollup(client, api, owner, team_id,
                                                                   database_url, pool) -> None:
    secret = await api.secret(owner, team_id, "OLD_READS", "v")
    await query(database_url, "UPDATE secrets SET created_at = now() - interval '200 days' "
                              "WHERE id = %s", (secret,))
    now = datetime.now(timezone.utc)
    reads = [now - timedelta(days=d, hours=h) for d in (90, 60, 45) for h in (1, 5)]
    for at in reads:
        await query(database_url, """
            INSERT INTO audit_logs (team_id, user_email, action, resource, resource_id,
                                    created_at)
            VALUES (%s, 'reader@example.com', 'read', 'secret', %s, %s)""",
                    (team_id, secret, at))
    async with db.cursor(pool) as cur:
        await audit_chain.seal(cur)
    async with pool.acquire() as conn:
        unread = await insights.unread_secrets(conn, actor_of(owner), uuid.UUID(team_id))
    shown = {row["name"]: row["last_read_at"] for row in unread}
    assert shown["OLD_READS"] == max(reads)
