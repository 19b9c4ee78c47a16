"""Where a rotated secret's next value is applied and tested (`secret_rotation.py` runs them).

A target has a kind and settings that hold nothing secret; they are checked once when a policy
is set (`check`), and each rotation step calls the kind's `set`, `test`, `finish` and, after a
failure, `undo`:

- `none`: the value lives only in cvsm (a key two programs both read from it); nothing to set.
- `postgres` (single user): `ALTER ROLE <username> PASSWORD ...` through the admin credential,
  then a new connection as that role with the new value. The password is sent as a SCRAM
  verifier computed here (`psycopg2.extensions.encrypt_password`), so the plain value never
  reaches the database's statement log. A failure after the role's password changed puts the
  current value back (`undo`). The secret's value is the password, or (`value_format: "url"`) a
  `postgresql://` URL with the user and password.
- `postgres_alternating`: two roles take turns; each rotation sets the password of the one that
  is not current, so connections and pools opened with the current value keep working until the
  next rotation. The value is always a `postgresql://` URL (the user changes). With
  `owner_group`, both roles are made members of that group and `ALTER ROLE ... SET role` makes
  their sessions act as it, so a table created while one role was current is owned by the
  group and stays usable by the other.
  The group is made and checked when the policy is saved (`prepare`): it exists (created
  NOLOGIN when missing), both roles are members acting as it, each role's default privileges
  grant the group everything on the tables, sequences and functions it makes (a session opened
  before the switch still makes objects the other role can use) and the group is granted every
  table and sequence either role already owns. Each `test` step proves it: a table made with
  the served value (the other role) is read, written and dropped with the new value.
- `webhook`: the steps as signed POSTs to the team's endpoint, with the webhooks' signature
  scheme (`Cvsm-Signature`, its own `whsec_` secret) and SSRF rules (`webhooks.resolve_target`,
  pinned addresses): `create`, `set` and `test` (with the value), `finish` (without). Its URL is
  checked when the policy is saved as when a team webhook is created (`check_webhook`).

The admin credential of a PostgreSQL target is another secret of the same team whose value is a
`postgresql://` URL (an account allowed to `ALTER ROLE`); it is read at each rotation, audited,
never copied. Its host must resolve to global addresses only, unless private targets are allowed
(`CVSM_WEBHOOK_ALLOW_PRIVATE=1`, as for webhooks), and the connection goes to the address
checked; only the URL's host, port, database, user, password, `sslmode` and `application_name`
are used (no file of the server's, such as a password file or a service file, is ever read).

Whatever the private-network setting, a target never reaches the server's own database: every
connection first compares the cluster it reached with the server's own (`fingerprint`: its
postmaster's start time and port) and stops there if they are the same. And a rotation only
manages roles that are the admin's to manage (`_check_roles`): never a superuser, the admin's
own role or a predefined `pg_*` role, and an `owner_group` only when it is a NOLOGIN group whose
every membership is free of superuser, CREATEROLE, REPLICATION and BYPASSRLS powers and of
predefined roles (so the GRANT gives the two roles nothing but the group).

Nothing here logs or returns a value, a host, a socket path or a user name: error texts are short
reasons a team member can act on (`reason`), and every value involved is scrubbed from them.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import re
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import psycopg2
import psycopg2.errorcodes
import psycopg2.extensions
from psycopg2 import sql

from ..webhooks import sender as webhook_sender, service as webhooks
from ..core.errors import BadRequest

KINDS = ("none", "postgres", "postgres_alternating", "webhook")
VALUE_FORMATS = ("password", "url")
ROLE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}\Z")
CONNECT_TIMEOUT = 10

BAD_KIND = "Jenis target rotasi harus salah satu dari " + ", ".join(KINDS)
BAD_ROLE = "Nama role PostgreSQL tidak valid (huruf, angka, garis bawah; maksimal 63 karakter)"
BAD_USERS = "Kolom 'usernames' harus berisi tepat dua nama role yang berbeda"
BAD_FORMAT = "Kolom 'value_format' harus 'password' atau 'url'"
BAD_ADMIN = "Kolom 'admin_secret_id' harus berupa id secret lain di tim yang sama"
UNKNOWN_SETTING = "Pengaturan target tidak dikenal: {name}"
WEBHOOK_HTTPS = ("URL webhook rotasi harus https:// (nilai baru dikirim di dalamnya); http:// "
                 "hanya bila target privat diizinkan")


# The connection keywords an admin URL may set; anything else (passfile, service, sslkey,
# options, hostaddr ...) could make the server read its own files or go elsewhere.
URL_KEYWORDS = {"host", "port", "dbname", "user", "password", "sslmode", "application_name"}
FINGERPRINT_SQL = "SELECT pg_postmaster_start_time()::text || '/' || current_setting('port')"


class TargetError(Exception):
    """A step failed on the target; the message holds no value, host, socket path or user
    name (see `reason` and `Step.scrub`)."""


@dataclass
class Step:
    """What a step needs: the values (never in a repr) and the target's settings."""

    kind: str
    settings: dict
    rotation_id: uuid.UUID
    secret: dict  # id, name, environment
    pending: str  # the value being rotated in (as the secret will hold it)
    current: str  # the value served now
    target_user: str | None = None
    admin: str | None = field(default=None, repr=False)  # the admin credential's value
    signing_secret: str | None = field(default=None, repr=False)
    allow_private: bool = False
    # `fingerprint` of the server's own database: a target that is the same cluster is refused.
    server_fingerprint: str | None = None

    def __repr__(self) -> str:
        return f"Step(kind={self.kind!r}, rotation_id={self.rotation_id!r})"

    def scrub(self, text: str) -> str:
        """`text` without any value this step knows (for an error kept or logged)."""
        for value in (self.pending, self.current, self.admin, self.signing_secret,
                      password_of(self.pending), password_of(self.current),
                      password_of(self.admin or "")):
            if value and len(value) >= 4:
                text = text.replace(value, "***")
        return " ".join(text.split())[:500]


