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
- `webhook`: the steps as signed POSTs to the team's endpoint, with the webhooks' signature
  scheme (`Cvsm-Signature`, its own `whsec_` secret) and SSRF rules (`webhooks.resolve_target`,
  pinned addresses): `create`, `set` and `test` (with the value), `finish` (without).

The admin credential of a PostgreSQL target is another secret of the same team whose value is a
`postgresql://` URL (an account allowed to `ALTER ROLE`); it is read at each rotation, audited,
never copied. Its host must resolve to global addresses only, unless private targets are allowed
(`CVSM_WEBHOOK_ALLOW_PRIVATE=1`, as for webhooks), and the connection goes to the address
checked. Nothing here logs or returns a value: error texts have every value involved scrubbed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import psycopg2
import psycopg2.extensions
from psycopg2 import sql

from . import webhook_sender, webhooks
from .errors import BadRequest

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


class TargetError(Exception):
    """A step failed on the target; the message holds no value (see `Step.scrub`)."""


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
    try:
        params = psycopg2.extensions.parse_dsn(url)
    except psycopg2.ProgrammingError:
        raise TargetError("the admin credential is not a postgresql:// URL") from None
    if not url.startswith(("postgresql://", "postgres://")):
        raise TargetError("the admin credential is not a postgresql:// URL")
    host = params.get("host") or ""
    if not host or host.startswith("/") or "," in host:
        if not allow_private:
            raise TargetError("the admin credential's host is not allowed (a local socket)")
        return {**params, "connect_timeout": CONNECT_TIMEOUT}
    port = int(params.get("port") or 5432)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise TargetError("the database host does not resolve") from None
    addresses = []
    for family, _, _, _, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if not allow_private and webhooks.refused_address(ip):
            raise TargetError("the database host's address is not allowed (private network)")
        addresses.append(str(ip))
    if not addresses:
        raise TargetError("the database host does not resolve")
    return {**params, "hostaddr": addresses[0], "connect_timeout": CONNECT_TIMEOUT}


def _connect(params: dict) -> Any:
    try:
        return psycopg2.connect(**params)
    except psycopg2.Error as exc:
        raise TargetError(f"connection failed: {exc}") from None


def _admin_run(step: Step, statements: list[Any]) -> None:
    conn = _connect(_dsn(step.admin or "", step.allow_private))
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement(conn) if callable(statement) else statement)
    except psycopg2.Error as exc:
        raise TargetError(f"PostgreSQL refused: {exc}") from None
    finally:
        conn.close()


def _set_password(user: str, password: str) -> Any:
    def build(conn: Any) -> Any:
        verifier = psycopg2.extensions.encrypt_password(password, user, conn, "scram-sha-256")
        return sql.SQL("ALTER ROLE {} WITH LOGIN PASSWORD {}").format(
            sql.Identifier(user), sql.Literal(verifier))
    return build


def _pg_set(step: Step) -> None:
    user = step.target_user or ""
    statements = [_set_password(user, password_of(step.pending))]
    group = step.settings.get("owner_group")
    if group:
        statements += [sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(u))
                       for u in step.settings["usernames"]]
        statements += [sql.SQL("ALTER ROLE {} SET role = {}").format(sql.Identifier(u),
                                                                     sql.Literal(group))
                       for u in step.settings["usernames"]]
    _admin_run(step, statements)


def _pg_test(step: Step) -> None:
    params = _dsn(step.admin or "", step.allow_private)
    params.update(user=step.target_user, password=password_of(step.pending))
    conn = _connect(params)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT session_user")
            (user,) = cur.fetchone()
        if user != step.target_user:
            raise TargetError("the new value signs in as another role")
    except psycopg2.Error as exc:
        raise TargetError(f"test query failed: {exc}") from None
    finally:
        conn.close()


def _pg_undo(step: Step) -> None:
    if step.kind == "postgres":  # the one role must take the served value back
        _admin_run(step, [_set_password(step.target_user or "", password_of(step.current))])


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
