"""PostgreSQL rotation targets: reaching the target database (never the server's own), checking the
roles the admin may manage, setting and testing a password, the owner group of alternating
users."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from typing import Any

import psycopg2
import psycopg2.errorcodes
import psycopg2.extensions
from psycopg2 import sql

from ..webhooks import service as webhooks
from .targets import (CONNECT_TIMEOUT, FINGERPRINT_SQL, Step, TargetError, URL_KEYWORDS,
                      password_of, user_of)


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


def pg_set(step: Step) -> None:
    user = step.target_user or ""
    users, group = _roles(step)
    statements = [_set_password(user, password_of(step.pending))]
    if group:
        statements += _group_statements(group, users)
    _admin_run(step, statements, checked=(users, group))


PROBE_REFUSED = {"42501", "3F000", "25006"}  # no CREATE right, no schema, read-only: no probe


def pg_test(step: Step) -> None:
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


def pg_undo(step: Step) -> None:
    if step.kind == "postgres":  # the one role must take the served value back
        _admin_run(step, [_set_password(step.target_user or "", password_of(step.current))],
                   checked=([step.target_user or ""], None))


async def blocking(fn: Any, step: Step) -> None:
    await asyncio.to_thread(fn, step)


async def prepare(step: Step) -> None:
    """When a policy is saved: a PostgreSQL target is reached and checked (not the server's own
    database, roles the admin may manage) and an owner group set up."""
    if step.kind.startswith("postgres"):
        await blocking(_pg_prepare, step)
