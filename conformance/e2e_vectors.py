"""The end-to-end test vectors (``conformance/vectors/e2e.json``): made and checked here.

Every client opens these in its own unit tests: the wrapped team key with the recipient's private
key, each sealed value with the team key (and refuses the ones marked ``"opens": false``), the
token parse, and the format-2 items (docs/e2e.md, "Format 2"): commitments, back-links, the
token's pin checked through a chain of links, recipient authentication, anchors, the PBKDF2
ceiling, low-order public keys and the NFC passphrase. The inputs are fixed (keys and nonces are SHA-256 of a label), so ``--write`` gives
the same file every time; ``check`` (run by the harness's own tests) proves the file still agrees
with the reference implementation, ``cvsm.e2e`` of the Python SDK.

    python -m conformance.e2e_vectors --write     # rewrite the file (only when the format changes)
"""

from __future__ import annotations

import hashlib
import json
import sys
import unicodedata
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
    chain_keys = [{"v": v, "k": k, "c": e2e.commitment(k, TEAM_ID, v)}
                  for v, k in ((1, fixed("team key v1")), (2, team_key), (3, fixed("team key v3")))]
    return {
        "format": "cvsm end-to-end vectors, docs/e2e.md, version 2",
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
        "token": {"token": e2e.join_token(api_token, token_private, 1, chain_keys[0]["c"]),
                  "api_token": api_token, "private_key": e2e._b64u(token_private),
                  "key_version": 1, "commitment": e2e._b64u(chain_keys[0]["c"])},
        "bad_tokens": [api_token + ".", api_token + ".abc", api_token + "." + "A" * 44,
                       "cvsm_XYZ." + e2e._b64u(token_private),
                       f"{api_token}.{e2e._b64u(token_private)}.0.{e2e._b64u(chain_keys[0]['c'])}",
                       f"{api_token}.{e2e._b64u(token_private)}.1.{e2e._b64u(chain_keys[0]['c'])}A",
                       f"{api_token}.{e2e._b64u(token_private)}.01.{e2e._b64u(chain_keys[0]['c'])}"],
        "v1_token": f"{api_token}.{e2e._b64u(token_private)}",
        **format2(team_key, member_private, token_private, api_token, chain_keys),
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


NFC_PASSPHRASE = "caf\u00e9 \u00fcber \u00c5ngstr\u00f6m 7"  # composed: what the wrap was made from


def format2(team_key: bytes, member_private: bytes, token_private: bytes, api_token: str,
            chain_keys: list[dict]) -> dict:
    """The vectors of format 2: key versions 1..3 of the team (version 2's key is ``team_key``)."""
    b = e2e._b64u
    links = {v: e2e.make_link(chain_keys[v - 1]["k"], chain_keys[v - 2]["k"], TEAM_ID, v,
                              _nonce=fixed(f"link nonce {v}", 12)) for v in (2, 3)}
    good = links[3]
    flipped = good[:-2] + ("A" if good[-2] != "A" else "B") + good[-1]
    token_public = e2e.public_key(token_private)
    member_public = e2e.public_key(member_private)
    k1, k2, k3 = (c["k"] for c in chain_keys)
    c1, c2, c3 = (c["c"] for c in chain_keys)
    key_answer = {
        "team_id": TEAM_ID, "key_version": 3,
        "wrapped_key": e2e.wrap_team_key(k3, TEAM_ID, 3, token_public,
                                         _ephemeral=fixed("ephemeral 3"),
                                         _nonce=fixed("wrap nonce 3", 12)),
        "auth": e2e.recipient_auth(k3, TEAM_ID, 3, "token", None, token_public),
        "links": [{"key_version": v, "link": link} for v, link in sorted(links.items())],
    }
    private = b(token_private)
    pin = f"{api_token}.{private}"

    def case(version: int, commit: bytes, outcome: str, why: str, answer: dict | None = None) -> dict:
        return {"token": f"{pin}.{version}.{b(commit)}", "key_answer": answer or key_answer,
                "outcome": outcome, "why": why}

    no_link = dict(key_answer, links=[{"key_version": 3, "link": links[3]}])
    bad_link = dict(key_answer, links=[{"key_version": 2, "link": links[2]},
                                       {"key_version": 3, "link": flipped}])
    low_order = []
    p = 2**255 - 19
    for high in (0, 1):
        for u in (0, 1, 325606250916557431795983626356110631294008115727848805560023387167927233504,
                  39382357235489614581723060781553021112529911719440698176882885853963445705823,
                  p - 1, p, p + 1):
            low_order.append(b((u + (high << 255)).to_bytes(32, "little")))
    nfd = unicodedata.normalize("NFD", NFC_PASSPHRASE)
    assert nfd != NFC_PASSPHRASE
    return {
        "chain": {
            "team_id": TEAM_ID,
            "keys": [{"key_version": c["v"], "team_key": b(c["k"]), "commitment": b(c["c"])}
                     for c in chain_keys],
            "links": [{"key_version": v, "link": link, "opens_to": b(chain_keys[v - 2]["k"])}
                      for v, link in sorted(links.items())],
            "bad_links": [
                {"key_version": 3, "key": b(k3), "link": flipped, "why": "ciphertext changed"},
                {"key_version": 3, "key": b(k3), "link": links[2],
                 "why": "version 2's link given as version 3's"},
                {"key_version": 3, "key": b(k2), "link": links[3], "why": "opened with another key"},
                {"key_version": 3, "key": b(k3), "link": "cvsm-link1.AA.AA", "why": "malformed"},
            ],
        },
        "token_pins": [
            case(1, c1, "ok", "pinned at version 1, current 3: links 3 and 2 lead to version 1"),
            case(3, c3, "ok", "pinned at the current version: no link needed"),
            case(2, c2, "ok", "pinned at version 2"),
            case(1, c2, "integrity", "version 2's commitment given for version 1"),
            case(1, e2e.commitment(k1, "00000000-0000-4000-8000-000000000000", 1), "integrity",
                 "commitment of another team"),
            case(4, c3, "integrity", "pinned at version 4, above the current version 3"),
            case(1, c1, "integrity", "the link of version 2 is missing", no_link),
            case(1, c1, "integrity", "the link of version 3 was changed", bad_link),
            case(3, c3, "integrity", "a wrap of another key (the server's) for the token",
                 dict(key_answer, wrapped_key=e2e.wrap_team_key(
                     fixed("server's key"), TEAM_ID, 3, token_public,
                     _ephemeral=fixed("ephemeral 4"), _nonce=fixed("wrap nonce 4", 12)))),
        ],
        "recipient_auth": [
            {"key_version": 2, "team_key": b(team_key), "kind": "user", "id": USER_ID,
             "public_key": b(member_public),
             "auth": e2e.recipient_auth(team_key, TEAM_ID, 2, "user", USER_ID, member_public),
             "valid": True},
            {"key_version": 2, "team_key": b(team_key), "kind": "token", "id": None,
             "public_key": b(token_public),
             "auth": e2e.recipient_auth(team_key, TEAM_ID, 2, "token", None, token_public),
             "valid": True},
            {"key_version": 2, "team_key": b(team_key), "kind": "user", "id": USER_ID,
             "public_key": b(token_public),
             "auth": e2e.recipient_auth(team_key, TEAM_ID, 2, "user", USER_ID, member_public),
             "valid": False, "why": "the member's auth with another public key (swapped)"},
            {"key_version": 3, "team_key": b(k3), "kind": "user", "id": USER_ID,
             "public_key": b(member_public),
             "auth": e2e.recipient_auth(team_key, TEAM_ID, 2, "user", USER_ID, member_public),
             "valid": False, "why": "version 2's auth checked at version 3"},
            {"key_version": 2, "team_key": b(team_key), "kind": "user",
             "id": "00000000-0000-4000-8000-000000000000", "public_key": b(member_public),
             "auth": e2e.recipient_auth(team_key, TEAM_ID, 2, "user", USER_ID, member_public),
             "valid": False, "why": "another member's id"},
            {"key_version": 2, "team_key": b(team_key), "kind": "token", "id": None,
             "public_key": b(token_public), "auth": None, "valid": False, "why": "no auth"},
        ],
        "anchor": {
            "user_id": USER_ID, "team_id": TEAM_ID, "private_key": b(member_private),
            "key_version": 3, "commitment": b(c3),
            "anchor": e2e.seal_anchor(member_private, USER_ID, TEAM_ID, 3, c3,
                                      _nonce=fixed("anchor nonce", 12)),
            "bad": [
                {"user_id": USER_ID, "team_id": OTHER_SECRET_ID,
                 "why": "another team's id in the associated data"},
                {"user_id": OTHER_SECRET_ID, "team_id": TEAM_ID, "why": "another member"},
            ],
        },
        "pbkdf2": {
            "min_iterations": e2e.MIN_ITERATIONS, "max_iterations": e2e.MAX_ITERATIONS,
            "refused": [
                f"cvsm-pass1.{e2e.MAX_ITERATIONS + 1}.{b(fixed('salt', 16))}."
                f"{b(fixed('pass nonce', 12))}.{b(fixed('ct', 48))}",
                f"cvsm-pass1.9999999999.{b(fixed('salt', 16))}."
                f"{b(fixed('pass nonce', 12))}.{b(fixed('ct', 48))}",
                f"cvsm-pass1.{e2e.MIN_ITERATIONS - 1}.{b(fixed('salt', 16))}."
                f"{b(fixed('pass nonce', 12))}.{b(fixed('ct', 48))}",
            ],
        },
        "nfc_passphrase": {
            "user_id": USER_ID, "passphrase_nfc": NFC_PASSPHRASE, "passphrase_nfd": nfd,
            "private_key": b(member_private),
            "wrapped": e2e.wrap_private_key_with_passphrase(
                member_private, NFC_PASSPHRASE, USER_ID, _salt=fixed("nfc salt", 16),
                _nonce=fixed("nfc nonce", 12)),
        },
        "low_order_public_keys": low_order,
    }


def _outcome(case: dict) -> str:
    """What a client makes of a token and the key answer served to it: ok, integrity or
    configuration (the reference of what every SDK must do)."""
    try:
        parts = e2e.parse_token(case["token"])
    except e2e.TokenFormatError:
        return "configuration"
    assert parts is not None
    answer = case["key_answer"]
    try:
        key = e2e.unwrap_team_key(answer["wrapped_key"], answer["team_id"], answer["key_version"],
                                  parts.private_key)
        e2e.verify_chain(key, answer["key_version"], answer["team_id"],
                         {link["key_version"]: link["link"] for link in answer["links"]},
                         parts.key_version, parts.commitment)
    except e2e.E2EError:
        return "integrity"
    return "ok"


def check_format2(vectors: dict) -> list[str]:
    problems = []
    chain = vectors["chain"]
    team_id = chain["team_id"]
    keys = {k["key_version"]: e2e._unb64u(k["team_key"]) for k in chain["keys"]}
    for k in chain["keys"]:
        if e2e._b64u(e2e.commitment(keys[k["key_version"]], team_id, k["key_version"])) \
                != k["commitment"]:
            problems.append(f"commitment of version {k['key_version']}")
    for link in chain["links"]:
        got = e2e.open_link(link["link"], keys[link["key_version"]], team_id, link["key_version"])
        if e2e._b64u(got) != link["opens_to"]:
            problems.append(f"link of version {link['key_version']}")
    for bad in chain["bad_links"]:
        try:
            e2e.open_link(bad["link"], e2e._unb64u(bad["key"]), team_id, bad["key_version"])
            problems.append(f"bad link opens: {bad['why']}")
        except e2e.E2EError:
            pass
    for case in vectors["token_pins"]:
        if _outcome(case) != case["outcome"]:
            problems.append(f"token pin: {case['why']}")
    if _outcome({"token": vectors["v1_token"], "key_answer": {}}) != "configuration":
        problems.append("a version-1 token is not a configuration error")
    for bad in vectors["bad_tokens"]:
        try:
            e2e.parse_token(bad)
            problems.append(f"bad token parses: {bad[-12:]}")
        except e2e.TokenFormatError:
            pass
    for a in vectors["recipient_auth"]:
        try:
            e2e.check_recipient_auth(a["auth"], e2e._unb64u(a["team_key"]), team_id,
                                     a["key_version"], a["kind"], a["id"],
                                     e2e._unb64u(a["public_key"]))
            valid = True
        except e2e.E2EError:
            valid = False
        if valid != a["valid"]:
            problems.append(f"recipient auth {a.get('why', 'valid')}")
    anchor = vectors["anchor"]
    private = e2e._unb64u(anchor["private_key"])
    if e2e.open_anchor(anchor["anchor"], private, anchor["user_id"], anchor["team_id"]) != \
            (anchor["key_version"], e2e._unb64u(anchor["commitment"])):
        problems.append("anchor")
    for bad in anchor["bad"]:
        try:
            e2e.open_anchor(anchor["anchor"], private, bad["user_id"], bad["team_id"])
            problems.append(f"bad anchor opens: {bad['why']}")
        except e2e.E2EError:
            pass
    for wrapped in vectors["pbkdf2"]["refused"]:
        try:
            e2e.open_passphrase_wrap(wrapped, "x", USER_ID)
            problems.append("a passphrase wrap outside the iteration bounds opens")
        except e2e.E2EError:
            pass
    nfc = vectors["nfc_passphrase"]
    for typed in (nfc["passphrase_nfc"], nfc["passphrase_nfd"]):
        if e2e._b64u(e2e.open_passphrase_wrap(nfc["wrapped"], typed, nfc["user_id"])) \
                != nfc["private_key"]:
            problems.append("NFC passphrase")
    for public in vectors["low_order_public_keys"]:
        try:
            e2e.check_public_key(e2e._unb64u(public))
            problems.append(f"low-order public key accepted: {public}")
        except e2e.E2EError:
            pass
    return problems


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
    return problems + check_format2(vectors)


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
