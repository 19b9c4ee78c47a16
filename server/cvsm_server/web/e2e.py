"""End-to-end team routes (docs/e2e.md): a member's key pair, the caller's wrap of a team key
and the team's back-links, the members' public keys, grants, the re-key and a member's anchor.
Parse, call `e2e`, shape the answer."""

from __future__ import annotations

from aiohttp import web

from ..e2e import service as e2e
from ..e2e import syntax as e2e_syntax
from ..core.errors import BadRequest
from ..core.inputs import field, parse_uuid
from .schema import (BOOL, E2E_ANCHOR, E2E_AUTH, E2E_ENVELOPE, E2E_LINK, E2E_PASS,
                     E2E_PUBLIC_KEY, E2E_REC, E2E_WRAP, INT, ROLE, STRING, TIME, UUID, answer,
                     nullable, obj, query)
from ..core.timeutil import iso
from .policy import BULK
from .request import actor, connection, query_int, read_json, team_of

# A re-key carries one envelope per live secret (its route's cap in `web.routes`, `BULK`: 40 MiB,
# about 460 of the largest values or many thousands of ordinary ones; docs/e2e.md). The
# dashboard's re-key form (`pages.members`) is bounded by it too.
MAX_REKEY_BODY = BULK


async def get_user_key(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        row = await e2e.get_user_key(conn, actor(request))
    return web.json_response({"e2e_key": e2e.user_key_json(row)})


async def set_user_key(request: web.Request) -> web.Response:
    body = await read_json(request)
    async with connection(request) as conn:
        row, created = await e2e.set_user_key(
            conn, actor(request), public_key=field(body, "public_key", str),
            wrapped_private_key=field(body, "wrapped_private_key", str),
            recovery_wrapped_private_key=field(body, "recovery_wrapped_private_key", str),
            replace=field(body, "replace", bool, required=False, default=False))
    return web.json_response({"e2e_key": e2e.user_key_json(row)}, status=201 if created else 200)


async def get_team_key(request: web.Request) -> web.Response:
    key_version = query_int(request, "key_version", default=None, minimum=1,
                            maximum=e2e_syntax.MAX_NUMBER)
    since = query_int(request, "since", default=None, minimum=0, maximum=e2e_syntax.MAX_NUMBER)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        key = await e2e.read_wrap(conn, actor(request), team_id, key_version, since)
    return web.json_response({"team_id": str(team_id), "key_version": key.key_version,
                              "wrapped_key": key.wrapped_key, "auth": key.auth,
                              "links": [{"key_version": v, "link": link}
                                        for v, link in sorted(key.links.items())]})


async def list_e2e_members(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        version, members, tokens = await e2e.recipients(conn, actor(request), team_id)
    return web.json_response({"team_id": str(team_id), "key_version": version,
                              "members": [e2e.member_key_json(r) for r in members],
                              "tokens": [e2e.token_key_json(r) for r in tokens]})


async def grant_e2e_access(request: web.Request) -> web.Response:
    body = await read_json(request)
    user_id = parse_uuid(field(body, "user_id", str))
    if user_id is None:
        raise BadRequest("Kolom 'user_id' harus UUID")
    wrapped = field(body, "wrapped_key", str)
    public_key = field(body, "public_key", str)
    key_version = field(body, "key_version", int, required=False)
    auth = field(body, "auth", str, required=False)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        version = await e2e.grant(conn, actor(request), team_id, user_id, wrapped, public_key,
                                  key_version, auth)
    return web.json_response({"user_id": str(user_id), "key_version": version})


async def rekey_team(request: web.Request) -> web.Response:
    body = await read_json(request)
    key_version = field(body, "key_version", int)
    wraps = field(body, "wraps", list)
    values = field(body, "secrets", list)
    link = field(body, "link", str, required=False)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        summary = await e2e.rekey(conn, actor(request), team_id, key_version=key_version,
                                  wraps=wraps, values=values, link=link)
    return web.json_response(summary)


def _anchor_json(row: dict) -> dict:
    return {"anchor": row["anchor"], "updated_at": iso(row["updated_at"])}


async def get_anchor(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row = await e2e.read_anchor(conn, actor(request), team_id)
    return web.json_response(_anchor_json(row))


async def put_anchor(request: web.Request) -> web.Response:
    body = await read_json(request)
    anchor = field(body, "anchor", str)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row, created = await e2e.store_anchor(conn, actor(request), team_id, anchor)
    return web.json_response(_anchor_json(row), status=201 if created else 200)


# --- OpenAPI: the operations above (`web.schema`), for `web.apidoc` ------------------------------

_USER_KEY = answer({"e2e_key": answer({
    "public_key": E2E_PUBLIC_KEY, "fingerprint": STRING,
    "wrapped_private_key": STRING, "recovery_wrapped_private_key": STRING,
    "created_at": TIME, "updated_at": TIME})})
_NOT_E2E = "400 for a team that is not end-to-end."
_ANCHOR = answer({"anchor": E2E_ANCHOR, "updated_at": TIME})

OPENAPI = {
    "get_user_key": {
        "summary": "The caller's end-to-end key pair as stored: the public key and the private "
                   "key wrapped by passphrase and by recovery key (session JWT only).",
        "tags": ["e2e"],
        "responses": {200: _USER_KEY},
        "errors": [404],
    },
    "set_user_key": {
        "summary": "Set up (201) or re-wrap (200) the caller's end-to-end key pair (session JWT "
                   "only).",
        "description": "The same public key again stores new wraps of its private key (a new "
                       "passphrase). Another public key needs `replace: true` (409 otherwise) "
                       "and deletes every team key wrapped for the old one: the caller waits "
                       "for a new grant in each end-to-end team.",
        "tags": ["e2e"],
        "body": obj({"public_key": E2E_PUBLIC_KEY,
                     "wrapped_private_key": E2E_PASS,
                     "recovery_wrapped_private_key": E2E_REC,
                     "replace": {"type": "boolean", "default": False}},
                    ("public_key", "wrapped_private_key", "recovery_wrapped_private_key")),
        "responses": {200: _USER_KEY, 201: _USER_KEY},
        "errors": [409],
    },
    "get_team_key": {
        "summary": "The caller's wrap of the team key: a member's own, or an API token's own.",
        "description": _NOT_E2E + " 403 when the caller holds no wrap of that key version.",
        "tags": ["e2e"],
        "query": [query("key_version", {"type": "integer", "minimum": 1,
                                        "maximum": e2e_syntax.MAX_NUMBER},
                        "An earlier key version (old versions of secrets stay under it); "
                        "the current one by default."),
                  query("since", {"type": "integer", "minimum": 0, "maximum": e2e_syntax.MAX_NUMBER},
                        "Only the links of key versions above this one (all by default).")],
        "responses": {200: answer({
            "team_id": UUID, "key_version": INT, "wrapped_key": E2E_WRAP,
            "auth": nullable({**E2E_AUTH, "description": "The wrap's recipient authentication "
                              "(format 2); null for a wrap of the first format."}),
            "links": {"type": "array", "description": "The team's back-links (format 2) in "
                      "ascending key version: the client walks them from the current key down "
                      "to its pin or anchor.",
                      "items": answer({"key_version": INT, "link": E2E_LINK})}})},
    },
    "list_e2e_members": {
        "summary": "The members' public keys and fingerprints, whether each holds the current "
                   "key and, for an Admin or above, the team's live tokens with a public key.",
        "description": _NOT_E2E + " These are the recipients of a grant and of a re-key.",
        "tags": ["e2e"],
        "responses": {200: answer({
            "team_id": UUID, "key_version": INT,
            "members": {"type": "array", "items": answer({
                "user_id": UUID, "username": STRING, "name": STRING, "role": ROLE,
                "public_key": nullable(E2E_PUBLIC_KEY), "fingerprint": nullable(STRING),
                "has_access": BOOL, "auth": nullable(E2E_AUTH)})},
            "tokens": {"type": "array", "items": answer({
                "token_id": UUID, "name": STRING, "token_prefix": STRING, "user_id": UUID,
                "public_key": E2E_PUBLIC_KEY, "fingerprint": STRING, "has_access": BOOL,
                "auth": nullable(E2E_AUTH)})},
        })},
    },
    "grant_e2e_access": {
        "summary": "Give a member the team key wrapped to their public key (Admin, holding "
                   "that key version).",
        "description": _NOT_E2E + " 409 when the member has no key pair yet, or when "
                       "`public_key` (the key the wrap was made for) is no longer the member's "
                       "current one (they replaced it: reload and compare the fingerprint).",
        "tags": ["e2e"],
        "body": obj({"user_id": UUID, "wrapped_key": E2E_WRAP, "public_key": E2E_PUBLIC_KEY,
                     "key_version": {"type": "integer", "minimum": 1,
                                     "maximum": e2e_syntax.MAX_NUMBER,
                                     "description": "The current one by default."},
                     "auth": E2E_AUTH},
                    ("user_id", "wrapped_key", "public_key")),
        "responses": {200: answer({"user_id": UUID, "key_version": INT})},
        "errors": [409],
    },
    "rekey_team": {
        "summary": "Move the team to a new key (Admin, holding the current one), in one "
                   "transaction.",
        "description": _NOT_E2E + " `key_version` is the current one plus 1; `wraps` holds the "
                       "new key for every member who holds the current key and every live "
                       "token of the team with a public key (`GET .../e2e/members`); `secrets` "
                       "one envelope per live secret, sealed for its next version under the new "
                       "key, which becomes its current value. A member's wrap names the "
                       "`public_key` it was made for. 409 when either set differs from the "
                       "team's (it changed meanwhile), a member's `public_key` is no longer "
                       "their current one, or an envelope is stale.",
        "tags": ["e2e"],
        "body": obj({
            "key_version": {"type": "integer", "minimum": 2, "maximum": e2e_syntax.MAX_NUMBER},
            "wraps": {"type": "array", "items": obj(
                {"user_id": UUID, "token_id": UUID, "wrapped_key": E2E_WRAP,
                 "public_key": E2E_PUBLIC_KEY, "auth": E2E_AUTH},
                ("wrapped_key",), description="Exactly one of `user_id` and `token_id`; "
                "`public_key` (the member's key the wrap was made for) is required with "
                "`user_id`.")},
            "secrets": {"type": "array", "items": obj({"id": UUID, "value": E2E_ENVELOPE},
                                                      ("id", "value"))},
            "link": E2E_LINK,
        }, ("key_version", "wraps", "secrets")),
        "responses": {200: answer({"key_version": INT, "members": INT, "tokens": INT,
                                   "secrets": INT, "link": BOOL})},
        "errors": [409],
    },
    "get_anchor": {
        "summary": "The caller's anchor for the team: the newest key version and commitment "
                   "their client verified, sealed by it (session JWT only).",
        "description": _NOT_E2E + " 404 when none is stored (the client's first open of the "
                       "team: trust on first use, docs/e2e.md).",
        "tags": ["e2e"],
        "responses": {200: _ANCHOR},
        "errors": [404],
    },
    "put_anchor": {
        "summary": "Store the caller's anchor for the team (201 the first time; session JWT "
                   "only).",
        "description": _NOT_E2E + " The server checks its shape only; the client moves it "
                       "forward (docs/e2e.md).",
        "tags": ["e2e"],
        "body": obj({"anchor": E2E_ANCHOR}, ("anchor",)),
        "responses": {200: _ANCHOR, 201: _ANCHOR},
    },
}
