"""The `cvsm-server` command: `serve [--host H] [--port P] [--workers N] [--tls-cert FILE
--tls-key FILE]`, `migrate`, `rotate-key`, `backup FILE`, `restore FILE` and `audit verify
[--team SLUG] [--from-checkpoint] [--progress]`, the operator's `admin grant|revoke EMAIL` and
`team set-plan SLUG PLAN`, and `mail list|show` (the outbox, `outbox.py`). Several workers:
`workers.py`; HTTPS: `tls.py`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
from pathlib import Path

from ..core.actor import Actor
from ..core.config import ConfigError, Settings
from ..core.errors import DomainError
from ..core.inputs import decimal
from ..db.postmaster import EmbeddedStartError
from ..crypto import keys
from ..instance import admin
from .serve import serve_here, serve_workers
from .. import __version__, db
from . import workers


def _migrate(settings: Settings) -> int:
    try:
        applied = asyncio.run(db.migrate_database(settings))
    except (ConfigError, EmbeddedStartError) as exc:
        print(f"cvsm-server: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except db.UNAVAILABLE as exc:
        print(f"cvsm-server: cannot reach the database: {db.first_line(exc)}", file=sys.stderr)
        return 1
    print(f"applied migrations: {', '.join(f'{n:04d}' for n in applied) or 'none (up to date)'}")
    return 0


async def _operator(settings: Settings, args: argparse.Namespace) -> str:
    """Run one operator command against the database (the embedded one is started for it)."""
    system = Actor.system()
    async with db.open(settings, maxsize=2) as database, db.connection(database.pool) as conn:
        if args.command == "admin":
            user_id = await admin.user_by_email(conn, args.email)
            row = await admin.update_user(conn, system, user_id, is_admin=args.action == "grant")
            return f"{row['email']}: admin {'granted' if row['is_admin'] else 'revoked'}"
        quotas = {name: getattr(args, name) for name in ("max_secrets", "max_members")
                  if getattr(args, name) is not None}
        quotas = {k: (None if v == "unlimited" else int(v)) for k, v in quotas.items()}
        team = admin.team_json(await admin.set_plan(conn, system, args.slug, args.plan, **quotas))
        limits = ", ".join(f"{k} {'unlimited' if team[k] is None else team[k]}"
                           for k in ("max_secrets", "max_members", "max_environments"))
        return f"{team['slug']}: plan {team['plan']} ({limits})"


def _run_operator(settings: Settings, args: argparse.Namespace) -> int:
    try:
        print(asyncio.run(_operator(settings, args)))
    except DomainError as exc:
        print(f"cvsm-server: {exc.message}", file=sys.stderr)
        return 1
    except (ConfigError, EmbeddedStartError) as exc:
        print(f"cvsm-server: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except db.UNAVAILABLE as exc:
        print(f"cvsm-server: cannot reach the database: {db.first_line(exc)}", file=sys.stderr)
        return 1
    return 0


def _quota(text: str) -> str:
    number = decimal(text, max_digits=7)
    if text == "unlimited":
        return text
    if number is not None and number <= admin.MAX_QUOTA:
        return str(number)
    raise argparse.ArgumentTypeError(f"expected a number 0..{admin.MAX_QUOTA} or 'unlimited'")


def _operation(settings: Settings, work) -> int:
    """Run an operator command's coroutine `work(settings)`; one line on stderr when it fails."""
    from . import operations

    try:
        return asyncio.run(work(settings))
    except KeyboardInterrupt:
        print("cvsm-server: interrupted", file=sys.stderr)
        return 130
    except keys.KeyMismatch as exc:
        print(f"cvsm-server: refusing to start: {exc}", file=sys.stderr)
        return 3
    except ConfigError as exc:
        print(f"cvsm-server: {exc}", file=sys.stderr)
        return 2
    except (EmbeddedStartError, operations.OperationFailed) as exc:
        print(f"cvsm-server: {exc}", file=sys.stderr)
        return 1
    except db.UNAVAILABLE as exc:
        print(f"cvsm-server: cannot reach the database: {db.first_line(exc)}", file=sys.stderr)
        return 1


