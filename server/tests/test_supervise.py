"""A server that supervises what it started, stops gracefully and signs checkpoints on time:
a killed embedded PostgreSQL is started again under load and requests recover (the outage is
measured and printed), with one log line per state change; an upload still arriving at SIGTERM
is answered before the process exits; a worker seen ending is waited for, not killed; audit
checkpoints fall due from the last one stored, and a clean stop signs every chain that grew.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import socket
import threading
import time
import uuid
from pathlib import Path

import httpx
import psutil
import pytest

from conftest import Api, query, server_url
from cvsm_server.audit import chain as audit_chain
from cvsm_server.runtime import workers
from cvsm_server.web.state import CHECKPOINT_SIGNER, POOL
from test_workers import environment, running_postgres, serving

# The load loop's bounds: its threads, and how long it may run in all.
LOAD_THREADS = 4
LOAD_SECONDS = 90.0
# How long requests may fail after the postmaster is killed before they must succeed again.
OUTAGE_BOUND = 30.0


@pytest.fixture
def on_test_database(database_url: str, tmp_path: Path) -> dict[str, str]:
    return environment(tmp_path / "data", CVSM_DATABASE_URL=server_url(database_url),
                       CVSM_MIGRATION_DATABASE_URL=database_url)


class Load:
    """GET /api/v1/health (a database round trip) from a few threads on 127.0.0.1, each result
    recorded with its time, until stopped or LOAD_SECONDS have passed."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.results: list[tuple[float, bool]] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True)
                        for _ in range(LOAD_THREADS)]
        self.deadline = time.monotonic() + LOAD_SECONDS

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.done.is_set() and time.monotonic() < self.deadline:
                try:
                    ok = client.get(self.url + "/api/v1/health").status_code == 200
                except httpx.HTTPError:
                    ok = False
                with self.lock:
                    self.results.append((time.monotonic(), ok))
                if not ok:
                    time.sleep(0.05)

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join(timeout=15)

    def successes_after(self, moment: float) -> int:
        with self.lock:
            return sum(1 for at, ok in self.results if ok and at > moment)


def test_a_killed_embedded_postgres_is_started_again_under_load_and_requests_recover(home):
    pgdata = home / "data" / "pg"
    environ = environment(home / "data", CVSM_AUDIT_SEAL_SECONDS="0.2",
                          CVSM_MAIL_POLL_SECONDS="0.5", CVSM_WEBHOOK_POLL_SECONDS="0.5",
                          CVSM_ROTATION_POLL_SECONDS="0.5")
    with serving(["--workers", "2"], environ, home / "serve.log") as server:
        with Load(server.url) as load:
            deadline = time.monotonic() + 30
            while load.successes_after(0) < 20:
                assert time.monotonic() < deadline, server.output()
                time.sleep(0.05)
            postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
            psutil.Process(postmaster).kill()
            killed = time.monotonic()
            while load.successes_after(killed + 0.5) < 20:
                assert time.monotonic() < killed + OUTAGE_BOUND, \
                    f"requests did not recover within {OUTAGE_BOUND} s:\n{server.output()}"
                time.sleep(0.05)
            recovered = time.monotonic()
        with load.lock:
            failed = [at for at, ok in load.results if not ok and at > killed]
            served = sum(1 for _, ok in load.results if ok)
        outage = (max(failed) - killed) if failed else 0.0
        print(f"\npostmaster killed under load: {len(failed)} failed requests, the last "
              f"{outage:.2f} s after the kill; 20 successes again after {recovered - killed:.2f} s; "
              f"{served} requests served in all")
        assert outage < OUTAGE_BOUND
        new_postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
        assert new_postmaster != postmaster and psutil.pid_exists(new_postmaster)
        # The restarted PostgreSQL belongs to the parent, which still stops it at the end.
        assert json.loads((pgdata / ".handle_pids.json").read_text()) == [server.proc.pid]
        time.sleep(2)  # the background jobs find the database again
        log = server.output()
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=90) == 0
    assert log.count(f"embedded PostgreSQL (pid {postmaster}) has stopped") == 1, log
    assert log.count("embedded PostgreSQL running again") == 1, log
    assert "Traceback" not in log, log
    # One line when the database goes and one when it is back, per job, not one per retry.
    for job in ("audit sealing job", "mail sender", "webhooks sender", "rotations sender"):
        assert log.count(f"{job}: the database is unreachable") <= 1, log
        assert log.count(f"{job}: the database is back") <= 1, log
    assert log.count("audit sealing job: the database is unreachable") == 1, log
    assert log.count("audit sealing job: the database is back") == 1, log
    assert not running_postgres(pgdata)