# --- settings ----------------------------------------------------------------------------------

def _role(value: Any) -> str:
    if not isinstance(value, str) or not ROLE_RE.match(value):
        raise BadRequest(BAD_ROLE)
    return value


def _admin_id(value: Any) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise BadRequest(BAD_ADMIN) from None


def check(kind: Any, settings: Any) -> dict:
    """The target's settings, checked and normalised; 400 for anything else."""
    if kind not in KINDS:
        raise BadRequest(BAD_KIND)
    if not isinstance(settings, dict):
        raise BadRequest("Kolom 'target' harus berupa objek")
    allowed = {"none": set(), "postgres": {"admin_secret_id", "username", "value_format"},
               "postgres_alternating": {"admin_secret_id", "usernames", "owner_group"},
               "webhook": {"url"}}[kind]
    for name in settings:
        if name not in allowed and name != "kind":
            raise BadRequest(UNKNOWN_SETTING.format(name=str(name)[:64]))
    if kind == "postgres":
        fmt = settings.get("value_format", "password")
        if fmt not in VALUE_FORMATS:
            raise BadRequest(BAD_FORMAT)
        return {"admin_secret_id": _admin_id(settings.get("admin_secret_id")),
                "username": _role(settings.get("username")), "value_format": fmt}
    if kind == "postgres_alternating":
        users = settings.get("usernames")
        if not isinstance(users, list) or len(users) != 2:
            raise BadRequest(BAD_USERS)
        users = [_role(u) for u in users]
        if users[0] == users[1]:
            raise BadRequest(BAD_USERS)
        out = {"admin_secret_id": _admin_id(settings.get("admin_secret_id")), "usernames": users}
        if settings.get("owner_group") is not None:
            out["owner_group"] = _role(settings["owner_group"])
            if out["owner_group"] in users:
                raise BadRequest(BAD_ROLE)
        return out
    if kind == "webhook":
        url = settings.get("url")
        webhooks.parse_url(url)
        return {"url": url}
    return {}