def _add_operator_commands(sub) -> None:
    rotate = sub.add_parser(
        "rotate-key", help="re-encrypt every stored value under CVSM_MASTER_KEY (old keys in "
                           "CVSM_OLD_MASTER_KEYS); servers may keep serving")
    rotate.add_argument("--batch-size", type=int, default=500,
                        help="rows per transaction (default 500)")
    backup = sub.add_parser("backup", help="write the database to FILE (pg_dump, custom format)")
    backup.add_argument("file", metavar="FILE", help="where to write the backup")
    restore = sub.add_parser("restore", help="load FILE (from `backup`) into an empty database, "
                                             "then apply migrations")
    restore.add_argument("file", metavar="FILE", help="a file `cvsm-server backup` wrote")
    restore.add_argument("--force", action="store_true",
                         help="drop everything in the database first")
    restore.add_argument("--no-migrate", action="store_true",
                         help="apply no migration after loading: the database stays as the "
                              "backup was, for the version that made it (going back after an "
                              "upgrade, docs/operations.md)")
    audit_cmd = sub.add_parser("audit", help="check the audit log's hash chains")
    audit_sub = audit_cmd.add_subparsers(dest="audit_command", required=True)
    verify = audit_sub.add_parser("verify", help="verify every chain and its signed checkpoints "
                                                 "(exit 1 at the first broken link)")
    verify.add_argument("--team", metavar="SLUG", help="only this team's chain")
    verify.add_argument("--from-checkpoint", action="store_true",
                        help="start each chain at its newest checkpoint signed by this server's "
                             "key instead of its first entry")
    verify.add_argument("--progress", action="store_true",
                        help="print progress on stderr every 100,000 entries")
    verify.add_argument("--file", metavar="F",
                        help="verify an archive `audit archive` wrote, offline (no database)")
    verify.add_argument("--public-key", metavar="HEX",
                        help="with --file: the checkpoint key it must be signed by (Ed25519 "
                             "public key in hex, as `audit verify` prints it)")
    archive = audit_sub.add_parser(
        "archive", help="write one signed JSON-lines file per team and month (verify it with "
                        "`audit verify --file`)")
    archive.add_argument("--month", metavar="YYYY-MM",
                         help="this month (default: every month the next purge would drop)")
    archive.add_argument("--team", metavar="SLUG", help="only this team's chain")
    archive.add_argument("--out", metavar="DIR", default=".",
                         help="the folder to write to (default: the current one)")


def _verify_archive(path: str, public_key: str | None) -> int:
    """`audit verify --file F`: an archive checked offline; 0 intact, 1 broken (with the line)."""
    from ..audit import archive as audit_archive

    try:
        key = bytes.fromhex(public_key) if public_key else None
    except ValueError:
        print("cvsm-server: --public-key must be hex", file=sys.stderr)
        return 2
    verdict = audit_archive.verify_file(Path(path), key)
    if not verdict.ok:
        print(f"cvsm-server: {path}: broken at line {verdict.line}: {verdict.reason}",
              file=sys.stderr)
        return 1
    head = verdict.header or {}
    print(f"{path}: intact, {verdict.entries} entries (seq {head.get('first_seq')} to "
          f"{head.get('last_seq')}) of chain {head.get('chain')}, month {head.get('month')}; "
          f"signed by checkpoint key {verdict.key_id}"
          + ("" if key else " (not compared: pass --public-key)"))
    return 0


def _run_operator_command(args, settings: Settings) -> int | None:
    from . import operations

    if args.command == "rotate-key":
        if args.batch_size < 1:
            print("cvsm-server: --batch-size must be at least 1", file=sys.stderr)
            return 2
        return _operation(settings, lambda s: operations.rotate_key(s, batch_size=args.batch_size))
    if args.command == "backup":
        return _operation(settings, lambda s: operations.backup(s, args.file))
    if args.command == "restore":
        return _operation(settings, lambda s: operations.restore(
            s, args.file, force=args.force, migrate=not args.no_migrate))
    if args.command == "audit" and args.audit_command == "archive":
        return _operation(settings, lambda s: operations.audit_archive(
            s, args.month, args.team, Path(args.out)))
    if args.command == "audit":
        return _operation(settings, lambda s: operations.audit_verify(
            s, args.team, from_checkpoint=args.from_checkpoint, progress=args.progress))
    return None


def _add_mail_commands(sub) -> None:
    mail_cmd = sub.add_parser(
        "mail", help="read the outbox: the mail written to $CVSM_DATA_DIR/outbox/ when "
                     "CVSM_SMTP_URL is unset",
        description="Read the outbox: the mail the server writes to $CVSM_DATA_DIR/outbox/ when "
                    "CVSM_SMTP_URL is unset (docs/server.md, \"Accounts and mail\").")
    mail_sub = mail_cmd.add_subparsers(dest="mail_command", required=True, metavar="{list,show}")
    mail_sub.add_parser("list", help="one line per message, newest last: id, date, to, subject "
                                     "(an empty outbox says so on stderr, exit 0)")
    show = mail_sub.add_parser(
        "show", help="a message's headers and decoded text, every link whole",
        description="Print a message's headers and its text decoded (the files are "
                    "quoted-printable: a link in them is cut over two lines), every link whole. "
                    "Exit 1 when the outbox is empty or has no such message.")
    show.add_argument("id", nargs="?", metavar="ID",
                      help="the message's id from `mail list` (its start is enough when no other "
                           "id starts so); default: the newest")
    show.add_argument("--last", action="store_true", help="the newest message (the default)")
    show.add_argument("--links", action="store_true",
                      help="print only the message's links, one a line")