VALUE = "v" * 60_000  # a secret value near its 65,536-byte limit


def upload_head(server, length: int) -> bytes:
    """An account and a team on the running server; the head of a request that stores a secret
    in the team (its body, `length` bytes, follows)."""
    name = f"up_{uuid.uuid4().hex[:10]}"
    resp = httpx.post(server.url + "/api/v1/auth/register", timeout=30, json={
        "email": f"{name}@example.com", "username": name, "name": "Uploader",
        "password": "correct horse 1"})
    assert resp.status_code == 201, resp.text
    token = resp.json()["token"]
    resp = httpx.post(server.url + "/api/v1/teams", timeout=30, json={"name": "Up", "slug": name.replace("_", "-")},
                      headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 201, resp.text
    team = resp.json()["team"]["id"]
    return (f"POST /api/v1/teams/{team}/secrets HTTP/1.1\r\nHost: cvsm.test\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def test_an_upload_still_arriving_at_sigterm_is_answered_before_the_server_exits(
        on_test_database, database_url, tmp_path):
    environ = dict(on_test_database, CVSM_BACKGROUND_JOBS="off", CVSM_SHUTDOWN_DRAIN_SECONDS="20")
    body = json.dumps({"name": "UPLOADED", "value": VALUE, "environment": "production"}).encode()
    with serving([], environ, tmp_path / "serve.log") as server:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        head = upload_head(server, len(body))
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(head + body[:1000])
            time.sleep(0.5)  # the server has the request and waits for its body
            server.proc.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            time.sleep(1.0)
            assert server.proc.poll() is None  # still draining
            for start in range(1000, len(body), 10_000):  # the rest, slowly
                sock.sendall(body[start:start + 10_000])
                time.sleep(0.1)
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = sock.recv(65536)
                assert chunk, f"no answer:\n{server.output()}"
                answer += chunk
        status = answer.split(b"\r\n\r\n")[0].decode()
        assert status.startswith("HTTP/1.1 201"), status
        assert "Connection: close" in status
        assert server.proc.wait(timeout=30) == 0
        took = time.monotonic() - stopped
        print(f"\nthe upload was answered and the server exited {took:.2f} s after SIGTERM")
        assert took < 20
        assert "waiting up to 20 s for 1 request(s) in flight" in server.output()
    stored = asyncio.run(query(database_url, "SELECT count(*) AS n FROM secrets "
                                             "WHERE name = 'UPLOADED'"))
    assert stored[0]["n"] == 1


def test_a_request_that_outlasts_the_drain_time_does_not_hold_the_stop(on_test_database,
                                                                      tmp_path):
    environ = dict(on_test_database, CVSM_BACKGROUND_JOBS="off", CVSM_SHUTDOWN_DRAIN_SECONDS="2")
    body = json.dumps({"name": "NEVER", "value": VALUE, "environment": "production"}).encode()
    with serving([], environ, tmp_path / "serve.log") as server:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        head = upload_head(server, len(body))
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(head + body[:1000])
            time.sleep(0.5)
            stopped = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)  # and the rest never comes
            # Held by the request, the stop would never end (the rest of the body never comes):
            # it ends after the 2 s drain plus the process's own exit (slow on a loaded machine).
            assert server.proc.wait(timeout=30) == 0
        assert time.monotonic() - stopped < 25
        assert "1 request(s) still in flight after 2 s" in server.output()


def test_two_workers_stop_without_a_kill_warning(on_test_database, tmp_path):
    for attempt in range(3):
        log = tmp_path / f"serve-{attempt}.log"
        with serving(["--workers", "2"], on_test_database, log) as server:
            assert server.answering_pid() in server.workers()
            stopped = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            assert server.proc.wait(timeout=90) == 0
        assert time.monotonic() - stopped < 30
        assert "did not stop within" not in server.output(), server.output()
        assert "stopping 2 workers" in server.output()


