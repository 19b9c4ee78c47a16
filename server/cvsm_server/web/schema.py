"""The OpenAPI schema vocabulary the handler modules' `OPENAPI` entries are written in (`ref`,
`obj`, `answer`, `trimmed`, the shared property schemas and components). A leaf: it imports
domain rules only, never the route table or a handler module; the document is built by
`web.apidoc`."""

from __future__ import annotations

from typing import Any

from ..secrets import bulk
from ..e2e import syntax as e2e_syntax
from ..secrets import shares
from ..secrets import inputs as secret_inputs
from ..teams import service as teams
from ..accounts import users
from ..core.inputs import CONTROL_CHARACTERS, INT64_MAX
from ..crypto.passwords import MAX_LENGTH as PASSWORD_MAX, MIN_LENGTH as PASSWORD_MIN

UUID_PATTERN = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
SLUG_PATTERN = "^" + teams.SLUG_RE.pattern.removesuffix(r"\Z") + "$"
NAME_PATTERN = "^" + secret_inputs.NAME_RE.pattern.removesuffix(r"\Z") + "$"
USERNAME_PATTERN = "^" + users.USERNAME_RE.pattern.removesuffix(r"\Z") + "$"
TEAM_REF_PATTERN = (f"^(?:{UUID_PATTERN.strip('^$')}|{SLUG_PATTERN.strip('^$')})$")

# --- schema building blocks, used by the handler modules' OPENAPI dicts --------------------


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(properties: dict[str, Any], required: tuple[str, ...] | list[str] = (), **extra: Any) -> dict:
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = list(required)
    out.update(extra)
    return out


def answer(properties: dict[str, Any]) -> dict:
    """A success body whose every listed property is always present."""
    return obj(properties, tuple(properties))


def nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def _char_class(chars: str) -> str:
    """`chars` as the inside of a regular-expression class, in runs (`\\x1c-\\x1f`)."""
    codes, out = sorted(map(ord, chars)), []
    while codes:
        first = last = codes.pop(0)
        while codes and codes[0] == last + 1:
            last = codes.pop(0)
        out.append(f"\\u{first:04x}" + (f"-\\u{last:04x}" if last > first else ""))
    return "".join(out)


# What Python's str.strip() removes (U+3000 is the last), spelled out: JSON Schema patterns are
# ECMA-262, whose \s is another set (it lacks U+0085 and has U+FEFF).
STRIPPED = _char_class("".join(chr(c) for c in range(0x3001) if chr(c).isspace()))


def trimmed(max_length: int, *, one_line: bool = False) -> dict:
    """Text the server trims before it checks it: 1 to `max_length` characters once the
    whitespace around it is gone; with `one_line`, no control character either
    (`inputs.check_line`)."""
    refused = CONTROL_CHARACTERS if one_line else "\\x00"
    inner, edge = f"[^{refused}]", f"[^{STRIPPED}{refused}]"
    rule = ", on one line (no control character, line or paragraph separator)" if one_line else ""
    return {"type": "string",
            "pattern": f"^[{STRIPPED}]*{edge}(?:{inner}{{0,{max_length - 2}}}{edge})?[{STRIPPED}]*$",
            "description": f"1 to {max_length} characters once trimmed{rule}."}


def one_line(max_length: int) -> dict:
    """A name kept on one line (`inputs.check_line`), trimmed first."""
    return trimmed(max_length, one_line=True)


def _accepts_null(schema: dict) -> bool:
    if schema.get("type") == "null" or "null" in (schema.get("type") or ()):
        return True
    return any(_accepts_null(s) for s in schema.get("anyOf", ()))


def _null_as_absent(prop: dict) -> dict:
    """`prop` accepting null too: an optional body field given as null is left out
    (`inputs.field`)."""
    if _accepts_null(prop):
        return prop
    if isinstance(prop.get("type"), str) and not {"$ref", "const", "anyOf", "oneOf", "format"} & set(prop):
        out = {**prop, "type": [prop["type"], "null"]}
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    return nullable(prop)