def _mail(settings: Settings, args: argparse.Namespace) -> int:
    """`cvsm-server mail list|show`: read the outbox (no database is started)."""
    from ..mail import outbox

    directory = settings.outbox_dir
    elsewhere = " (CVSM_SMTP_URL is set: mail goes to that server)" if settings.smtp_url else ""
    try:
        if args.mail_command == "list":
            lines = outbox.listing(directory)
            if not lines:
                print(f"cvsm-server: no mail in {directory}{elsewhere}", file=sys.stderr)
            for line in lines:
                print(line)
            return 0
        if args.id is not None and args.last:
            print("cvsm-server: give an ID or --last, not both", file=sys.stderr)
            return 2
        entry = outbox.find(directory, args.id)
        text = outbox.show(entry, links_only=args.links)
        if args.links and not text:
            raise outbox.OutboxError(f"message {entry.short_id} has no link")
        print(text)
        return 0
    except outbox.OutboxError as exc:
        print(f"cvsm-server: {exc}{elsewhere if 'no mail' in str(exc) else ''}", file=sys.stderr)
        return 1


def _serve_usage(args: argparse.Namespace) -> str | None:
    if not 1 <= args.workers <= workers.MAX_WORKERS:
        return f"--workers must be between 1 and {workers.MAX_WORKERS}, not {args.workers}"
    if args.workers > 1 and not hasattr(socket, "SO_REUSEPORT"):
        return "--workers above 1 needs SO_REUSEPORT, which this system lacks"
    if (args.tls_cert is None) != (args.tls_key is None):
        return "--tls-cert and --tls-key go together: give both or neither"
    return None


# The commands that may make the embedded database: every other one works on one that exists.
CREATES_DATABASE = ("serve", "migrate", "restore")


def _data_dir_problem(settings: Settings, command: str) -> str | None:
    """Why `command` must not run on this data dir, or None.

    As root on a data dir another user owns (the service's), the embedded PostgreSQL would be
    started as another user and leave files the owner cannot open: the service would not start
    again. Any command but `serve`, `migrate` and `restore` on a data dir with no database would
    make an empty one (a backup of nothing, exit 0): the settings are not the server's."""
    data_dir = settings.data_dir
    if os.name == "posix" and os.geteuid() == 0:
        try:
            owner = data_dir.stat().st_uid
        except OSError:
            owner = 0
        if owner != 0:
            name = _user_name(owner)
            return (f"{data_dir} (CVSM_DATA_DIR) belongs to {name}, and this runs as root: the "
                    f"files it made there would stop the server from starting. Run it as {name}: "
                    f"runuser -u {name} -- cvsm-server {command} ... (docs/operations.md)")
    if (command not in CREATES_DATABASE and not settings.database_url
            and not (data_dir / "pg" / "PG_VERSION").is_file()):
        where = "CVSM_DATA_DIR" if os.environ.get("CVSM_DATA_DIR") else "CVSM_DATA_DIR is unset"
        return (f"no database in {data_dir} ({where}), and `{command}` does not make one: run it "
                "with the server's settings (CVSM_DATA_DIR, or CVSM_DATABASE_URL), e.g. as "
                "docs/operations.md says")
    return None


def _user_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"


SERVER_DOC = "docs/server.md"
MAIN_EPILOG = f"""\
Settings come from CVSM_* environment variables; the main ones:
  CVSM_DATA_DIR      data dir: embedded PostgreSQL, generated keys, the mail
                     outbox (default ~/.local/share/cvsm)
  CVSM_DATABASE_URL  an external PostgreSQL (unset: the embedded one); with
                     CVSM_MIGRATION_DATABASE_URL for the schema owner
  CVSM_MASTER_KEY    base64 of 32 bytes, the key of values at rest (unset:
                     generated into the data dir; back it up)
  CVSM_JWT_SECRET    session signing secret (unset: generated)
  CVSM_APP_URL       the public base URL of links (unset: the address served)
  CVSM_SMTP_URL      smtp:// or smtps:// (unset: mail goes to the outbox,
                     read with `cvsm-server mail`)
  CVSM_DEFAULT_PLAN  new teams' plan: starter (default), professional, enterprise
  CVSM_ENV           production turns on production warnings
Every variable: {SERVER_DOC}, "Configuration"; running it for real:
docs/deploy.md and docs/operations.md. COMMAND --help: its options."""
SERVE_EPILOG = f"""\
Unset, the database is an embedded PostgreSQL in $CVSM_DATA_DIR/pg, and keys are
generated there. Variables read at start-up (CVSM_DATA_DIR, CVSM_DATABASE_URL,
CVSM_MASTER_KEY, CVSM_APP_URL, CVSM_SMTP_URL, ...): `cvsm-server --help`, and
every one in {SERVER_DOC}, "Configuration". While no account is admin, each start
prints a one-time link to become the first (README.md, "Your first hour")."""


