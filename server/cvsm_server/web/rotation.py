"""Secret rotation routes: parse, call `secret_rotation`, shape the answer. A webhook target's
signing secret appears in one answer only: the one that created it."""

from __future__ import annotations

from aiohttp import web

from ..rotation import targets as rotation_targets, policy as secret_rotation
from ..core.inputs import field
from .schema import BOOL, INT, OK, STRING, TIME, UUID, answer, nullable, obj
from .request import actor, connection, path_id, read_json, team_of
from .state import KEYRING, SETTINGS



async def get_rotation(request: web.Request) -> web.Response:
    secret_id = path_id(request, "secret_id")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        policy, runs = await secret_rotation.get_policy(conn, actor(request), team_id, secret_id)
    return web.json_response({
        "policy": secret_rotation.policy_json(policy) if policy else None,
        "rotations": [secret_rotation.run_json(r) for r in runs],
    })


async def set_rotation(request: web.Request) -> web.Response:
    secret_id = path_id(request, "secret_id")
    body = await read_json(request)
    interval = field(body, "interval_days", int)
    target = field(body, "target", dict)
    generator = field(body, "generator", dict, required=False)
    enabled = field(body, "enabled", bool, required=False, default=True)
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row, signing = await secret_rotation.set_policy(
            conn, actor(request), request.app[KEYRING], team_id, secret_id,
            interval_days=interval, target=target, generator=generator, enabled=enabled,
            allow_private=request.app[SETTINGS].webhook_allow_private)
    out: dict = {"policy": secret_rotation.policy_json(row)}
    if signing is not None:
        out["signing_secret"] = signing
    return web.json_response(out)


async def delete_rotation(request: web.Request) -> web.Response:
    secret_id = path_id(request, "secret_id")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        await secret_rotation.delete_policy(conn, actor(request), team_id, secret_id)
    return web.json_response({"ok": True})


async def rotate_now(request: web.Request) -> web.Response:
    secret_id = path_id(request, "secret_id")
    async with connection(request) as conn:
        team_id = await team_of(request, conn)
        row = await secret_rotation.rotate_now(conn, actor(request), team_id, secret_id)
    return web.json_response({"policy": secret_rotation.policy_json(row)}, status=202)


# --- OpenAPI: the operations above (`web.schema`), for `web.apidoc` ------------------------------

ROLE_NAME = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_$]{0,62}$"}
GENERATOR = obj({
    "length": {"type": "integer", "minimum": secret_rotation.MIN_LENGTH,
               "maximum": secret_rotation.MAX_LENGTH,
               "default": secret_rotation.DEFAULT_GENERATOR["length"]},
    "classes": {"type": "array", "minItems": 1,
                "items": {"type": "string", "enum": list(secret_rotation.CLASSES)},
                "default": secret_rotation.DEFAULT_GENERATOR["classes"]},
})
TARGET = obj({
    "kind": {"type": "string", "enum": list(rotation_targets.KINDS)},
    "admin_secret_id": {**UUID, "description": "postgres kinds: another secret of the team "
                        "whose value is a `postgresql://` URL of an account that may ALTER ROLE."},
    "username": {**ROLE_NAME, "description": "postgres: the role whose password rotates."},
    "value_format": {"type": "string", "enum": list(rotation_targets.VALUE_FORMATS),
                     "default": "password",
                     "description": "postgres: the secret holds the password or a URL."},
    "usernames": {"type": "array", "items": ROLE_NAME, "minItems": 2, "maxItems": 2,
                  "description": "postgres_alternating: the two roles that take turns."},
    "owner_group": {**ROLE_NAME, "description": "postgres_alternating: a group both roles "
                    "join and act as, so objects either creates belong to both."},
    "url": {**STRING, "description": "webhook: the endpoint the signed steps are posted to."},
}, ("kind",))
# What a policy's `target` may be sent as: one shape per kind, with no other field (the server
# refuses a setting of another kind).
_ADMIN = {**UUID, "description": "another secret of the team whose value is a `postgresql://` "
          "URL of an account that may ALTER ROLE."}
TARGET_IN = {"oneOf": [
    obj({"kind": {"const": "none"}}, ("kind",), additionalProperties=False),
    obj({"kind": {"const": "postgres"}, "admin_secret_id": _ADMIN,
         "username": {**ROLE_NAME, "description": "the role whose password rotates."},
         "value_format": {"type": "string", "enum": list(rotation_targets.VALUE_FORMATS),
                          "default": "password",
                          "description": "the secret holds the password or a URL."}},
        ("kind", "admin_secret_id", "username"), additionalProperties=False),
    obj({"kind": {"const": "postgres_alternating"}, "admin_secret_id": _ADMIN,
         "usernames": {"type": "array", "items": ROLE_NAME, "minItems": 2, "maxItems": 2,
                       "uniqueItems": True, "description": "the two roles that take turns."},
         "owner_group": {**ROLE_NAME, "description": "a group both roles join and act as, so "
                         "objects either creates belong to both (not one of the two)."}},
        ("kind", "admin_secret_id", "usernames"), additionalProperties=False),
    obj({"kind": {"const": "webhook"},
         "url": {**STRING, "description": "the endpoint the signed steps are posted to: "
                 "https:// (http:// only where private targets are allowed)."}},
        ("kind", "url"), additionalProperties=False),
]}
POLICY = answer({
    "secret_id": UUID, "interval_days": INT, "enabled": BOOL, "generator": GENERATOR,
    "target": TARGET, "next_rotation_at": TIME, "last_rotated_at": nullable(TIME),
    "failures": INT, "last_error": nullable(STRING), "last_failed_at": nullable(TIME),
    "created_at": TIME, "updated_at": TIME,
})
RUN = answer({
    "id": UUID,
    "step": {"type": "string", "enum": ["created", "set", "tested", "finished", "failed"]},
    "from_version": INT, "to_version": nullable(INT), "target_user": nullable(STRING),
    "error": nullable(STRING), "started_at": TIME, "finished_at": nullable(TIME),
})

OPENAPI = {
    "get_rotation": {
        "summary": "A secret's rotation policy (null when none) and its latest runs.",
        "tags": ["rotation"],
        "responses": {200: answer({"policy": nullable(POLICY),
                                   "rotations": {"type": "array", "items": RUN}})},
    },
    "set_rotation": {
        "summary": "Create or replace a secret's rotation policy (Admin).",
        "description": "Every `interval_days` the background job rotates the secret in four "
                       "steps (create a pending value that is never served, set it on the "
                       "target, test it, then make it current with the `secret.rotated` "
                       "event). A webhook target's `signing_secret` is in the answer that "
                       "creates it, and never again.",
        "tags": ["rotation"],
        "body": obj({"interval_days": {"type": "integer", "minimum": 1,
                                       "maximum": secret_rotation.MAX_INTERVAL_DAYS},
                     "target": TARGET_IN, "generator": GENERATOR,
                     "enabled": {"type": "boolean", "default": True}},
                    ("interval_days", "target")),
        "responses": {200: obj({"policy": POLICY, "signing_secret": STRING}, ("policy",))},
    },
    "delete_rotation": {"summary": "Remove a secret's rotation policy (Admin).",
                        "tags": ["rotation"], "responses": {200: OK}},
    "rotate_now": {
        "summary": "Rotate the secret now (Member): the policy becomes due at once.",
        "tags": ["rotation"],
        "responses": {202: answer({"policy": POLICY})},
    },
}