def request_body(schema: dict) -> dict:
    """A body schema as the server reads it: its optional properties also take null."""
    if schema.get("type") != "object" or "properties" not in schema:
        return schema
    keep = set(schema.get("required", ()))
    for alternative in schema.get("anyOf", ()):  # fields one of which is required
        keep |= set(alternative.get("required", ()))
    props = {name: prop if name in keep else _null_as_absent(prop)
             for name, prop in schema["properties"].items()}
    return {**schema, "properties": props}


STRING = {"type": "string"}
INT = {"type": "integer"}
BOOL = {"type": "boolean"}
UUID = {"type": "string", "format": "uuid"}
TIME = {"type": "string", "format": "date-time"}
OK = answer({"ok": {"const": True}})
ENVIRONMENT = {"type": "string", "enum": list(secret_inputs.ENVIRONMENTS)}
SECRET_TYPE = {"type": "string", "enum": list(secret_inputs.TYPES)}
ROLE = {"type": "string", "enum": list(teams.RANK)}
SECRET_VALUE = {"type": "string", "maxLength": e2e_syntax.MAX_ENVELOPE_LENGTH,
                "description": f"At most {secret_inputs.MAX_VALUE_BYTES} bytes in UTF-8; for an "
                               "end-to-end team, the envelope (`cvsm-e2e1.`) of such a value "
                               "sealed in the client (docs/e2e.md)."}


def _pattern(regex: Any) -> str:
    return "^" + regex.pattern.removesuffix(r"\Z") + "$"


E2E_PUBLIC_KEY = {"type": "string", "pattern": _pattern(e2e_syntax.PUBLIC_KEY_RE),
                  "description": "An X25519 public key: 32 bytes in base64url without padding."}
E2E_WRAP = {"type": "string", "pattern": _pattern(e2e_syntax.WRAP_RE),
            "description": "A team key wrapped to one recipient's public key (docs/e2e.md)."}
E2E_PASS = {"type": "string", "pattern": _pattern(e2e_syntax.PASS_RE),
            "description": "A private key wrapped by a key derived from the member's passphrase "
                           "(PBKDF2-SHA256, 600,000 to 10,000,000 iterations)."}
E2E_AUTH = {"type": "string", "pattern": _pattern(e2e_syntax.AUTH_RE),
            "description": "A recipient's authentication (format 2, docs/e2e.md): HMAC-SHA256 "
                           "under the key version's recipient key, made by the client that "
                           "added the recipient."}
E2E_LINK = {"type": "string", "pattern": _pattern(e2e_syntax.LINK_RE),
            "description": "A key version's back-link (format 2): the previous version's key "
                           "sealed under this version's."}
E2E_ANCHOR = {"type": "string", "pattern": _pattern(e2e_syntax.ANCHOR_RE),
              "maxLength": e2e_syntax.MAX_ANCHOR_LENGTH,
              "description": "A member's anchor (format 2): the newest key version and its "
                             "commitment their client verified, sealed by it."}
E2E_REC = {"type": "string", "pattern": _pattern(e2e_syntax.REC_RE),
           "description": "A private key wrapped by the member's recovery key."}
E2E_ENVELOPE = {"type": "string", "pattern": _pattern(e2e_syntax.ENVELOPE_RE),
                "maxLength": e2e_syntax.MAX_ENVELOPE_LENGTH,
                "description": "A value sealed in the client under the team key (docs/e2e.md): "
                               f"its ciphertext at most {e2e_syntax.MAX_SEALED_LENGTH} characters, a "
                               f"value of at most {secret_inputs.MAX_VALUE_BYTES} bytes and its tag."}
E2E_SHARE = {"type": "string", "pattern": _pattern(e2e_syntax.SHARE_RE),
             "maxLength": e2e_syntax.MAX_SHARE_LENGTH,
             "description": "A shared value sealed under the key the link's #fragment carries."}
SECRET_NAME = {"type": "string", "pattern": NAME_PATTERN}
ID_LIST = {"type": "array", "items": STRING, "maxItems": bulk.MAX_ITEMS}