def admin_secret_id(kind: str, settings: dict) -> uuid.UUID | None:
    value = settings.get("admin_secret_id")
    return uuid.UUID(value) if value else None


# --- values ------------------------------------------------------------------------------------

def password_of(value: str) -> str:
    """The password in a `postgresql://` URL value, or the value itself."""
    if value.startswith(("postgresql://", "postgres://")):
        try:
            return unquote(urlsplit(value).password or "")
        except ValueError:
            return ""
    return value


def user_of(value: str) -> str | None:
    if value.startswith(("postgresql://", "postgres://")):
        try:
            return unquote(urlsplit(value).username or "") or None
        except ValueError:
            return None
    return None


def url_for(admin_url: str, user: str, password: str) -> str:
    """The admin URL's host, port, database and options with another user and password."""
    parts = urlsplit(admin_url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    query = f"?{parts.query}" if parts.query else ""
    return f"postgresql://{netloc}{parts.path or '/'}{query}"


def next_user(kind: str, settings: dict, current: str) -> str | None:
    """The role a rotation sets: the configured one, or the one of two that is not current."""
    if kind == "postgres":
        return settings["username"]
    if kind == "postgres_alternating":
        first, second = settings["usernames"]
        return second if user_of(current) == first else first
    return None


def stored_value(kind: str, settings: dict, password: str, user: str | None,
                 admin: str | None) -> str:
    """What the secret holds after the rotation, for a generated `password`."""
    if kind == "postgres_alternating" or (kind == "postgres"
                                          and settings.get("value_format") == "url"):
        return url_for(admin or "", user or "", password)
    return password


# --- PostgreSQL ---------------------------------------------------------------------------------

def _dsn(url: str, allow_private: bool) -> dict:
    """Connection keywords for a `postgresql://` URL, pinned to an address that was checked."""
    if not url.startswith(("postgresql://", "postgres://")):
        raise TargetError("the admin credential is not a postgresql:// URL")
    try:
        params = psycopg2.extensions.parse_dsn(url)
    except (psycopg2.Error, ValueError):
        raise TargetError("the admin credential is not a valid postgresql:// URL") from None
    unknown = sorted(set(params) - URL_KEYWORDS)
    if unknown:
        raise TargetError("the admin credential's URL sets a parameter that is not allowed: "
                          + ", ".join(k[:32] for k in unknown[:3]))
    # No password file, service file or environment default of the server's is ever used.
    params.update(passfile=os.devnull, connect_timeout=CONNECT_TIMEOUT)
    try:
        port = int(params.get("port") or 5432)
    except ValueError:
        raise TargetError("the admin credential's port is not a number") from None
    if not 0 < port < 65536:
        raise TargetError("the admin credential's port is not a number")
    host = params.get("host") or ""
    if not host or host.startswith("/") or "," in host:
        if not allow_private:
            raise TargetError("the admin credential's host is not allowed (a local socket)")
        if "," in host or "," in str(params.get("port") or ""):
            raise TargetError("the admin credential names several hosts")
        return params
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        raise TargetError("the database host does not resolve") from None
    addresses = []
    for family, _, _, _, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        try:
            ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        except ValueError:
            continue
        if not allow_private and webhooks.refused_address(ip):
            raise TargetError("the database host's address is not allowed (private network)")
        addresses.append(str(ip))
    if not addresses:
        raise TargetError("the database host does not resolve")
    return {**params, "port": str(port), "hostaddr": addresses[0]}


# What a team member is told about a PostgreSQL error: its condition name, or for a connection
# that failed, the kind of failure. libpq's own texts name hosts, addresses, socket paths and
# users, so they never reach an error shown in the dashboard or the API.
_CONNECT_REASONS = (
    ("password authentication failed", "password authentication failed"),
    ("no password supplied", "a password is required"),
    ("timeout expired", "timed out"),
    ("connection refused", "connection refused"),
    ("too many connections", "too many connections"),
    ("does not exist", "the role or database does not exist"),
    ("not permitted to log in", "the role may not log in"),
    ("pg_hba.conf", "the server's pg_hba.conf refuses this connection"),
    ("ssl", "SSL negotiation failed"),
    ("could not translate host name", "the database host does not resolve"),
)


def reason(exc: BaseException) -> str:
    """A short, safe reason for a PostgreSQL error."""
    code = getattr(exc, "pgcode", None)
    if code:
        name = psycopg2.errorcodes.lookup(code) or "error"
        return f"{name.lower()} (SQLSTATE {code})"
    text = str(exc).lower()
    for needle, said in _CONNECT_REASONS:
        if needle in text:
            return said
    return "the database could not be reached"


def _connect(params: dict, step: Step) -> Any:
    try:
        conn = psycopg2.connect(**params)
    except psycopg2.Error as exc:
        raise TargetError(f"connection failed: {reason(exc)}") from None
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(FINGERPRINT_SQL)
            (print_,) = cur.fetchone()
    except psycopg2.Error as exc:
        conn.close()
        raise TargetError(f"connection failed: {reason(exc)}") from None
    if step.server_fingerprint is None or print_ == step.server_fingerprint:
        conn.close()  # never a statement on the server's own cluster (nor unchecked)
        raise TargetError("the target is this server's own database, which rotation never "
                          "touches")
    return conn


def _admin_run(step: Step, statements: list[Any], *, checked: tuple[list[str], str | None]
               ) -> None:
    """Run `statements` as the admin credential, after `_check_roles` on `checked` (the roles
    whose password changes and the owner group)."""
    conn = _connect(_dsn(step.admin or "", step.allow_private), step)
    try:
        with conn.cursor() as cur:
            _check_roles(cur, *checked)
            for statement in statements:
                cur.execute(statement(conn) if callable(statement) else statement)
    except psycopg2.Error as exc:
        raise TargetError(f"PostgreSQL refused: {reason(exc)}") from None
    finally:
        conn.close()


_POWERS = ("rolsuper", "rolcreaterole", "rolreplication", "rolbypassrls")
_CLOSURE_SQL = """
WITH RECURSIVE up(oid) AS (
    SELECT oid FROM pg_roles WHERE rolname = %s
    UNION SELECT m.roleid FROM pg_auth_members m JOIN up ON m.member = up.oid
)
SELECT r.rolname, r.rolsuper, r.rolcreaterole, r.rolreplication, r.rolbypassrls, r.rolcanlogin,
       r.rolname = session_user AS is_admin
FROM pg_roles r JOIN up ON r.oid = up.oid
"""


def _check_roles(cur: Any, users: list[str], group: str | None) -> None:
    """Refuse roles the admin credential may not hand to a rotation (see the module's text)."""
    for user in users:
        cur.execute("SELECT rolsuper, rolname = session_user FROM pg_roles WHERE rolname = %s",
                    (user,))
        row = cur.fetchone()
        if row is None:
            raise TargetError("a role to rotate does not exist")
        if row[0] or row[1] or user.startswith("pg_"):
            raise TargetError("a role to rotate is a superuser, the admin's own role or a "
                              "predefined role")
    if group is None:
        return
    cur.execute(_CLOSURE_SQL, (group,))
    rows = cur.fetchall()
    if not rows:
        return  # made by `prepare`
    if any(row[5] for row in rows if row[0] == group):
        raise TargetError("the owner group is a role that can log in, not a group")
    for name, *powers, _login, is_admin in rows:
        if any(powers) or is_admin or name.startswith("pg_") or name in users:
            raise TargetError("the owner group has (or is a member of a role with) powers "
                              "beyond a group's: superuser, CREATEROLE, REPLICATION, BYPASSRLS, "
                              "a predefined role or the admin's own role")


def _set_password(user: str, password: str) -> Any:
    def build(conn: Any) -> Any:
        verifier = psycopg2.extensions.encrypt_password(password, user, conn, "scram-sha-256")
        return sql.SQL("ALTER ROLE {} WITH LOGIN PASSWORD {}").format(
            sql.Identifier(user), sql.Literal(verifier))
    return build


def _roles(step: Step) -> tuple[list[str], str | None]:
    if step.kind == "postgres_alternating":
        return list(step.settings["usernames"]), step.settings.get("owner_group")
    return [step.target_user or step.settings.get("username") or ""], None


def _group_statements(group: str, users: list[str]) -> list[Any]:
    """The owner group's set-up, each statement idempotent: the group (NOLOGIN, made when
    missing), both roles in it acting as it, default privileges so what either role makes in a
    session that does not act as the group is the group's to use too, and the group granted
    what either role owns already."""
    g = sql.Identifier(group)
    out: list[Any] = [sql.SQL("""DO $cvsm$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = {}) THEN
            CREATE ROLE {} NOLOGIN;
        END IF; END $cvsm$""").format(sql.Literal(group), g)]
    for user in users:
        u = sql.Identifier(user)
        out += [sql.SQL("GRANT {} TO {}").format(g, u),
                sql.SQL("ALTER ROLE {} SET role = {}").format(u, sql.Literal(group))]
        for kind in ("TABLES", "SEQUENCES", "FUNCTIONS", "TYPES"):
            out.append(sql.SQL("ALTER DEFAULT PRIVILEGES FOR ROLE {} GRANT ALL ON {} TO {}")
                       .format(u, sql.SQL(kind), g))
        out.append(_grant_owned(user, group))
    return out


def _grant_owned(user: str, group: str) -> Any:
    def build(conn: Any) -> Any:
        with conn.cursor() as cur:
            cur.execute("""SELECT c.relkind = 'S', quote_ident(n.nspname) || '.' ||
                                  quote_ident(c.relname)
                           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                           WHERE c.relowner = (SELECT oid FROM pg_roles WHERE rolname = %s)
                             AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
                             AND n.nspname NOT IN ('pg_catalog', 'information_schema')
                             AND n.nspname NOT LIKE 'pg_temp%%'
                             AND n.nspname NOT LIKE 'pg_toast%%'
                           ORDER BY 2""", (user,))
            owned = cur.fetchall()
        if not owned:
            return sql.SQL("SELECT 1")
        parts = [sql.SQL("GRANT ALL ON {} {} TO {}").format(
            sql.SQL("SEQUENCE" if seq else "TABLE"), sql.SQL(name), sql.Identifier(group))
            for seq, name in owned]
        return sql.SQL("; ").join(parts)
    return build


def _pg_prepare(step: Step) -> None:
    users, group = _roles(step)
    _admin_run(step, _group_statements(group, users) if group else [], checked=(users, group))


def _pg_set(step: Step) -> None:
    user = step.target_user or ""
    users, group = _roles(step)
    statements = [_set_password(user, password_of(step.pending))]
    if group:
        statements += _group_statements(group, users)
    _admin_run(step, statements, checked=(users, group))


PROBE_REFUSED = {"42501", "3F000", "25006"}  # no CREATE right, no schema, read-only: no probe


def _pg_test(step: Step) -> None:
    params = _dsn(step.admin or "", step.allow_private)
    params.update(user=step.target_user, password=password_of(step.pending))
    conn = _connect(params, step)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT session_user")
            (user,) = cur.fetchone()
        if user != step.target_user:
            raise TargetError("the new value signs in as another role")
        if step.settings.get("owner_group"):
            _probe_group(step, conn)
    except psycopg2.Error as exc:
        raise TargetError(f"test query failed: {reason(exc)}") from None
    finally:
        conn.close()


def _probe_group(step: Step, new: Any) -> None:
    """The owner group works: a table made with the served value (the other role, in a session
    that does not act as the group, as one opened before the set-up) is read, written and
    dropped with the new value. A role that may make no table in its schema skips the probe."""
    old_params = _dsn(step.admin or "", step.allow_private)
    old_user = user_of(step.current)
    if not old_user or old_user == step.target_user:
        return
    old_params.update(user=old_user, password=password_of(step.current),
                      options="-c role=none")
    try:
        old = _connect(old_params, step)
    except TargetError:
        return  # the served value no longer signs in: nothing of it to share
    table = sql.Identifier(f"cvsm_rotation_probe_{step.rotation_id.hex[:16]}")
    try:
        with old.cursor() as cur:
            try:
                cur.execute(sql.SQL("CREATE TABLE {} (id int)").format(table))
            except psycopg2.Error as exc:
                if exc.pgcode in PROBE_REFUSED:
                    return
                raise
        try:
            with new.cursor() as cur:
                cur.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(table))
                cur.execute(sql.SQL("SELECT count(*) FROM {}").format(table))
        except psycopg2.Error as exc:
            raise TargetError("a table made by the other role is not usable with the new value "
                              f"(owner group set-up: {reason(exc)})") from None
    finally:
        try:
            with old.cursor() as cur:
                cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
        except psycopg2.Error:
            pass
        old.close()


