"""Test fixtures: one embedded PostgreSQL per run, a fresh database per test (cloned from a
migrated template), and the app built by its own factory on it.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg2
import pytest
from aiohttp.test_utils import TestClient

from cvsm_server import db
from cvsm_server.runtime.app import create_app
from cvsm_server.core.config import Settings
from cvsm_server.support import service as support
from smtpbox import Mailbox
from stripe_mock import StripeFront, settings_env as stripe_settings, stripe_mock_url

MASTER_KEY = base64.b64encode(bytes(range(32))).decode()
JWT_SECRET = "test-jwt-secret-" + "x" * 32
TEMPLATE = "cvsm_template"
_counter = itertools.count()


def admin_execute(url: str, sql: str) -> None:
    conn = psycopg2.connect(url)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def postgres_home() -> Path:
    """A directory for an embedded PostgreSQL's data, outside pytest's temp root.

    As root, the embedded server runs as a `pgserver` system user that must traverse every parent
    of its data dir, and each pytest start resets `/tmp/pytest-of-<user>` to mode 0700: a data
    dir under it becomes unreachable (PANIC at the next checkpoint) when any other pytest starts.
    The server widens no folder it did not make, so the test opens its own (mkdtemp makes 0700)
    for that user to pass.
    """
    home = Path(tempfile.mkdtemp(prefix="cvsm-test-pg-"))
    home.chmod(0o755)
    return home


def running_postgres(pgdata: Path) -> list[int]:
    """The postgres processes whose working directory is `pgdata` (an embedded server's)."""
    real = os.path.realpath(pgdata)
    found = []
    for proc in psutil.process_iter(["name", "cwd", "status"], ad_value=None):
        if (proc.info["name"] == "postgres" and proc.info["status"] != psutil.STATUS_ZOMBIE
                and proc.info["cwd"] and os.path.realpath(proc.info["cwd"]) == real):
            found.append(proc.pid)
    return found


@pytest.fixture
def home() -> Iterator[Path]:
    """A `postgres_home()` for a test's own embedded servers (each in `home/<name>/pg`), removed
    after it with any server a failed test left running."""
    home = postgres_home()
    yield home
    for data in home.iterdir():  # only if a test failed; not to leak them
        for pid in running_postgres(data / "pg"):
            psutil.Process(pid).kill()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Any:
    """The embedded PostgreSQL for the whole run; yields the URL of its `postgres` database."""
    home = postgres_home()
    server = db.EmbeddedPostgres(home)
    url = server.start(database="postgres")
    # A throwaway cluster: nothing is forced to disk (a test waits on no fsync); data survives a
    # crash of PostgreSQL itself, only not one of the machine, which no test makes.
    for setting in ("fsync = off", "synchronous_commit = off", "full_page_writes = off"):
        admin_execute(url, f"ALTER SYSTEM SET {setting}")
    admin_execute(url, "SELECT pg_reload_conf()")
    template_url = url.replace("/postgres?", f"/{TEMPLATE}?")
    admin_execute(url, f"CREATE DATABASE {TEMPLATE}")

    async def migrate_template() -> None:
        pool = await db.create_pool(template_url, maxsize=2)
        try:
            await db.migrate(pool)
            # The help articles, as the app's first start loads them: each app started on a
            # clone finds them loaded (test_support starts one from none).
            await support.load_articles(pool)
        finally:
            pool.close()
            await pool.wait_closed()

    asyncio.run(migrate_template())
    admin_execute(url, f"ALTER ROLE {db.APP_ROLE} LOGIN")
    yield url
    server.stop()
    shutil.rmtree(home, ignore_errors=True)


def database_url_for(postgres: str, name: str) -> str:
    return postgres.replace("/postgres?", f"/{name}?")


@pytest.fixture
def fresh_database(postgres: str) -> Callable[..., str]:
    """Make a new database: migrated (from the template) or, with `empty=True`, blank."""
    made: list[str] = []

    def make(*, empty: bool = False) -> str:
        name = f"t_{next(_counter)}_{uuid.uuid4().hex[:8]}"
        template = "template0" if empty else TEMPLATE
        # FILE_COPY copies the template's files (with a checkpoint, cheap with fsync off) instead
        # of writing each of its pages to the WAL.
        admin_execute(postgres, f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
        made.append(name)
        return database_url_for(postgres, name)

    yield make
    for name in made:
        admin_execute(postgres, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def database_url(fresh_database: Callable[..., str]) -> str:
    """The test database as its owner (to arrange and inspect); the app serves as `cvsm_app`."""
    return fresh_database()


def server_url(owner_url: str) -> str:
    """The same database as the server's own role (`cvsm_app`), as the app connects."""
    return db.with_user(owner_url, db.APP_ROLE)


@pytest.fixture
async def pool(database_url: str):
    """A small pool on the test database as the server's role, for domain functions called
    directly (no app)."""
    pool = await db.create_pool(server_url(database_url), maxsize=4)
    yield pool
    pool.close()
    await pool.wait_closed()


@pytest.fixture
def make_settings(database_url: str, tmp_path: Path) -> Callable[..., Settings]:
    """Settings for the test database; keyword overrides are `CVSM_*` names without the prefix."""

    def make(**overrides: str) -> Settings:
        env = {
            "CVSM_DATABASE_URL": server_url(database_url),
            "CVSM_MIGRATION_DATABASE_URL": database_url,
            "CVSM_DATA_DIR": str(tmp_path / "data"),
            "CVSM_MASTER_KEY": MASTER_KEY,
            "CVSM_JWT_SECRET": JWT_SECRET,
            "CVSM_RATELIMIT_AUTH": "off",
            "CVSM_RATELIMIT_API": "off",
            "CVSM_RATELIMIT_PUBLIC": "off",
            "CVSM_RATELIMIT_FAILED_AUTH": "off",
            "CVSM_BACKGROUND_JOBS": "off",
            "CVSM_APP_URL": "https://cvsm.test",
            # Tests use several environments, which Starter (the shipped default) does not
            # allow a team; the Starter rules are tested with `default_plan="starter"`.
            "CVSM_DEFAULT_PLAN": "professional",
        }
        env.update({f"CVSM_{k.upper()}": v for k, v in overrides.items()})
        return Settings.from_env(env)

    return make


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


@pytest.fixture
async def start_client(aiohttp_client: Any) -> Callable[..., Any]:
    """Start the app from its factory with the given settings; returns an aiohttp TestClient."""

    async def start(settings: Settings) -> TestClient:
        return await aiohttp_client(create_app(settings))

    return start


@pytest.fixture
async def client(start_client: Callable[..., Any], settings: Settings) -> TestClient:
    return await start_client(settings)


class User(dict):
    """A registered test user (`token`, `id`, `username`, `email`, `password`) whose repr, which
    pytest and hypothesis print on failure, holds no token or password."""

    def __repr__(self) -> str:
        return f"User({self.get('username')!r}, id={self.get('id')!r})"


class Api:
    """Small helpers over the real HTTP API, for arranging a test."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    @staticmethod
    def auth(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    async def register(self, username: str | None = None, *, password: str = "correct horse 1",
                       email: str | None = None) -> dict[str, Any]:
        username = username or f"user_{uuid.uuid4().hex[:10]}"
        resp = await self.client.post("/api/v1/auth/register", json={
            "email": email or f"{username}@example.com", "username": username,
            "password": password, "name": username.title(),
        })
        assert resp.status == 201, await resp.text()
        body = await resp.json()
        return User(token=body["token"], id=body["user"]["id"], username=username,
                    email=body["user"]["email"], password=password)

    async def team(self, owner: dict[str, Any], slug: str | None = None) -> str:
        resp = await self.client.post("/api/v1/teams", headers=self.auth(owner["token"]),
                                      json={"name": "Team", "slug": slug or f"team-{uuid.uuid4().hex[:10]}"})
        assert resp.status == 201, await resp.text()
        return (await resp.json())["team"]["id"]

    async def add_member(self, owner: dict[str, Any], team_id: str, user: dict[str, Any], role: str) -> None:
        resp = await self.client.post(f"/api/v1/teams/{team_id}/members", headers=self.auth(owner["token"]),
                                      json={"identifier": user["username"], "role": role})
        assert resp.status == 201, await resp.text()

    async def secret(self, user: dict[str, Any], team_id: str, name: str, value: str,
                     environment: str = "production", **extra: Any) -> str:
        resp = await self.client.post(f"/api/v1/teams/{team_id}/secrets", headers=self.auth(user["token"]),
                                      json={"name": name, "value": value, "environment": environment, **extra})
        assert resp.status == 201, await resp.text()
        return (await resp.json())["secret"]["id"]

    async def api_token(self, user: dict[str, Any], **body: Any) -> dict[str, Any]:
        resp = await self.client.post("/api/v1/tokens", headers=self.auth(user["token"]),
                                      json={"name": "ci", **body})
        assert resp.status == 201, await resp.text()
        return await resp.json()


@pytest.fixture
def api(client: TestClient) -> Api:
    return Api(client)


@pytest.fixture
async def owner(api: Api) -> dict[str, Any]:
    return await api.register("owner_user")


@pytest.fixture
async def team_id(api: Api, owner: dict[str, Any]) -> str:
    return await api.team(owner, "acme")


async def query(database_url: str, sql: str, args: tuple = ()) -> list[dict]:
    """Run SQL directly against the test database (to look at what is stored)."""
    pool = await db.create_pool(database_url, maxsize=1)
    try:
        async with db.cursor(pool) as cur:
            await cur.execute(sql, args or None)
            return list(await cur.fetchall()) if cur.description else []
    finally:
        pool.close()
        await pool.wait_closed()



@pytest.fixture
def mailbox() -> Any:
    """A real SMTP server (aiosmtpd) on a local port for this test; see `smtpbox.py`."""
    box = Mailbox().start()
    yield box
    box.stop()


@pytest.fixture
async def mail_client(start_client: Callable[..., Any], make_settings: Callable[..., Settings],
                      mailbox: Any) -> TestClient:
    """The app with its background jobs on and mail going to `mailbox`."""
    return await start_client(make_settings(smtp_url=mailbox.url, background_jobs="on",
                                            mail_poll_seconds="1"))


@pytest.fixture
async def stripe_front() -> Any:
    """stripe-mock behind a front whose subscriptions the test sets (`stripe_mock.py`): skipped
    with the reason when stripe-mock is not installed, a failure under CI=true."""
    front = StripeFront(stripe_mock_url())
    await front.start()
    yield front
    await front.close()


@pytest.fixture
async def billing_client(start_client: Callable[..., Any], make_settings: Callable[..., Settings],
                         stripe_front: StripeFront) -> TestClient:
    """The app billing through Stripe (`CVSM_BILLING=stripe`), whose API is `stripe_front`."""
    return await start_client(make_settings(**stripe_settings(),
                                            stripe_api_base=stripe_front.url))


# The files that take longest (summed `--durations` of a run: long browser or real-process tests,
# or many tests), longest first. They are collected before the others, and `make test` runs
# `-n 2 --dist loadfile --no-loadscope-reorder`, which hands whole files to the workers in that
# order (without it pytest-xdist sends the files with most tests first, which left the single
# long tests of test_layout and test_schemathesis to run alone at the end). Order only: every
# test of a file still runs in that file's order, on one worker.
SLOW_FILES = ("test_startup.py", "test_layout.py", "test_workers.py", "test_dotenv.py",
              "test_e2e_browser.py", "test_supervise.py", "test_schemathesis.py",
              "test_hostile_input.py", "test_auth.py", "test_webhooks.py", "test_oauth.py",
              "test_flows_browser.py", "test_hostile_pages.py", "test_hardening.py",
              "test_secrets.py", "test_backup.py", "test_shares.py", "test_audit_chain.py",
              "test_hostile_routes.py", "test_support.py", "test_embedded.py", "test_dashboard.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: index for index, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FILES)))  # stable