def or_empty(schema: dict) -> dict:
    """A query parameter that, given empty (`?to=`), is the same as left out."""
    return {"anyOf": [schema, {"type": "string", "maxLength": 0}],
            "description": "Empty is the same as left out."}


def query(name: str, schema: dict, description: str = "") -> dict:
    if schema.get("type") == "integer" and "maximum" not in schema:
        schema = {**schema, "maximum": INT64_MAX}  # `query_int` reads at most 64 bits
    out = {"name": name, "in": "query", "required": False, "schema": schema}
    if description:
        out["description"] = description
    return out


COMPONENTS: dict[str, dict] = {
    "Error": obj({"error": {"type": "string", "description": "An Indonesian message."}},
                 ("error",)),
    "User": answer({"id": UUID, "email": STRING, "username": STRING, "name": STRING}),
    "Team": obj({"id": UUID, "slug": STRING, "name": STRING, "plan": STRING,
                 "max_secrets": nullable(INT), "max_members": nullable(INT),
                 "max_environments": nullable(INT), "role": ROLE,
                 "e2e": {"type": "boolean", "description": "End-to-end (chosen at creation)."},
                 "key_version": {**nullable({"type": "integer", "minimum": 1}),
                                 "description": "An end-to-end team's current key version."}},
                ("id", "slug", "name", "plan", "max_secrets", "max_members", "max_environments",
                 "e2e", "key_version")),
    "Member": answer({"user_id": UUID, "email": STRING, "username": STRING, "name": STRING,
                      "role": ROLE}),
    "Secret": answer({"id": UUID, "name": STRING, "type": SECRET_TYPE,
                      "environment": ENVIRONMENT, "description": STRING,
                      "version": {"type": "integer", "minimum": 1}, "created_at": TIME,
                      "updated_at": TIME,
                      "e2e": {"type": "boolean",
                              "description": "Of an end-to-end team: its values are envelopes."}}),
    "ApiToken": obj({
        "id": UUID, "name": STRING,
        "token_prefix": STRING,
        "expires_at": nullable(TIME),
        "allowed_ips": {"type": "array", "items": STRING},
        "failed_auth_count": INT,
        "locked_until": nullable(TIME),
        "last_ip": nullable(STRING),
        "last_user_agent": nullable(STRING),
        "last_used_at": nullable(TIME),
        "revoked_at": nullable(TIME),
        "created_at": TIME,
        # scoped tokens (0.4)
        "team_id": nullable(STRING),
        "environments": nullable({"type": "array", "items": ENVIRONMENT}),
        "read_only": BOOL,
        # end-to-end teams (0.5)
        "e2e_public_key": nullable(STRING),
    }, ("id", "name", "token_prefix", "expires_at", "allowed_ips", "failed_auth_count",
        "locked_until", "last_ip", "last_user_agent", "last_used_at", "revoked_at", "created_at")),
    "Share": answer({"id": UUID, "secret_id": UUID,
                     "max_views": {"type": "integer", "minimum": shares.MAX_VIEWS[0],
                                   "maximum": shares.MAX_VIEWS[1]},
                     "view_count": INT, "expires_at": TIME, "revoked_at": nullable(TIME),
                     "created_at": TIME}),
    "AuditEntry": answer({"id": UUID, "action": STRING, "resource": STRING,
                          "resource_id": nullable(STRING), "user_email": nullable(STRING),
                          "ip_address": nullable(STRING), "user_agent": nullable(STRING),
                          "metadata": {"type": "object"}, "created_at": TIME}),
    "BulkResult": obj({"index": INT, "id": STRING, "line": INT, "name": nullable(STRING), "ok": BOOL,
                       "error": STRING}, ("index", "ok")),
    "BulkSummary": answer({"total": INT, "ok": INT, "failed": INT}),
}

BULK_ANSWER = answer({"results": {"type": "array", "items": ref("BulkResult")},
                      "summary": ref("BulkSummary")})

# Password rule, for the accounts module's entries.
PASSWORD = {"type": "string", "minLength": PASSWORD_MIN, "maxLength": PASSWORD_MAX}
