"""Backup and restore at scale (issue 40): fills N audit entries over 100 teams as
bench/growth.py does (its own fill, sealing and checkpoints), then times `cvsm-server backup FILE`
and `cvsm-server restore FILE` (into a new, empty database of the same PostgreSQL) as an
operator runs them, and prints the figures docs/operations.md ("Backup and restore") quotes,
with the machine they were measured on.

    .venv/bin/python bench/backup.py                    # 1,000,000 entries
    .venv/bin/python bench/backup.py --entries 200000

Starts an embedded PostgreSQL in a temporary directory; the commands run with the wheel's
PostgreSQL programs first on PATH (pg_dump must be at least the server's version).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg2
import psycopg2.extensions

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))
sys.path.insert(0, str(ROOT / "bench"))

from growth import (SECRETS, TEAMS, daily_checkpoints, fill, long_statement,  # noqa: E402
                    seal_all, say)

from cvsm_server import db  # noqa: E402
from cvsm_server.audit import chain as audit_chain  # noqa: E402
from cvsm_server.crypto import keys  # noqa: E402
from cvsm_server.crypto.sealing import Keyring  # noqa: E402
from cvsm_server.db.embedded import wheel_bin_dir  # noqa: E402

CLI = Path(sys.executable).with_name("cvsm-server")


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor() or "unknown CPU")
    memory = next((int(line.split()[1]) // 1024 // 1024 for line in
                   Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal")), 0)
    load = os.getloadavg()[0]
    return (f"{os.cpu_count()} vCPU ({cpu}), {memory} GiB RAM, {platform.system()} "
            f"{platform.release()}, load average {load:.1f} at the start")


def command(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Run `cvsm-server ARGS`; (seconds, its output)."""
    began = time.perf_counter()
    proc = subprocess.run([str(CLI), *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=3600)
    took = time.perf_counter() - began
    out = proc.stdout.decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"cvsm-server {' '.join(args)} failed ({proc.returncode}):\n{out}")
    return took, out


async def run(entries: int) -> None:
    say(f"Machine: {machine()}")
    home = Path(tempfile.mkdtemp(prefix="cvsm-bench-backup-"))
    home.chmod(0o755)
    embedded = db.EmbeddedPostgres(home)
    owner_url = embedded.start()
    try:
        pool = await db.create_pool(owner_url, maxsize=4)
        await db.migrate(pool)
        master_key = base64.b64encode(os.urandom(32)).decode()
        env = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
        env.update({
            "CVSM_DATABASE_URL": owner_url, "CVSM_MIGRATION_DATABASE_URL": owner_url,
            "CVSM_DATA_DIR": str(home / "data"), "CVSM_MASTER_KEY": master_key,
            "CVSM_JWT_SECRET": base64.b64encode(os.urandom(32)).decode(),
            "CVSM_ALLOW_SUPERUSER": "1",
            "PATH": f"{wheel_bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "server"), os.environ.get("PYTHONPATH", "")]),
        })
        others: list[uuid.UUID] = []
        async with db.cursor(pool) as cur:
            busy = (await db.fetchone(cur, "INSERT INTO teams (slug, name, plan) VALUES "
                                           "('busy', 'Busy', 'professional') RETURNING id"))["id"]
            for i in range(TEAMS - 1):
                row = await db.fetchone(cur, "INSERT INTO teams (slug, name, plan) VALUES "
                                             "(%s, 'other', 'professional') RETURNING id",
                                        (f"team-{i}",))
                others.append(row["id"])
        say(f"Filling {entries:,} entries over {TEAMS} teams ...")
        await fill(pool, busy, others, [str(uuid.uuid4()) for _ in range(SECRETS)], entries)
        await seal_all(pool)
        keyring = Keyring(base64.b64decode(master_key))
        await keys.check_master_key(pool, keyring)  # the canary, and the checkpoint key
        signer = audit_chain.CheckpointSigner(keyring)
        say(f"  {await daily_checkpoints(pool, owner_url, signer):,} daily checkpoints signed")
        await asyncio.to_thread(long_statement, owner_url, "VACUUM ANALYZE")
        async with db.cursor(pool) as cur:
            size = (await db.fetchone(cur, "SELECT pg_database_size(current_database()) AS n, "
                                           "(SELECT count(*) FROM audit_logs) AS entries"))
        pool.close()
        await pool.wait_closed()

        dump = home / "cvsm.dump"
        backup_s, _ = command(["backup", str(dump)], env)
        restored_url = psycopg2.extensions.make_dsn(owner_url, dbname="restored")
        long_statement(owner_url, "CREATE DATABASE restored TEMPLATE template0")
        restore_env = {**env, "CVSM_DATABASE_URL": restored_url,
                       "CVSM_MIGRATION_DATABASE_URL": restored_url}
        restore_s, _ = command(["restore", str(dump)], restore_env)
        conn = psycopg2.connect(restored_url)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM audit_logs")
                back = cur.fetchone()[0]
        finally:
            conn.close()
        assert back == size["entries"], (back, size["entries"])
        say("")
        say(f"Backup and restore at {size['entries']:,} audit entries "
            f"(database {size['n'] / 2**20:,.0f} MB, PostgreSQL "
            f"{wheel_bin_dir().parent.name.removeprefix('pginstall')}):")
        say(f"  cvsm-server backup FILE   {backup_s:6.1f} s, file {dump.stat().st_size / 2**20:,.0f} MB")
        say(f"  cvsm-server restore FILE  {restore_s:6.1f} s (into an empty database; "
            f"{back:,} entries back)")
        say(f"  on {machine().rsplit(', load', 1)[0]}, load average {os.getloadavg()[0]:.1f} "
            "at the end")
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000,
                        help="entries to fill (default 1,000,000)")
    args = parser.parse_args()
    asyncio.run(run(args.entries))


if __name__ == "__main__":
    main()