def build_parser() -> argparse.ArgumentParser:
    """The command line: every command and option, each with its help text."""
    parser = argparse.ArgumentParser(
        prog="cvsm-server", description="cvsm reference server: the HTTP API and dashboard, and "
        "the operator's commands.", epilog=MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"cvsm-server {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser(
        "serve", help="run the HTTP server (migrations run at start-up)",
        description="Run the HTTP server: the API under /api/v1, the dashboard at /.\n"
                    "Pending migrations run at start-up.",
        epilog=SERVE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--host", default="127.0.0.1", metavar="H",
                       help="address to listen on (default 127.0.0.1, this machine only; 0.0.0.0 "
                            "or :: for every interface)")
    serve.add_argument("--port", type=int, default=8080, metavar="P",
                       help="TCP port (default 8080; 0 picks a free one, printed at start-up)")
    serve.add_argument("--workers", type=int, default=1, metavar="N",
                       help="worker processes serving on the one port (1 to 64; default 1)")
    serve.add_argument("--tls-cert", type=Path, metavar="FILE",
                       help="serve HTTPS with this PEM certificate (chain), with --tls-key")
    serve.add_argument("--tls-key", type=Path, metavar="FILE", help="the certificate's PEM private key")
    sub.add_parser("migrate", help="apply database migrations and exit",
                   description="Apply pending database migrations (as CVSM_MIGRATION_DATABASE_URL, "
                               "else CVSM_DATABASE_URL, else the embedded PostgreSQL) and exit.")
    admin_cmd = sub.add_parser("admin", help="grant or revoke a user's admin right",
                               description="Grant or revoke a user's admin right (audited); works "
                                           "with no admin at all.")
    admin_cmd.add_argument("action", choices=("grant", "revoke"), help="grant or revoke")
    admin_cmd.add_argument("email", help="the user's email address")
    team_cmd = sub.add_parser("team", help="change a team's plan")
    team_sub = team_cmd.add_subparsers(dest="team_command", required=True)
    set_plan = team_sub.add_parser(
        "set-plan", help="put a team on a plan (quotas: the plan's own unless given)",
        description="Put a team on a plan, with the plan's quotas (docs/server.md, \"Administration\": "
                    f"{admin.plan_defaults_text('unlimited')}) unless given; audited.")
    set_plan.add_argument("slug", help="the team's slug")
    set_plan.add_argument("plan", choices=tuple(admin.PLAN_FORM_DEFAULTS), help="the plan")
    set_plan.add_argument("--max-secrets", type=_quota, metavar="N|unlimited",
                          help="the team's secrets quota instead of the plan's")
    set_plan.add_argument("--max-members", type=_quota, metavar="N|unlimited",
                          help="the team's members quota (pending invitations count) instead of "
                               "the plan's")
    _add_operator_commands(sub)
    _add_mail_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve" and (problem := _serve_usage(args)):
        print(f"cvsm-server: {problem}", file=sys.stderr)
        return 2
    several = args.command == "serve" and args.workers > 1
    logging.basicConfig(level=logging.INFO, format=(
        workers.LOG_FORMAT if several else "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    if args.command == "audit" and getattr(args, "file", None):
        return _verify_archive(args.file, args.public_key)
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"cvsm-server: {exc}", file=sys.stderr)
        return 2
    if args.command != "mail" and (problem := _data_dir_problem(settings, args.command)):
        print(f"cvsm-server: {problem}", file=sys.stderr)
        return 2
    if args.command == "serve":
        tls_files = (args.tls_cert, args.tls_key) if args.tls_cert else None
        if several:
            return serve_workers(settings, args.host, args.port, args.workers, tls_files)
        return serve_here(settings, args.host, args.port, tls_files)
    if args.command == "mail":
        return _mail(settings, args)
    if args.command in ("admin", "team"):
        return _run_operator(settings, args)
    if (code := _run_operator_command(args, settings)) is not None:
        return code
    return _migrate(settings)


if __name__ == "__main__":
    sys.exit(main())