def _close_the_sentinel_then_linger() -> None:
    """A worker whose end the parent sees (its pipe closes) a second before it exits."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.closerange(3, 4096)
    time.sleep(1.0)


async def test_a_worker_seen_ending_is_waited_for_not_killed(make_settings, caplog):
    process = multiprocessing.get_context("spawn").Process(target=_close_the_sentinel_then_linger)
    process.start()
    loop = asyncio.get_running_loop()
    ended = loop.create_future()
    loop.add_reader(process.sentinel, lambda: ended.done() or ended.set_result(None))
    try:
        await asyncio.wait_for(ended, 30)  # its pipe is closed; it still runs
    finally:
        loop.remove_reader(process.sentinel)
    assert process.is_alive()
    supervisor = workers.Supervisor(1, workers.WorkerSpec(index=0, settings=make_settings(),
                                                          url="http://127.0.0.1:1"))
    supervisor.slots[0].process = process
    await supervisor._stop_all(loop)
    assert process.exitcode == 0
    assert "killing it" not in caplog.text


# --- checkpoints -------------------------------------------------------------------------------

async def checkpoints(database_url: str, chain_id: str) -> list[dict]:
    return await query(database_url, "SELECT seq, kind FROM audit_checkpoints WHERE chain_id = %s "
                                     "ORDER BY seq", (chain_id,))


async def unsigned_heads(database_url: str) -> list[dict]:
    """The chains whose sealed head is past their last checkpoint."""
    return await query(database_url, """
        SELECT h.chain_id FROM (SELECT chain_id, max(seq) AS seq FROM audit_chain_entries
                                GROUP BY chain_id) h
        WHERE h.seq > coalesce((SELECT max(c.seq) FROM audit_checkpoints c
                                WHERE c.chain_id = h.chain_id), 0)""")


async def test_the_next_checkpoint_falls_due_from_the_last_one_stored(client, api: Api, owner,
                                                                      team_id, database_url):
    pool = client.app[POOL]
    assert await audit_chain.next_checkpoint_in(pool, 300) == 0.0  # none yet: due now
    assert await audit_chain.checkpoint_grown_chains(pool, client.app[CHECKPOINT_SIGNER]) >= 1
    assert 299 < await audit_chain.next_checkpoint_in(pool, 300) <= 300
    # Signed 250 s ago (by a server that has restarted since): due in 50 s, not in 300.
    await query(database_url, "UPDATE audit_checkpoints SET signed_at = signed_at - "
                              "interval '250 seconds'")
    assert 49 < await audit_chain.next_checkpoint_in(pool, 300) <= 50
    await query(database_url, "UPDATE audit_checkpoints SET signed_at = signed_at - "
                              "interval '100 seconds'")
    assert await audit_chain.next_checkpoint_in(pool, 300) == 0.0  # overdue


async def test_a_restarted_server_signs_an_overdue_checkpoint_at_once(
        client, api: Api, owner, team_id, start_client, make_settings, database_url):
    await audit_chain.checkpoint_grown_chains(client.app[POOL], client.app[CHECKPOINT_SIGNER])
    await query(database_url, "UPDATE audit_checkpoints SET signed_at = signed_at - "
                              "interval '400 seconds'")
    await api.secret(owner, team_id, "API_KEY", "v1")  # the team's chain grows
    jobs = await start_client(make_settings(background_jobs="on", audit_checkpoint_seconds="300"))
    deadline = time.monotonic() + 20
    while len(await checkpoints(database_url, team_id)) < 2:
        assert time.monotonic() < deadline, "the overdue checkpoint waited for a full interval"
        await asyncio.sleep(0.1)
    assert not await unsigned_heads(database_url)
    await jobs.close()


async def test_a_restarted_server_does_not_sign_before_the_checkpoint_is_due(
        client, api: Api, owner, team_id, start_client, make_settings, database_url):
    await audit_chain.checkpoint_grown_chains(client.app[POOL], client.app[CHECKPOINT_SIGNER])
    await api.secret(owner, team_id, "API_KEY", "v1")
    before = await checkpoints(database_url, team_id)
    jobs = await start_client(make_settings(background_jobs="on", audit_checkpoint_seconds="300"))
    await asyncio.sleep(2)
    assert await checkpoints(database_url, team_id) == before  # due in 300 s, restart or not
    await jobs.close()  # a clean stop signs it
    assert len(await checkpoints(database_url, team_id)) == len(before) + 1


async def test_a_clean_stop_signs_every_chain_that_grew(start_client, make_settings,
                                                        database_url):
    client = await start_client(make_settings(background_jobs="on",
                                              audit_checkpoint_seconds="3600"))
    api = Api(client)
    owner = await api.register()
    team = await api.team(owner)
    await api.secret(owner, team, "API_KEY", "v1")
    # Some sealed head unsigned before the stop. The checkpoint job's first round (due at start:
    # none is stored yet) may come after these entries were sealed, on a loaded machine, and
    # sign them all, or after the next ones too: so the team's chain grows again every 2 s
    # until a sealed head is unsigned; after that first round, it waits for the stop (the
    # job's next round is an hour away).
    grown, deadline, more = time.monotonic(), time.monotonic() + 60, 1
    while not await unsigned_heads(database_url):
        if time.monotonic() > grown + 2:
            more += 1
            await api.secret(owner, team, f"API_KEY_{more}", "v")
            grown = time.monotonic()
        assert time.monotonic() < deadline, "the entries were never sealed"
        await asyncio.sleep(0.1)
    await client.close()
    assert not await unsigned_heads(database_url)
    marks = await checkpoints(database_url, team)
    head = await query(database_url, "SELECT max(seq) AS seq FROM audit_seals WHERE chain_id = %s",
                       (team,))
    assert marks[-1]["seq"] == head[0]["seq"] and marks[-1]["kind"] == "periodic"


def test_serve_exits_1_when_its_embedded_postgres_cannot_be_started_again(home):
    pgdata = home / "data" / "pg"
    environ = environment(home / "data", CVSM_BACKGROUND_JOBS="off")
    with serving([], environ, home / "serve.log") as server:
        postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
        # A data dir PostgreSQL refuses to start from: every start fails the same way.
        version = (pgdata / "PG_VERSION").read_text()
        (pgdata / "PG_VERSION").write_text("9\n")
        psutil.Process(postmaster).kill()
        code = server.proc.wait(timeout=120)
        (pgdata / "PG_VERSION").write_text(version)
        assert code == 1, server.output()
    log = server.output()
    assert log.count("has stopped; starting it again") == 1, log
    assert "stopping the server so that its supervisor restarts it" in log
    assert "cvsm-server: stopped: cannot restart the embedded PostgreSQL" in log
    assert "Traceback" not in log



# --- outage logging ----------------------------------------------------------------------------

async def test_background_jobs_log_one_line_when_the_database_goes_and_one_when_it_is_back(
        postgres, make_settings, caplog):
    from conftest import TEMPLATE, admin_execute, database_url_for
    import dataclasses

    from cvsm_server import db
    from cvsm_server.runtime import jobs as registry
    from cvsm_server.mail import sender as mail_sender
    from cvsm_server.crypto.sealing import Keyring

    name = f"t_outage_{uuid.uuid4().hex[:8]}"
    admin_execute(postgres, f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    pool = await db.create_pool(server_url(database_url_for(postgres, name)), maxsize=4)
    keyring = Keyring(bytes(range(32)))
    sender = mail_sender.MailSender(pool, keyring, mail_sender.transport_for(make_settings()),
                                    poll_seconds=0.05)
    sealing = next(job for job in registry.JOBS if job.name == "audit_seal")
    sealing = dataclasses.replace(sealing, interval=lambda settings: 0.05)
    context = registry.Context(pool, keyring, make_settings(), None)
    jobs = [asyncio.create_task(sealing.run(context)), asyncio.create_task(sender.run())]
    try:
        await asyncio.sleep(0.5)
        admin_execute(postgres, f"DROP DATABASE {name} WITH (FORCE)")  # gone: each retry fails
        await asyncio.sleep(2.0)
        admin_execute(postgres, f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        deadline = time.monotonic() + 20
        while caplog.text.count("the database is back") < 2:
            assert time.monotonic() < deadline, caplog.text
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
    finally:
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        pool.close()
        await pool.wait_closed()
        admin_execute(postgres, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    for job in ("audit sealing job", "mail sender"):
        assert caplog.text.count(f"{job}: the database is unreachable") == 1, caplog.text
        assert caplog.text.count(f"{job}: the database is back") == 1, caplog.text
    assert not [r for r in caplog.records if r.exc_info], caplog.text
