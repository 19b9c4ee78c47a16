"""Where a rotated secret's next value is applied and tested (`outbound.rotation` runs them).

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

import re
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from ..core.errors import BadRequest
from ..core.i18n import N_, Text
from ..webhooks import service as webhooks

KINDS = ("none", "postgres", "postgres_alternating", "webhook")
VALUE_FORMATS = ("password", "url")
ROLE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}\Z")
CONNECT_TIMEOUT = 10

BAD_KIND = "Jenis target rotasi harus salah satu dari " + ", ".join(KINDS)
BAD_ROLE = "Nama role PostgreSQL tidak valid (huruf, angka, garis bawah; maksimal 63 karakter)"
BAD_USERS = "Kolom 'usernames' harus berisi tepat dua nama role yang berbeda"
BAD_FORMAT = "Kolom 'value_format' harus 'password' atau 'url'"
BAD_ADMIN = "Kolom 'admin_secret_id' harus berupa id secret lain di tim yang sama"
UNKNOWN_SETTING = N_("Pengaturan target tidak dikenal: {name}")
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
            raise BadRequest(Text(UNKNOWN_SETTING, name=str(name)[:64]))
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


# --- webhook ------------------------------------------------------------------------------------


# --- the steps ---------------------------------------------------------------------------------


def check_webhook(url: str, allow_private: bool) -> None:
    """At set-up, the rule each call applies (400): https:// unless private targets are
    allowed."""
    if not allow_private and urlsplit(url).scheme != "https":
        raise BadRequest(WEBHOOK_HTTPS)


