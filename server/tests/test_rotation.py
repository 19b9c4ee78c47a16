"""Master-key rotation with real processes: `cvsm-server rotate-key` re-encrypts while a
`cvsm-server serve` keeps serving, resumes after `kill -9`, and a server without the key that
still seals some values refuses to start."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import httpx
import psycopg2
import pytest

from conftest import JWT_SECRET, MASTER_KEY, server_url
from cvsm_server.crypto.sealing import key_id_of
from serving import CONSOLE_SCRIPT, served

OLD_KEY = MASTER_KEY
NEW_KEY = base64.b64encode(bytes(range(100, 132))).decode()
OLD_ID = key_id_of(base64.b64decode(OLD_KEY))
NEW_ID = key_id_of(base64.b64decode(NEW_KEY))
NO_LIMITS = {f"CVSM_RATELIMIT_{kind}": "off" for kind in ("AUTH", "API", "PUBLIC", "FAILED_AUTH")}
SEALED = [("secrets", "key_id"), ("secret_versions", "key_id"), ("secret_shares", "key_id"),
          ("users", "totp_key_id"), ("mail_outbox", "key_id"), ("webhooks", "key_id"),
          ("secret_rotation_policies", "key_id"), ("secret_rotations", "key_id")]


def subdir(tmp_path: Path, name: str) -> Path:
    (tmp_path / name).mkdir(exist_ok=True)
    return tmp_path / name


def command_env(database_url: str, tmp_path: Path, **env: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
    environ.update({
        "CVSM_DATABASE_URL": server_url(database_url),
        "CVSM_MIGRATION_DATABASE_URL": database_url,
        "CVSM_DATA_DIR": str(tmp_path / "cmd-data"),
        "CVSM_JWT_SECRET": JWT_SECRET,
        "CVSM_BACKGROUND_JOBS": "off",
        **env,
    })
    return environ


def rotate_key(database_url: str, tmp_path: Path, *extra: str) -> subprocess.Popen:
    env = command_env(database_url, tmp_path, CVSM_MASTER_KEY=NEW_KEY, CVSM_OLD_MASTER_KEYS=OLD_KEY)
    return subprocess.Popen([str(CONSOLE_SCRIPT), "rotate-key", *extra], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def keys_in_use(database_url: str) -> dict[str, int]:
    conn = psycopg2.connect(database_url)
    try:
        with conn.cursor() as cur:
            found: dict[str, int] = {}
            for table, column in SEALED:
                cur.execute(f"SELECT {column}, count(*) FROM {table} WHERE {column} IS NOT NULL "
                            f"GROUP BY 1")
                for key_id, n in cur.fetchall():
                    found[key_id] = found.get(key_id, 0) + n
            return found
    finally:
        conn.close()


def sql(database_url: str, statement: str, args: tuple = ()) -> None:
    conn = psycopg2.connect(database_url)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(statement, args)
    finally:
        conn.close()


class Client:
    """A signed-in user of a served cvsm over HTTP, with one team."""

    def __init__(self, url: str, database_url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=30)
        name = f"u_{uuid.uuid4().hex[:8]}"
        self.password = "correct horse 1"
        resp = self.http.post("/api/v1/auth/register", json={
            "email": f"{name}@example.com", "username": name, "password": self.password,
            "name": name})
        assert resp.status_code == 201, resp.text
        self.username = name
        self.use(resp.json()["token"])
        resp = self.http.post("/api/v1/teams", json={"name": "T", "slug": f"t-{uuid.uuid4().hex[:8]}"})
        assert resp.status_code == 201, resp.text
        self.team = resp.json()["team"]["id"]
        # Room for many secrets (what `cvsm-server team set-plan` does).
        sql(database_url, "UPDATE teams SET plan = 'enterprise', max_secrets = 100000 WHERE id = %s",
            (self.team,))

    def use(self, token: str) -> None:
        self.http.headers["Authorization"] = f"Bearer {token}"

    def at(self, url: str) -> None:
        self.http.base_url = url

    def bulk(self, prefix: str, n: int) -> dict[str, str]:
        values = {f"{prefix}_{i}": f"value {prefix} {i} {uuid.uuid4().hex}" for i in range(n)}
        items = [{"name": k, "value": v, "environment": "production"} for k, v in values.items()]
        for start in range(0, len(items), 500):
            resp = self.http.post(f"/api/v1/teams/{self.team}/secrets/bulk",
                                  json={"items": items[start:start + 500]})
            assert resp.status_code in (200, 201, 207), resp.text
        return values

    def create(self, name: str, value: str) -> str:
        resp = self.http.post(f"/api/v1/teams/{self.team}/secrets",
                              json={"name": name, "value": value, "environment": "production"})
        assert resp.status_code == 201, resp.text
        return resp.json()["secret"]["id"]

    def update(self, secret_id: str, value: str) -> None:
        resp = self.http.put(f"/api/v1/teams/{self.team}/secrets/{secret_id}", json={"value": value})
        assert resp.status_code == 200, resp.text

    def read(self, name: str) -> str:
        resp = self.http.get(f"/api/v1/teams/{self.team}/secrets/by-name/{name}",
                             params={"environment": "production"})
        assert resp.status_code == 200, resp.text
        return resp.json()["value"]

    def check_all(self, values: dict[str, str]) -> None:
        resp = self.http.get(f"/api/v1/teams/{self.team}/secrets/export",
                             params={"environment": "production", "format": "json"})
        assert resp.status_code == 200, resp.text
        exported = resp.json()
        for name, value in values.items():
            assert exported[name] == value, name


@pytest.fixture
def client():
    """Make a `Client`; every one is closed after the test."""
    made: list[Client] = []

    def make(url: str, database_url: str) -> Client:
        made.append(Client(url, database_url))
        return made[-1]

    yield make
    for one in made:
        one.http.close()


def test_values_written_before_during_and_after_rotation_read_back_and_tokens_still_work(
        database_url, tmp_path, client):
    # Before: everything sealed under the old key, with a share link, an API token, a TOTP
    # secret (2FA set-up) and mail waiting in the outbox.
    with served(database_url, subdir(tmp_path, "a"), CVSM_MASTER_KEY=OLD_KEY, **NO_LIMITS) as old:
        me = client(old.url, database_url)
        values = me.bulk("before", 600)
        sid = me.create("VERSIONED", "v1")
        me.update(sid, "v2")
        values["VERSIONED"] = "v2"
        share = me.http.post(f"/api/v1/teams/{me.team}/secrets/{sid}/shares",
                             json={"max_views": 5}).json()
        share_token = share["url"].rsplit("/", 1)[1]
        api_token = me.http.post("/api/v1/tokens", json={"name": "ci"}).json()["token"]
        assert me.http.post("/api/v1/me/2fa/setup").status_code == 200
        assert me.http.post("/api/v1/auth/verify-email/request").status_code in (200, 202)
    assert set(keys_in_use(database_url)) == {OLD_ID}

    # During: a server with the new key (and the old one listed) serves while rotate-key runs.
    with served(database_url, subdir(tmp_path, "b"), CVSM_MASTER_KEY=NEW_KEY,
                CVSM_OLD_MASTER_KEYS=OLD_KEY, **NO_LIMITS) as both:
        me.at(both.url)
        written_during: dict[str, str] = {}
        errors: list[str] = []
        done = threading.Event()

        def keep_serving() -> None:
            i = 0
            while not done.is_set() and i < 400:
                try:
                    name = f"during_{i}"
                    value = f"written during rotation {i}"
                    me.create(name, value)
                    written_during[name] = value
                    assert me.read(f"before_{(i * 7) % 600}") == values[f"before_{(i * 7) % 600}"]
                    me.update(sid, f"v{i + 3}")
                    values["VERSIONED"] = f"v{i + 3}"
                except AssertionError as exc:
                    errors.append(str(exc))
                    return
                i += 1

        worker = threading.Thread(target=keep_serving)
        worker.start()
        time.sleep(0.5)
        proc = rotate_key(database_url, tmp_path, "--batch-size", "25")
        output, _ = proc.communicate(timeout=240)
        done.set()
        worker.join(timeout=60)
        assert not errors, errors
        assert proc.returncode == 0, output
        assert "re-encrypted" in output and "rotate-key done" in output, output
        assert written_during, "the server wrote nothing while rotate-key ran"
        # After: written by the same server once the rotation is done.
        me.create("AFTER", "written after")
        values.update(written_during, AFTER="written after")
    assert set(keys_in_use(database_url)) == {NEW_ID}

    # The old key can go: a server with only the new key reads every value, and the share link,
    # the API token and the TOTP secret (hashed or sealed before the rotation) still work.
    with served(database_url, subdir(tmp_path, "c"), CVSM_MASTER_KEY=NEW_KEY, **NO_LIMITS) as new:
        me.at(new.url)
        me.check_all(values)
        assert me.read("VERSIONED") == values["VERSIONED"]
        versions = me.http.get(f"/api/v1/teams/{me.team}/secrets/{sid}/versions").json()
        assert len(versions["versions"]) >= 2
        rolled = me.http.post(f"/api/v1/teams/{me.team}/secrets/{sid}/rollback", json={"version": 1})
        assert rolled.status_code == 200, rolled.text
        assert me.read("VERSIONED") == "v1"
        viewed = me.http.get(f"/api/v1/public/share/{share_token}", headers={"Authorization": ""})
        assert viewed.status_code == 200 and viewed.json()["value"] == "v2", viewed.text
        as_token = me.http.get("/api/v1/me", headers={"Authorization": f"Bearer {api_token}"})
        assert as_token.status_code == 200, as_token.text
        enable = me.http.post("/api/v1/me/2fa/enable", json={"code": "000000"})
        assert enable.status_code in (400, 401, 422), enable.text  # the sealed secret opened

    # The old key alone no longer matches the data.
    env = command_env(database_url, tmp_path, CVSM_MASTER_KEY=OLD_KEY)
    refused = subprocess.run([str(CONSOLE_SCRIPT), "serve", "--port", "0"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 3, refused.stderr
    assert f"under key {NEW_ID}" in refused.stderr and "Traceback" not in refused.stderr


def test_rotate_key_killed_mid_way_resumes_and_a_server_without_the_old_key_refuses_meanwhile(
        database_url, tmp_path, client):
    with served(database_url, subdir(tmp_path, "a"), CVSM_MASTER_KEY=OLD_KEY, **NO_LIMITS) as old:
        me = client(old.url, database_url)
        values = me.bulk("k", 1500)
    proc = rotate_key(database_url, tmp_path, "--batch-size", "5")
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "secrets: " in line and "re-encrypted" in line:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    half = keys_in_use(database_url)
    assert half.get(NEW_ID, 0) > 0 and half.get(OLD_ID, 0) > 0, (half, seen)

    # Without the old key while values remain under it: a clear refusal, exit 3.
    env = command_env(database_url, tmp_path, CVSM_MASTER_KEY=NEW_KEY)
    refused = subprocess.run([str(CONSOLE_SCRIPT), "serve", "--port", "0"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 3, refused.stderr
    assert f"under key {OLD_ID}" in refused.stderr, refused.stderr
    assert "CVSM_OLD_MASTER_KEYS" in refused.stderr and "Traceback" not in refused.stderr

    rerun = rotate_key(database_url, tmp_path, "--batch-size", "200")
    output, _ = rerun.communicate(timeout=240)
    assert rerun.returncode == 0, output
    assert f"{half[OLD_ID]} value(s) to re-encrypt" in output, output
    assert keys_in_use(database_url) == {NEW_ID: sum(half.values())}

    with served(database_url, subdir(tmp_path, "c"), CVSM_MASTER_KEY=NEW_KEY, **NO_LIMITS) as new:
        me.at(new.url)
        me.check_all(values)


def test_a_new_key_without_the_old_one_listed_is_refused_before_anything_is_sealed(
        database_url, tmp_path, client):
    with served(database_url, subdir(tmp_path, "a"), CVSM_MASTER_KEY=OLD_KEY, **NO_LIMITS) as old:
        me = client(old.url, database_url)
        me.create("ONE", "1")
    env = command_env(database_url, tmp_path, CVSM_MASTER_KEY=NEW_KEY)
    result = subprocess.run([str(CONSOLE_SCRIPT), "rotate-key"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 3, result.stderr
    assert "does not match" in result.stderr and "CVSM_OLD_MASTER_KEYS" in result.stderr
    assert set(keys_in_use(database_url)) == {OLD_ID}


def test_old_master_keys_are_parsed_without_quoting_them_and_never_shown():
    from cvsm_server.core.config import ConfigError, Settings
    from cvsm_server.crypto.sealing import Keyring

    bad = "not-base64-at-all!!"
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"CVSM_OLD_MASTER_KEYS": f"{OLD_KEY}, {bad}"})
    assert "item 2" in str(caught.value) and bad not in str(caught.value)
    settings = Settings.from_env({"CVSM_MASTER_KEY": NEW_KEY, "CVSM_OLD_MASTER_KEYS": f"{OLD_KEY},"})
    keyring = Keyring(settings.master_key, settings.old_master_keys)
    assert keyring.key_ids == (NEW_ID, OLD_ID)
    for shown in (repr(settings), repr(keyring)):
        assert OLD_KEY not in shown and NEW_KEY not in shown
    sealed = Keyring(base64.b64decode(OLD_KEY)).seal(b"x", b"aad")
    assert keyring.open(sealed.key_id, sealed.nonce, sealed.ciphertext, b"aad") == b"x"
    assert keyring.seal(b"x", b"aad").key_id == NEW_ID