def _pg_undo(step: Step) -> None:
    if step.kind == "postgres":  # the one role must take the served value back
        _admin_run(step, [_set_password(step.target_user or "", password_of(step.current))],
                   checked=([step.target_user or ""], None))


# --- webhook ------------------------------------------------------------------------------------

async def _call(step: Step, name: str, *, with_value: bool) -> None:
    # The set step carries the new value: over plain HTTP it would cross the network readable
    # (signed, not encrypted). Only where private targets are allowed (closed networks, tests)
    # may a rotation webhook be http://.
    if not step.allow_private and urlsplit(step.settings["url"]).scheme != "https":
        raise TargetError(f"{name} call refused: a rotation webhook must be https://")
    body: dict[str, Any] = {"step": name, "rotation_id": str(step.rotation_id),
                            "secret": step.secret}
    if with_value:
        body["value"] = step.pending
    raw = json.dumps(body, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", "User-Agent": webhook_sender.USER_AGENT,
               "Cvsm-Rotation-Step": name,
               "Cvsm-Signature": webhooks.signature(step.signing_secret or "", int(time.time()),
                                                    raw)}
    outcome = await webhook_sender.post(step.settings["url"], raw, headers,
                                        allow_private=step.allow_private)
    if not outcome.ok:
        raise TargetError(f"{name} call failed: {outcome.error}")


