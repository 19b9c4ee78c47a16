"""The end-to-end test vectors (``conformance/vectors/e2e.json``): made and checked here.

Every client opens these in its own unit tests: the wrapped team key with the recipient's private
key, each sealed value with the team key (and refuses the ones marked ``"opens": false``), and the
token split. The inputs are fixed (keys and nonces are SHA-256 of a label), so ``--write`` gives
the same file every time; ``check`` (run by the harness's own tests) proves the file still agrees
with the reference implementation, ``cvsm.e2e`` of the Python SDK.

    python -m conformance.e2e_vectors --write     # rewrite the file (only when the format changes)
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from cvsm import e2e

PATH = Path(__file__).with_name("vectors") / "e2e.json"
TEAM_ID = "6f1c2b1e-4d0a-4c7e-9b7a-2f8e51c0a9d3"
SECRET_ID = "0b6d3e2a-8f41-4a5c-b3d2-7e9c1f0a4b58"
OTHER_SECRET_ID = "c2a7f9e1-5b3d-4e8a-9f60-1d2c3b4a5e6f"
USER_ID = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"


def fixed(label: str, size: int = 32) -> bytes:
    return hashlib.sha256(label.encode()).digest()[:size]


def build() -> dict:
    member_private = fixed("member private key")
    token_private = fixed("token private key")
    team_key = fixed("team key v2")
    key_version = 2
    api_token = "cvsm_" + hashlib.sha256(b"api token").hexdigest()
    values = []
    for i, (name, environment, version, secret_id, value) in enumerate([
        ("DATABASE_URL", "production", 1, SECRET_ID, "postgres://app:s3cr3t@db.internal:5432/app"),
        ("DATABASE_URL", "production", 7, SECRET_ID, "line one\nline two\n"),
        ("API_KEY", "staging", 1, OTHER_SECRET_ID, "kunci rahasia \u2014 caf\u00e9 \U0001F511"),
        ("QUOTED", "development", 3, OTHER_SECRET_ID, "'single' \"double\" $HOME `cmd` \\ \t"),
    ]):
        envelope = e2e.seal_value(value, team_key, key_version, team_id=TEAM_ID,
                                  secret_id=secret_id, version=version, environment=environment,
                                  name=name, _nonce=fixed(f"value nonce {i}", 12))
        values.append({"name": name, "environment": environment, "envelope": envelope,
                       "opens": True, "value": value})
    good = values[0]["envelope"]
    flipped = good[:-2] + ("A" if good[-2] != "A" else "B") + good[-1]
    values += [
        {"name": "DATABASE_URL", "environment": "staging", "envelope": good, "opens": False,
         "why": "sealed for production, asked for staging"},
        {"name": "DATABASE_URLS", "environment": "production", "envelope": good, "opens": False,
         "why": "sealed for another name"},
        {"name": "DATABASE_URL", "environment": "production", "envelope": flipped,
         "opens": False, "why": "ciphertext changed"},
        {"name": "DATABASE_URL", "environment": "production",
         "envelope": good.replace(f".{SECRET_ID}.1.", f".{SECRET_ID}.2.", 1), "opens": False,
         "why": "version in the envelope changed"},
        {"name": "DATABASE_URL", "environment": "production", "envelope": "cvsm-e2e1.2.x.1.AA.AA",
         "opens": False, "why": "malformed"},
    ]
    recovery = fixed("recovery key")
    share_key = fixed("share key")
    return {
        "format": "cvsm end-to-end vectors, docs/e2e.md, version 1",
        "team_id": TEAM_ID,
        "key_version": key_version,
        "team_key": e2e._b64u(team_key),
        "recipients": [
            {"what": "member", "private_key": e2e._b64u(member_private),
             "public_key": e2e._b64u(e2e.public_key(member_private)),
             "wrapped_key": e2e.wrap_team_key(team_key, TEAM_ID, key_version,
                                              e2e.public_key(member_private),
                                              _ephemeral=fixed("ephemeral 1"),
                                              _nonce=fixed("wrap nonce 1", 12))},
            {"what": "token", "private_key": e2e._b64u(token_private),
             "public_key": e2e._b64u(e2e.public_key(token_private)),
             "wrapped_key": e2e.wrap_team_key(team_key, TEAM_ID, key_version,
                                              e2e.public_key(token_private),
                                              _ephemeral=fixed("ephemeral 2"),
                                              _nonce=fixed("wrap nonce 2", 12))},
        ],
        "token": {"token": e2e.join_token(api_token, token_private), "api_token": api_token,
                  "private_key": e2e._b64u(token_private)},
        "bad_tokens": [api_token + ".", api_token + ".abc", api_token + "." + "A" * 44,
                       "cvsm_XYZ." + e2e._b64u(token_private)],
        "values": values,
        "passphrase": {"user_id": USER_ID, "passphrase": "kuda-laut batu 7 hijau",
                       "private_key": e2e._b64u(member_private),
                       "wrapped": e2e.wrap_private_key_with_passphrase(
                           member_private, "kuda-laut batu 7 hijau", USER_ID,
                           _salt=fixed("salt", 16), _nonce=fixed("pass nonce", 12))},
        "recovery": {"user_id": USER_ID, "recovery_key": "cvsm-recovery1." + e2e._b64u(recovery),
                     "private_key": e2e._b64u(member_private),
                     "wrapped": e2e.wrap_private_key_with_recovery(
                         member_private, recovery, USER_ID, _nonce=fixed("rec nonce", 12))},
        "share": {"share_key": e2e._b64u(share_key), "value": "dibagikan sekali\nsaja",
                  "envelope": e2e.seal_share("dibagikan sekali\nsaja", share_key,
                                             _nonce=fixed("share nonce", 12))},
    }


def check(vectors: dict) -> list[str]:
    """What in ``vectors`` the reference implementation disagrees with (empty: nothing)."""
    problems = []
    if vectors != build():
        problems.append("the file differs from what the reference implementation makes")
    team_key = e2e._unb64u(vectors["team_key"])
    for r in vectors["recipients"]:
        if e2e.unwrap_team_key(r["wrapped_key"], vectors["team_id"], vectors["key_version"],
                               e2e._unb64u(r["private_key"])) != team_key:
            problems.append(f"{r['what']}'s wrap does not open to the team key")
    for v in vectors["values"]:
        try:
            got = e2e.open_value(v["envelope"], team_key, team_id=vectors["team_id"],
                                 environment=v["environment"], name=v["name"])
        except e2e.E2EError:
            got = None
        if got != (v["value"] if v["opens"] else None):
            problems.append(f"value {v['name']}/{v['environment']}: expected opens={v['opens']}")
    return problems


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        PATH.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {PATH}")
        return 0
    problems = check(json.loads(PATH.read_text()))
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
