"""One sign-in path for pages: `auth_middleware` reads the session cookie on session routes, and
what every signed-in page shows (the pending deletion's banner, the admin link) comes with the
confirmation of a cached session in one statement."""

from __future__ import annotations

from typing import Any

import aiopg
import pytest

from conftest import query
from test_dashboard import settings, sign_up  # noqa: F401 - the dashboard's settings fixture


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL text of every statement the server runs (aiopg's cursor, wrapped)."""
    seen: list[str] = []
    execute = aiopg.Cursor.execute

    async def recording(self: Any, operation: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(operation if isinstance(operation, str) else str(operation))
        return await execute(self, operation, *args, **kwargs)

    monkeypatch.setattr(aiopg.Cursor, "execute", recording)
    return seen


async def test_a_signed_in_page_reads_what_every_page_shows_in_one_statement(
        client: Any, database_url: str, statements: list[str]) -> None:
    user = await sign_up(client)
    await client.get("/app/tokens")  # the session is cached from here on
    statements.clear()
    page = await client.get("/app/tokens")
    assert page.status == 200
    confirming = [s for s in statements if "credential_epoch" in s]
    assert len(confirming) == 1 and "delete_after" in confirming[0] and "is_admin" in confirming[0]
    assert [s for s in statements if "delete_after" in s or "is_admin" in s] == confirming

    await query(database_url, "UPDATE users SET is_admin = true, delete_after = now() + "
                              "interval '7 days' WHERE username = %s RETURNING id",
                (user["username"],))
    html = await (await client.get("/app/teams")).text()
    assert 'href="/app/admin"' in html and "/app/account/delete/cancel" in html


async def test_a_revoked_session_is_noticed_at_the_page(client: Any, database_url: str) -> None:
    user = await sign_up(client)
    assert (await client.get("/app/teams", allow_redirects=False)).status == 200  # cached
    await query(database_url, "UPDATE sessions SET revoked_at = now() WHERE user_id = "
                              "(SELECT id FROM users WHERE username = %s) RETURNING id",
                (user["username"],))
    await query(database_url, "UPDATE credential_epoch SET epoch = epoch + 1 RETURNING epoch")
    resp = await client.get("/app/teams", allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == "/signin"