# --- the steps ---------------------------------------------------------------------------------

async def _blocking(fn: Any, step: Step) -> None:
    await asyncio.to_thread(fn, step)


def check_webhook(url: str, allow_private: bool) -> None:
    """At set-up, the rule each call applies (400): https:// unless private targets are
    allowed."""
    if not allow_private and urlsplit(url).scheme != "https":
        raise BadRequest(WEBHOOK_HTTPS)


async def prepare(step: Step) -> None:
    """When a policy is saved: a PostgreSQL target is reached and checked (not the server's own
    database, roles the admin may manage) and an owner group set up."""
    if step.kind.startswith("postgres"):
        await _blocking(_pg_prepare, step)


async def create(step: Step) -> None:
    if step.kind == "webhook":
        await _call(step, "create", with_value=False)


async def set_value(step: Step) -> None:
    if step.kind == "webhook":
        await _call(step, "set", with_value=True)
    elif step.kind.startswith("postgres"):
        await _blocking(_pg_set, step)


async def test_value(step: Step) -> None:
    if step.kind == "webhook":
        await _call(step, "test", with_value=True)
    elif step.kind.startswith("postgres"):
        await _blocking(_pg_test, step)


async def finish(step: Step) -> None:
    if step.kind == "webhook":
        await _call(step, "finish", with_value=False)


async def undo(step: Step) -> None:
    if step.kind.startswith("postgres"):
        await _blocking(_pg_undo, step)
