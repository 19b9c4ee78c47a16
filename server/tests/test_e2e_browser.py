"""End-to-end teams in a real browser (Debian's Chromium through Playwright).

The cryptography: `static/e2e.js`, loaded by a page of the test server under its own strict CSP
(script files only, no inline script, no eval), opens every entry of
conformance/vectors/e2e.json (wraps, values and the refusals, passphrase and recovery wraps, the
share, the token and the bad tokens), and what it seals or wraps opens with the Python
reference `cvsm.e2e`, and the other way round; `static/e2e-dotenv.js` reads and writes .env
text exactly as the server's `dotenv` does.

The flows, by label and role at 1280 and 390 px with axe-core and the width check on every page
landed on: a member sets up their keys (a passphrase equal to the sign-in password refused, the
recovery key shown once), creates an end-to-end team, adds a secret, reveals it, edits it (version
2), rolls back to version 1 in the browser, imports a .env, downloads the export made in the
browser and opens one cell of the environments side by side; a token made on the tokens page reads
the value through the API and `cvsm.e2e`; a share link opens in a second browser context with the
key of its #fragment (and says so without it, or over plain HTTP); an added member sets up keys, is
granted access and reads the value in their browser, signs out (the key is forgotten), sets a new
passphrase with the recovery key, locks and unlocks; after a removal the team is re-keyed and still
reads. After each step no table of the database holds a value in plaintext. Over plain HTTP on a
name that is not localhost (a host-resolver rule maps cvsm.test to 127.0.0.1, so
`window.isSecureContext` is false) the team's pages show the names, say in Indonesian that values
need HTTPS, no value form sends a value, and an end-to-end team cannot be created.
With CVSM_SCREENSHOTS_DIR set (docs/screenshots) the new pages are photographed at both widths."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cvsm
import pytest
from aiohttp.test_utils import TestClient

from conftest import Api, query
from cvsm import e2e
from cvsm_server.core.config import Settings
from test_dashboard import axe_script  # noqa: F401 (a fixture)
from test_docs_page import CHROMIUM, CHROMIUM_ARGS, require_chromium
from test_layout import serious_violations, too_wide

WIDTHS = (1280, 390)
PASSWORD = "correct horse 1"  # conftest's Api.register
PASSPHRASE = "kuda laut batu hijau 7"
# format 2: the token's private key, then its pin (key version and commitment)
TOKEN_WITH_KEY = re.compile(r"cvsm_[0-9a-f]{64}\.[A-Za-z0-9_-]{43}\.[1-9][0-9]*\.[A-Za-z0-9_-]{43}")
INSECURE_HOST = "cvsm.test"  # mapped to 127.0.0.1 by --host-resolver-rules: not a secure context


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(app_url="")  # links use the address asked; plain http keeps the cookie

VECTORS = json.loads((Path(__file__).resolve().parents[2] / "conformance" / "vectors"
                      / "e2e.json").read_text())

# Runs in the page: every vector through CvsmE2E; answers what it opened and what it refused.
OPEN_VECTORS = """async (v) => {
  const E = window.CvsmE2E;
  const out = {recipients: [], values: [], badTokens: []};
  const teamKey = E.unb64u(v.team_key, 32);
  for (const r of v.recipients) {
    const priv = E.unb64u(r.private_key, 32);
    const viaRaw = await E.unwrapTeamKey(r.wrapped_key, v.team_id, v.key_version, priv);
    // a non-extractable CryptoKey, as the dashboard keeps a member's key, with its public key
    const kept = await E.importPrivateKey(priv, false);
    const viaKey = await E.unwrapTeamKey(r.wrapped_key, v.team_id, v.key_version, kept,
                                         E.unb64u(r.public_key, 32));
    let otherVersion;
    try {
      await E.unwrapTeamKey(r.wrapped_key, v.team_id, v.key_version + 1, priv);
      otherVersion = "opened";
    } catch (e) { otherVersion = e.name; }
    out.recipients.push({public_key: E.b64u(await E.publicKey(priv)), via_raw: E.b64u(viaRaw),
                         via_key: E.b64u(viaKey), extractable: kept.extractable,
                         other_version: otherVersion});
  }
  for (const entry of v.values) {
    try {
      out.values.push({value: await E.openValue(entry.envelope, teamKey,
        {teamId: v.team_id, environment: entry.environment, name: entry.name})});
    } catch (e) { out.values.push({error: e.name, message: e.message}); }
  }
  out.passphrase = E.b64u(await E.openPassphraseWrap(v.passphrase.wrapped,
    v.passphrase.passphrase, v.passphrase.user_id));
  try {
    await E.openPassphraseWrap(v.passphrase.wrapped, v.passphrase.passphrase + " ",
                               v.passphrase.user_id);
    out.wrong_passphrase = "opened";
  } catch (e) { out.wrong_passphrase = e.name; }
  out.recovery = E.b64u(await E.openRecoveryWrap(v.recovery.wrapped,
    E.parseRecoveryKey(v.recovery.recovery_key), v.recovery.user_id));
  out.share = await E.openShare(v.share.envelope, E.unb64u(v.share.share_key, 32));
  const split = E.splitToken(v.token.token);
  out.token = {api_token: split.apiToken, private_key: E.b64u(split.privateKey),
               key_version: split.keyVersion, commitment: E.b64u(split.commitment),
               joined: E.joinToken(split.apiToken, split.privateKey, split.keyVersion,
                                   split.commitment)};
  for (const bad of v.bad_tokens) {
    try { E.splitToken(bad); out.badTokens.push("accepted"); }
    catch (e) { out.badTokens.push(e.name + ": " + e.message); }
  }
  return out;
}"""

# Runs in the page: format 2's vectors (chain, token pins, the first format's token, recipient
# auth, anchor) through CvsmE2E; answers each outcome.
FORMAT2_VECTORS = """async (v) => {
  const E = window.CvsmE2E;
  const out = {commitments: [], links: [], badLinks: [], pins: [], auths: [], anchorBad: []};
  const c = v.chain;
  for (const k of c.keys) {
    out.commitments.push(E.b64u(await E.commitment(E.unb64u(k.team_key, 32), c.team_id,
                                                   k.key_version)));
  }
  const keyOf = (version) => E.unb64u(c.keys.find((k) => k.key_version === version).team_key, 32);
  for (const l of c.links) {
    out.links.push(E.b64u(await E.openLink(l.link, keyOf(l.key_version), c.team_id,
                                           l.key_version)));
  }
  for (const b of c.bad_links) {
    try { await E.openLink(b.link, E.unb64u(b.key, 32), c.team_id, b.key_version);
          out.badLinks.push("opened"); }
    catch (e) { out.badLinks.push(e.name); }
  }
  for (const t of v.token_pins) {
    try {
      const parts = E.splitToken(t.token);
      const a = t.key_answer;
      const current = await E.unwrapTeamKey(a.wrapped_key, a.team_id, a.key_version,
                                            parts.privateKey);
      const links = {};
      for (const l of a.links) links[l.key_version] = l.link;
      await E.verifyChain(current, a.key_version, a.team_id, links, parts.keyVersion,
                          parts.commitment);
      out.pins.push("ok");
    } catch (e) { out.pins.push(e.name === "E2EError" ? "integrity" : "other: " + e); }
  }
  try { E.splitToken(v.v1_token); out.v1 = "accepted"; } catch (e) { out.v1 = e.message; }
  for (const r of v.recipient_auth) {
    const pub = E.unb64u(r.public_key, 32), key = E.unb64u(r.team_key, 32);
    const made = await E.recipientAuth(key, v.chain.team_id, r.key_version, r.kind, r.id, pub);
    let checked;
    try { await E.checkRecipientAuth(r.auth, key, v.chain.team_id, r.key_version, r.kind, r.id,
                                     pub); checked = true; }
    catch (e) { checked = false; }
    out.auths.push({made_equal: made === r.auth, checked});
  }
  const a = v.anchor, priv = E.unb64u(a.private_key, 32);
  const opened = await E.openAnchor(a.anchor, await E.anchorKey(priv), a.user_id, a.team_id);
  out.anchor = {key_version: opened.keyVersion, commitment: E.b64u(opened.commitment)};
  out.pbkdf2 = [];
  for (const w of v.pbkdf2.refused) {
    try { await E.openPassphraseWrap(w, "x", a.user_id); out.pbkdf2.push("opened"); }
    catch (e) { out.pbkdf2.push(e.message); }
  }
  const n = v.nfc_passphrase;
  out.nfc = [E.b64u(await E.openPassphraseWrap(n.wrapped, n.passphrase_nfc, n.user_id)),
             E.b64u(await E.openPassphraseWrap(n.wrapped, n.passphrase_nfd, n.user_id))];
  const mine = await E.sealAnchor(priv, a.user_id, a.team_id, 5, E.unb64u(a.commitment, 32));
  out.anchorSealed = mine;
  for (const b of a.bad) {
    try { await E.openAnchor(a.anchor, priv, b.user_id, b.team_id); out.anchorBad.push("opened"); }
    catch (e) { out.anchorBad.push(e.name); }
  }
  return out;
}"""

# Runs in the page: seals and wraps with fresh randomness, for Python to open.
SEAL = """async (v) => {
  const E = window.CvsmE2E;
  const teamKey = E.newTeamKey();
  const member = await E.generateKeyPair();
  const recovery = E.newRecoveryKey();
  const shareKey = E.random(32);
  const secretId = E.newSecretId();
  const values = [];
  for (const entry of v.values.filter((e) => e.opens)) {
    values.push({value: entry.value, environment: entry.environment, name: entry.name,
                 envelope: await E.sealValue(entry.value, teamKey, 3,
                   {teamId: v.team_id, secretId, version: 4, environment: entry.environment,
                    name: entry.name})});
  }
  return {
    team_key: E.b64u(teamKey), secret_id: secretId, values,
    private_key: E.b64u(member.privateKey), public_key: E.b64u(member.publicKey),
    public_of_private: E.b64u(await E.publicKey(member.privateKey)),
    wrapped_key: await E.wrapTeamKey(teamKey, v.team_id, 3, member.publicKey),
    wrapped_to_python: await E.wrapTeamKey(teamKey, v.team_id, 3, E.unb64u(v.python_public, 32)),
    passphrase_wrap: await E.wrapPrivateKeyWithPassphrase(member.privateKey, "kuda laut",
                                                          v.user_id),
    recovery_key: recovery.text,
    recovery_wrap: await E.wrapPrivateKeyWithRecovery(member.privateKey, recovery.raw, v.user_id),
    share_key: E.b64u(shareKey),
    share: await E.sealShare("sekali saja\\n\u00e9", shareKey),
    fingerprint: await E.fingerprint(member.publicKey),
  };
}"""

# Runs in the page: opens what Python sealed.
OPEN_PYTHON = """async (p) => {
  const E = window.CvsmE2E;
  const priv = E.unb64u(p.private_key, 32);
  const teamKey = await E.unwrapTeamKey(p.wrapped_key, p.team_id, 5, priv);
  return {
    team_key: E.b64u(teamKey),
    value: await E.openValue(p.envelope, teamKey,
                             {teamId: p.team_id, environment: "staging", name: "API_KEY"}),
    passphrase: E.b64u(await E.openPassphraseWrap(p.passphrase_wrap, "batu hijau", p.user_id)),
    recovery: E.b64u(await E.openRecoveryWrap(p.recovery_wrap, E.parseRecoveryKey(p.recovery_key),
                                              p.user_id)),
    share: await E.openShare(p.share, E.unb64u(p.share_key, 32)),
  };
}"""


async def test_e2e_js_opens_the_vectors_and_agrees_with_the_python_reference(
        client: TestClient) -> None:
    require_chromium()
    from playwright.async_api import async_playwright

    base = str(client.make_url("/")).rstrip("/")
    problems: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()  # the page's own CSP applies (no bypass)
            page.on("console", lambda m: problems.append(f"{m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            response = await page.goto(f"{base}/share/shr_{'A' * 32}")
            assert response is not None
            csp = response.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "unsafe" not in csp
            assert await page.evaluate("window.isSecureContext && CvsmE2E.available()")

            opened = await page.evaluate(OPEN_VECTORS, VECTORS)
            for want, got in zip(VECTORS["recipients"], opened["recipients"], strict=True):
                assert got["public_key"] == want["public_key"]
                assert got["via_raw"] == got["via_key"] == VECTORS["team_key"]
                assert got["extractable"] is False
                assert got["other_version"] == "E2EError"
            for want, got in zip(VECTORS["values"], opened["values"], strict=True):
                if want["opens"]:
                    assert got == {"value": want["value"]}, want
                else:
                    assert got["error"] == "E2EError", want["why"]
            assert opened["passphrase"] == VECTORS["passphrase"]["private_key"]
            assert opened["wrong_passphrase"] == "E2EError"
            assert opened["recovery"] == VECTORS["recovery"]["private_key"]
            assert opened["share"] == VECTORS["share"]["value"]
            assert opened["token"] == {**{k: VECTORS["token"][k] for k in (
                "api_token", "private_key", "key_version", "commitment")},
                "joined": VECTORS["token"]["token"]}
            assert len(opened["badTokens"]) == len(VECTORS["bad_tokens"])
            assert all(t.startswith("E2EError: ") for t in opened["badTokens"])
            assert not any(VECTORS["token"]["private_key"] in t for t in opened["badTokens"])

            # Format 2 (docs/e2e.md): commitments, links, token pins, recipient auth, anchors.
            f2 = await page.evaluate(FORMAT2_VECTORS, VECTORS)
            assert f2["commitments"] == [k["commitment"] for k in VECTORS["chain"]["keys"]]
            assert f2["links"] == [l["opens_to"] for l in VECTORS["chain"]["links"]]
            assert f2["badLinks"] == ["E2EError"] * len(VECTORS["chain"]["bad_links"])
            assert f2["pins"] == [t["outcome"] for t in VECTORS["token_pins"]], \
                [t["why"] for t in VECTORS["token_pins"]]
            assert "made before" in f2["v1"]
            assert f2["auths"] == [{"made_equal": r["valid"], "checked": r["valid"]}
                                   for r in VECTORS["recipient_auth"]]
            anchor = VECTORS["anchor"]
            assert f2["anchor"] == {"key_version": anchor["key_version"],
                                    "commitment": anchor["commitment"]}
            assert f2["anchorBad"] == ["E2EError"] * len(anchor["bad"])
            assert all("iterations" in m for m in f2["pbkdf2"]), f2["pbkdf2"]
            assert f2["nfc"] == [VECTORS["nfc_passphrase"]["private_key"]] * 2
            assert e2e.open_anchor(f2["anchorSealed"], e2e._unb64u(anchor["private_key"], 32),
                                   anchor["user_id"], anchor["team_id"]) == (
                5, e2e._unb64u(anchor["commitment"], 32))

            # What the browser seals and wraps, Python opens.
            python_private, python_public = e2e.generate_key_pair()
            user_id = VECTORS["passphrase"]["user_id"]
            team_id = VECTORS["team_id"]
            sealed = await page.evaluate(SEAL, {**VECTORS, "user_id": user_id,
                                                "python_public": e2e._b64u(python_public)})
            team_key = e2e._unb64u(sealed["team_key"], 32)
            private = e2e._unb64u(sealed["private_key"], 32)
            assert e2e.public_key(private) == e2e._unb64u(sealed["public_key"], 32)
            assert sealed["public_of_private"] == sealed["public_key"]
            assert e2e.unwrap_team_key(sealed["wrapped_key"], team_id, 3, private) == team_key
            assert e2e.unwrap_team_key(sealed["wrapped_to_python"], team_id, 3,
                                       python_private) == team_key
            with pytest.raises(e2e.E2EError):
                e2e.unwrap_team_key(sealed["wrapped_key"], team_id, 4, private)
            assert sealed["values"]
            for entry in sealed["values"]:
                parts = e2e.parse_envelope(entry["envelope"])
                assert (parts.key_version, parts.secret_id, parts.version) == (
                    3, sealed["secret_id"], 4)
                assert e2e.open_value(entry["envelope"], team_key, team_id=team_id,
                                      environment=entry["environment"],
                                      name=entry["name"]) == entry["value"]
                with pytest.raises(e2e.E2EError):
                    e2e.open_value(entry["envelope"], team_key, team_id=team_id,
                                   environment=entry["environment"], name=entry["name"] + "X")
            assert sealed["passphrase_wrap"].startswith("cvsm-pass1.600000.")
            assert e2e.open_passphrase_wrap(sealed["passphrase_wrap"], "kuda laut",
                                            user_id) == private
            assert sealed["recovery_key"].startswith("cvsm-recovery1.")
            recovery = e2e._unb64u(sealed["recovery_key"].split(".", 1)[1], 32)
            assert e2e.open_recovery_wrap(sealed["recovery_wrap"], recovery, user_id) == private
            assert e2e.open_share(sealed["share"], e2e._unb64u(sealed["share_key"], 32)) == \
                "sekali saja\n\u00e9"
            assert len(sealed["fingerprint"]) == 39  # 8 groups of 4 hex digits

            # What Python seals and wraps, the browser opens.
            member_private, member_public = e2e.generate_key_pair()
            key = e2e.new_team_key()
            recovery_raw = e2e.new_team_key()
            share_key = e2e.new_team_key()
            secret_id = "3f0b8c3e-0d5e-4b8f-9a61-2c4d6e8f0a1b"
            from_python = await page.evaluate(OPEN_PYTHON, {
                "team_id": team_id, "user_id": user_id,
                "private_key": e2e._b64u(member_private),
                "wrapped_key": e2e.wrap_team_key(key, team_id, 5, member_public),
                "envelope": e2e.seal_value("kunci \u2014 \U0001f511", key, 5, team_id=team_id,
                                           secret_id=secret_id, version=2,
                                           environment="staging", name="API_KEY"),
                "passphrase_wrap": e2e.wrap_private_key_with_passphrase(
                    member_private, "batu hijau", user_id),
                "recovery_key": "cvsm-recovery1." + e2e._b64u(recovery_raw),
                "recovery_wrap": e2e.wrap_private_key_with_recovery(member_private,
                                                                    recovery_raw, user_id),
                "share_key": e2e._b64u(share_key),
                "share": e2e.seal_share("dari python", share_key),
            })
            assert from_python == {
                "team_key": e2e._b64u(key), "value": "kunci \u2014 \U0001f511",
                "passphrase": e2e._b64u(member_private), "recovery": e2e._b64u(member_private),
                "share": "dari python"}
        finally:
            await browser.close()
    assert not [p for p in problems if "CvsmE2E" in p or "e2e.js" in p], problems


# The .env corpus: the server's parser and its export are the reference for the browser's.
DOTENV_CORPUS = [
    "", "A=1\n", "A=1", "\ufeffA=1\r\nB=2\rC=3\n", "# c\n\n  export A = x  # note\nB=",
    "A='single # not a comment'\nB=\"dq \\n \\t \\$HOME \\` \\\\ \\q\"\n",
    "A=\"multi\nline\"\nB='also\r\nmulti'\n", "A=\"open\nB=2\nC=3\n", "A='x' trailing\nB=1\n",
    "A=\"x\ny\" junk\nB=2\n", "1BAD=x\nA=1\nA=2\n", "no equals here\n=value\nA=b#c d #e\n",
    "'QUOTED'=x\nA= # only a comment\nB=#hash\n", "export A='it\\'s'\nB=\\x\\n\n",
    "A=caf\u00e9 \U0001f511\u2028B=1\nC=\x1cD\n", "  \t\n\x1cA=1\n", "A=1 \x1c# c\n",
    "A=\"\\a\\b\\f\\v\\r\\'\\\"\"\n", "KEY_" + "x" * 260 + "=1\nOK=1\n",
]
DOTENV_VALUES = ["plain", "", "it's", "a\\\\b", "ends\\", "line\nbreak\r\nand cr", "$HOME `x`",
                 "\"dq\"", "\t tab", "caf\u00e9 \U0001f511", "\x00nul", "\u2028sep", "#hash"]


def _python_entries(content: str) -> list[dict]:
    from cvsm_server.secrets import dotenv

    return [{"line": e.line, "name": e.name, **({"error": e.error} if e.error else
                                                  {"value": e.value})}
            for e in dotenv.parse(content)]


async def test_e2e_dotenv_js_reads_and_writes_as_the_server_does(client: TestClient) -> None:
    require_chromium()
    import random

    from playwright.async_api import async_playwright

    from cvsm_server.secrets import dotenv

    rng = random.Random(32)
    alphabet = ["A", "b", "_", "1", "=", " ", "\t", "#", "'", '"', "\\", "\n", "\r", "$", "`",
                "export ", "\u00e9", "\x1c", "\ufeff", "n", "x"]
    corpus = DOTENV_CORPUS + ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
                              for _ in range(400)]
    values = {f"K{i}": v for i, v in enumerate(DOTENV_VALUES)}
    base = str(client.make_url("/")).rstrip("/")
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            await page.goto(f"{base}/signin")
            got = await page.evaluate("""([corpus, values]) => ({
                parsed: corpus.map((text) => CvsmDotenv.parse(text).map((e) => {
                  const out = {line: e.line, name: e.name};
                  if (e.error) out.error = e.error; else out.value = e.value;
                  return out;
                })),
                rendered: CvsmDotenv.render(values),
                reparsed: CvsmDotenv.parse(CvsmDotenv.render(values)).map((e) => [e.name, e.value]),
            })""", [corpus, values])
        finally:
            await browser.close()
    for text, entries in zip(corpus, got["parsed"], strict=True):
        assert entries == _python_entries(text), repr(text)
    assert got["rendered"] == dotenv.render(values)
    assert dict(got["reparsed"]) == values


async def no_plaintext(database_url: str, values: list[str]) -> None:
    """No row of any table of the database holds one of `values` as text."""
    tables = [r["table_name"] for r in await query(
        database_url, "SELECT table_name FROM information_schema.tables "
                      "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'")]
    assert "secrets" in tables and "team_key_wraps" in tables
    for table in tables:
        rows = await query(database_url, f'SELECT t::text AS row FROM "{table}" t')
        text = "\n".join(r["row"] for r in rows)
        for value in values:
            assert value not in text, f"a value in plaintext in {table}"


async def read_with_token(client: TestClient, token: str, team_id: str, name: str,
                          environment: str = "production") -> str:
    """What an SDK does with a token of an end-to-end team: the by-name read, the team key
    unwrapped with the token's private key, the envelope opened (cvsm.e2e)."""
    parts = e2e.parse_token(token)
    assert parts is not None
    api_token, private_key = parts.api_token, parts.private_key
    auth = {"Authorization": f"Bearer {api_token}"}
    read = await client.get(f"/api/v1/teams/{team_id}/secrets/by-name/{name}",
                            params={"environment": environment}, headers=auth)
    assert read.status == 200, await read.text()
    body = await read.json()
    assert body["secret"]["e2e"] is True
    key = await client.get(f"/api/v1/teams/{team_id}/e2e/key", headers=auth)
    assert key.status == 200, await key.text()
    wrap = await key.json()
    team_key = e2e.unwrap_team_key(wrap["wrapped_key"], wrap["team_id"], wrap["key_version"],
                                   private_key)
    # format 2: the key chains to the token's pin, and the token's wrap carries its auth
    e2e.verify_chain(team_key, wrap["key_version"], team_id,
                     {link["key_version"]: link["link"] for link in wrap["links"]},
                     parts.key_version, parts.commitment)
    e2e.check_recipient_auth(wrap["auth"], team_key, team_id, wrap["key_version"], "token", None,
                             e2e.public_key(private_key))
    return e2e.open_value(body["value"], team_key, team_id=team_id, environment=environment,
                          name=name)


async def test_e2e_team_flows_in_the_browser_keep_values_out_of_the_database(
        client: TestClient, api: Api, database_url: str, axe_script: Path,
        tmp_path: Path) -> None:
    require_chromium()
    from playwright.async_api import async_playwright, expect

    from cvsm_server.secrets import dotenv

    base = str(client.make_url("/")).rstrip("/")
    port = client.make_url("/").port
    shots = Path(os.environ.get("CVSM_SCREENSHOTS_DIR") or tmp_path)
    problems: dict[str, Any] = {}

    async def landed(page: Any, name: str, width: int, *, shot: bool = False,
                     focus: Any = None) -> None:
        if measured := await too_wide(page):
            problems[f"{name}@{width} too wide"] = measured
        if serious := await serious_violations(page, axe_script):
            problems[f"{name}@{width} axe"] = serious
        if shot:
            for value in await page.locator("[data-secret-value]").all():
                if await value.is_visible():
                    await value.evaluate("node => { node.textContent = node.textContent"
                                         ".replace(/[A-Za-z0-9_-]{20,}/g, '…') }")
            if focus is not None:
                await focus.evaluate("node => node.scrollIntoView({block: 'start'})")
            await page.screenshot(path=str(shots / f"{name}-{width}.png"))

    async def flash(page: Any, text: str) -> None:
        await expect(page.get_by_role("status").filter(has_text=text)).to_have_count(1)

    async def sign_in(page: Any, at: str, username: str) -> None:
        await page.goto(f"{at}/signin")
        await page.get_by_label("Email atau username").fill(username)
        await page.get_by_label("Kata sandi").fill(PASSWORD)
        await page.get_by_role("button", name="Masuk").click()
        await page.wait_for_url(f"{at}/app/teams")

    async def set_up_keys(page: Any, name: str, width: int) -> str:
        await page.get_by_role("link", name="Akun", exact=True).click()
        await page.get_by_label("Passphrase baru (minimal 12 karakter)").fill(PASSWORD)
        await page.get_by_label("Ulangi passphrase").fill(PASSWORD)
        await page.get_by_label("Kata sandi masuk Anda").fill(PASSWORD)
        await page.get_by_role("button", name="Siapkan kunci end-to-end").click()
        await expect(page.get_by_role("alert")).to_contain_text(
            "Passphrase tidak boleh sama dengan kata sandi masuk")
        await page.get_by_label("Passphrase baru (minimal 12 karakter)").fill(PASSPHRASE)
        await page.get_by_label("Ulangi passphrase").fill(PASSPHRASE)
        await page.get_by_role("button", name="Siapkan kunci end-to-end").click()
        await flash(page, "Kunci end-to-end disiapkan")
        recovery = page.get_by_role("region", name="Kunci pemulihan")
        await expect(recovery).to_be_visible()
        text = (await recovery.locator("pre").inner_text()).strip()
        assert re.fullmatch(r"cvsm-recovery1\.[A-Za-z0-9_-]{43}", text)
        await landed(page, name, width, shot=name == "e2e-account", focus=recovery)
        await page.reload()  # shown once
        await expect(page.get_by_role("region", name="Kunci pemulihan")).to_have_count(0)
        await expect(page.get_by_text("Status: terbuka di peramban ini.")).to_be_visible()
        return text

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {INSECURE_HOST} 127.0.0.1"])
        try:
            for width in WIDTHS:
                viewport = {"width": width, "height": 844 if width < 768 else 900}
                context = await browser.new_context(bypass_csp=True, viewport=viewport,
                                                    accept_downloads=True)
                page = await context.new_page()
                page.on("dialog", lambda dialog: dialog.accept())
                owner = await api.register(f"e2e_owner_{width}")
                member = await api.register(f"e2e_member_{width}")
                slug, team_name = f"rahasia-{width}", f"Rahasia {width}"
                v1, v2 = f"postgres://app:v1-{width}@db/app", f"postgres://app:v2-{width}@db/app"
                imported = {"IMPORTED_A": f"alpha-{width}", "IMPORTED_B": f"beta gamma {width}"}
                plain = [v1, v2, *imported.values()]

                # 1. Keys: the passphrase may not be the sign-in password; the recovery key once.
                await sign_in(page, base, owner["username"])
                await set_up_keys(page, "e2e-account", width)
                await no_plaintext(database_url, [PASSPHRASE])

                # 2. An end-to-end team, its key made and wrapped here.
                await page.get_by_role("link", name="Tim", exact=True).click()
                await page.get_by_label("Nama tim").fill(team_name)
                await page.get_by_label("Slug").fill(slug)
                await page.get_by_label("End-to-end").check()
                await page.get_by_role("button", name="Buat tim").click()
                await flash(page, "Tim dibuat.")
                await expect(page.locator("#e2e-notice")).to_be_hidden()
                team_id = await page.locator("#e2e-context").get_attribute("data-team-id")
                assert team_id
                # format 2: the creator's wrap carries its auth; the page stored the anchor of
                # version 1 (made at creation) on the server
                wraps = await query(database_url, "SELECT auth FROM team_key_wraps WHERE "
                                    "team_id = %s", (team_id,))
                assert [bool(w["auth"]) for w in wraps] == [True]
                await wait_for_anchor(database_url, team_id)

                # 3. A secret, sealed here; revealed (opened here).
                await page.get_by_label("Nama", exact=True).fill("DATABASE_URL")
                await page.get_by_label("Nilai (disegel di peramban ini)").fill(v1)
                await page.get_by_role("button", name="Simpan", exact=True).click()
                await flash(page, "Secret disimpan.")
                await no_plaintext(database_url, plain)
                await page.get_by_role("button", name="Tampilkan nilai DATABASE_URL").click()
                await expect(page.locator("pre[data-secret-value]")).to_have_text(v1)
                await landed(page, "e2e-secrets", width, shot=True)

                # 4. Edit (version 2), then roll back to version 1 in the browser (version 3).
                await page.get_by_role("link", name="DATABASE_URL").click()
                await page.get_by_label("Nilai baru").fill(v2)
                await page.get_by_role("button", name="Simpan perubahan").click()
                await flash(page, "Perubahan secret disimpan.")
                await expect(page.get_by_text("Versi sekarang: 2")).to_be_visible()
                await no_plaintext(database_url, plain)
                await page.get_by_role("button", name="Tampilkan nilai sekarang").click()
                await expect(page.get_by_label("Nilai sekarang")).to_have_text(v2)
                await page.get_by_role("button", name="Tampilkan nilai versi 1").click()
                await expect(page.get_by_label("Nilai versi 1")).to_have_text(v1)
                await landed(page, "e2e-secret", width, shot=True)
                await page.get_by_role("button", name="Kembalikan ke versi 1").click()
                await flash(page, "Perubahan secret disimpan.")
                await expect(page.get_by_text("Versi sekarang: 3")).to_be_visible()
                current = v1

                # 5. A share link: its key only in the #fragment; opened in another context.
                await page.get_by_role("button", name="Tampilkan nilai sekarang").click()
                await expect(page.get_by_label("Nilai sekarang")).to_have_text(current)
                await page.get_by_label("Berapa kali boleh dilihat").fill("3")
                await page.get_by_role("button", name="Buat tautan").click()
                await flash(page, "Tautan berbagi dibuat.")
                shown = page.locator("[data-e2e-share-url]")
                await expect(shown).to_contain_text("#")  # the script appends the key
                link = (await shown.inner_text()).strip()
                assert re.fullmatch(r"http://\S+/share/shr_\S+#[A-Za-z0-9_-]{43}", link), link
                await no_plaintext(database_url, [*plain, link.split("#", 1)[1]])
                other = await browser.new_context(viewport=viewport)
                reader = await other.new_page()
                await reader.goto(link)
                await reader.get_by_role("button", name="Tampilkan secret").click()
                await expect(reader.locator("#secret-value")).to_have_text(current)
                await reader.goto(link.split("#", 1)[0])  # the key cut off: said, not shown
                await reader.get_by_role("button", name="Tampilkan secret").click()
                await expect(reader.get_by_role("alert")).to_contain_text("tidak lengkap")
                await reader.goto(link.replace("127.0.0.1", INSECURE_HOST))  # not HTTPS
                await reader.get_by_role("button", name="Tampilkan secret").click()
                await expect(reader.get_by_role("alert")).to_contain_text("lewat HTTPS")
                await expect(reader.locator("#secret-value")).to_have_text("")
                await other.close()

                # 6. A token made here: its private key appended by the script, read by the SDK
                # code (cvsm.e2e over the API).
                await page.get_by_role("link", name="Token API").click()
                await page.get_by_label("Nama", exact=True).fill(f"deploy {width}")
                await page.get_by_label("Tim", exact=True).select_option(slug)
                await page.get_by_role("button", name="Buat token").click()
                await flash(page, "Token dibuat.")
                await expect(page.locator("[data-secret-value]")).to_have_text(TOKEN_WITH_KEY)
                token = (await page.locator("[data-secret-value]").inner_text()).strip()
                assert TOKEN_WITH_KEY.fullmatch(token)
                assert await page.evaluate("Object.keys(sessionStorage).length") == 0
                assert token.split(".")[1] not in str(await context.cookies())
                await landed(page, "e2e-token", width, shot=True)
                await no_plaintext(database_url, [*plain, token.split(".")[1]])
                assert await read_with_token(client, token, team_id, "DATABASE_URL") == current
                async with cvsm.AsyncClient(token=token, base_url=f"{base}/api/v1", team=slug,
                                            environment="production") as sdk:
                    assert await sdk.get("DATABASE_URL") == current
                    assert token.split(".")[1] not in repr(sdk)

                # 7. Import a .env (parsed and sealed here) and download the export made here.
                await page.get_by_role("link", name="Tim", exact=True).click()
                await page.get_by_role("link", name=team_name, exact=True).click()
                await page.get_by_label("Tempel isi .env").fill(
                    f"IMPORTED_A={imported['IMPORTED_A']}\nnot a line\n"
                    f"IMPORTED_B='{imported['IMPORTED_B']}'\n")
                await page.get_by_role("button", name="Impor").click()
                await flash(page, "Impor .env selesai.")
                await expect(page.get_by_role("status").filter(has_text="Hasil impor")
                             ).to_contain_text("2 dibuat, 1 gagal.")
                await no_plaintext(database_url, plain)
                async with page.expect_download() as download_info:
                    await page.get_by_role("button", name="Unduh production.env").click()
                download = await download_info.value
                assert download.suggested_filename == "production.env"
                assert Path(await download.path()).read_text() == dotenv.render(
                    {"DATABASE_URL": current, **imported})

                # The environments side by side: where each name is, one cell opened here (the
                # server cannot compare values it cannot read, so it does not claim to).
                await page.get_by_role("link", name="Environment berdampingan").click()
                await expect(page.get_by_text("nilai berbeda")).to_have_count(0)
                await page.get_by_role(
                    "button", name="Tampilkan nilai DATABASE_URL di production").click()
                await expect(page.get_by_label("Nilai DATABASE_URL di production")
                             ).to_have_text(current)
                await landed(page, "e2e-environments", width)
                await page.get_by_role("link", name="Kembali ke secret").click()

                # 8. A member added, with keys of their own, granted access; reads in their
                # browser.
                await page.get_by_role("link", name="Anggota").click()
                await page.get_by_label("Email atau username pengguna terdaftar").fill(
                    member["username"])
                await page.get_by_role("button", name="Tambah", exact=True).click()
                await flash(page, "Anggota ditambahkan.")
                theirs = await browser.new_context(bypass_csp=True, viewport=viewport)
                their_page = await theirs.new_page()
                await sign_in(their_page, base, member["username"])
                their_recovery = await set_up_keys(their_page, "e2e-account-member", width)
                await their_page.goto(f"{base}/app/teams/{slug}/secrets")
                await expect(their_page.locator("#e2e-notice")).to_contain_text(
                    "Anda belum diberi akses")
                await expect(their_page.get_by_role(
                    "button", name="Tampilkan nilai DATABASE_URL")).to_be_disabled()
                await page.reload()
                await landed(page, "e2e-members", width, shot=True,
                             focus=page.get_by_role("heading", name=re.compile("Kunci tim")))
                # the member's own page shows the fingerprint computed in their browser; the
                # granting Admin's page the stored one: they agree
                await their_page.get_by_role("link", name="Akun", exact=True).click()
                own = their_page.locator("[data-e2e-own-fingerprint]")
                await expect(own).to_have_text(re.compile(r"^([0-9a-f]{4} ){7}[0-9a-f]{4}$"))
                await expect(page.locator("code").filter(has_text=await own.inner_text())
                             ).to_have_count(1)
                await page.get_by_role("button", name=f"Beri akses ke {member['username']}").click()
                await flash(page, "Akses ke kunci tim diberikan.")
                granted = await query(database_url, "SELECT auth FROM team_key_wraps WHERE "
                                      "team_id = %s AND user_id = %s", (team_id, member["id"]))
                assert granted and granted[0]["auth"]
                await their_page.goto(f"{base}/app/teams/{slug}/secrets")
                await their_page.get_by_role("button", name="Tampilkan nilai DATABASE_URL").click()
                await expect(their_page.locator("pre[data-secret-value]")).to_have_text(current)
                # Signing out forgets the key; the recovery key sets a new passphrase; "Kunci"
                # locks, the passphrase unlocks.
                await their_page.get_by_role("button", name="Keluar", exact=True).click()
                await flash(their_page, "Anda sudah keluar")
                assert await their_page.evaluate("""() => new Promise((resolve) => {
                    const open = indexedDB.open("cvsm-e2e", 1);
                    open.onsuccess = () => {
                      const get = open.result.transaction("keys").objectStore("keys").get("member");
                      get.onsuccess = () => resolve(get.result === undefined);
                    };
                })""")
                await sign_in(their_page, base, member["username"])
                await their_page.goto(f"{base}/app/teams/{slug}/secrets")
                await expect(their_page.locator("#e2e-notice")).to_contain_text("terkunci")
                await their_page.get_by_role("link", name="Akun", exact=True).click()
                await their_page.get_by_label("Passphrase", exact=True).fill("bukan passphrase ini")
                await their_page.get_by_role("button", name="Buka kunci").click()
                await expect(their_page.get_by_text("Passphrase salah.")).to_be_visible()
                await their_page.get_by_role("textbox", name="Kunci pemulihan").fill(their_recovery)
                await their_page.get_by_label("Passphrase baru (minimal 12 karakter)").fill(
                    PASSPHRASE + " baru")
                await their_page.get_by_label("Ulangi passphrase baru").fill(PASSPHRASE + " baru")
                await their_page.get_by_role(
                    "button", name="Pulihkan dengan kunci pemulihan").click()
                await flash(their_page, "Passphrase baru disimpan")
                await expect(their_page.get_by_text("Status: terbuka di peramban ini.")
                             ).to_be_visible()
                await their_page.get_by_role("button", name="Kunci", exact=True).click()
                await expect(their_page.get_by_text("Status: terkunci.")).to_be_visible()
                await their_page.get_by_label("Passphrase", exact=True).fill(PASSPHRASE + " baru")
                await their_page.get_by_role("button", name="Buka kunci").click()
                await expect(their_page.get_by_text("Status: terbuka di peramban ini.")
                             ).to_be_visible()
                await their_page.goto(f"{base}/app/teams/{slug}/secrets")
                await their_page.get_by_role("button", name="Tampilkan nilai DATABASE_URL").click()
                await expect(their_page.locator("pre[data-secret-value]")).to_have_text(current)
                await theirs.close()
                await no_plaintext(database_url, plain)

                # 9. The member removed, the team re-keyed (version 2): the token still reads.
                await page.get_by_role("button", name=f"Keluarkan {member['username']}").click()
                await flash(page, "Anggota dikeluarkan dari tim.")
                await page.get_by_role("button", name="Ganti kunci tim").click()
                # the confirmation lists the recipients with their fingerprints
                listed = page.locator("[data-e2e-rekey-recipients] li")
                await expect(listed).to_have_count(2)  # the owner and the token
                await expect(listed.filter(has_text=f"deploy {width}")).to_have_text(
                    re.compile(r"([0-9a-f]{4} ){7}[0-9a-f]{4}"))
                await page.get_by_role("button", name="Konfirmasi ganti kunci tim").click()
                await flash(page, "Kunci tim diganti")
                await expect(page.get_by_role("heading", name="Kunci tim end-to-end (versi 2)")
                             ).to_be_visible()
                links = await query(database_url, "SELECT key_version FROM team_key_links "
                                    "WHERE team_id = %s", (team_id,))
                assert [r["key_version"] for r in links] == [2]
                new_wraps = await query(database_url, "SELECT auth FROM team_key_wraps WHERE "
                                        "team_id = %s AND key_version = 2", (team_id,))
                assert len(new_wraps) == 2 and all(w["auth"] for w in new_wraps)
                await no_plaintext(database_url, plain)
                assert await read_with_token(client, token, team_id, "DATABASE_URL") == current
                async with cvsm.AsyncClient(token=token, base_url=f"{base}/api/v1", team=slug,
                                            environment="production") as sdk:
                    assert await sdk.get_all() == {"DATABASE_URL": current, **imported}

                # 10. Plain HTTP on another name: not a secure context. Names, the notice, and
                # no value form sends a value.
                insecure = await browser.new_context(bypass_csp=True, viewport=viewport)
                http_page = await insecure.new_page()
                at = f"http://{INSECURE_HOST}:{port}"
                await sign_in(http_page, at, owner["username"])
                await http_page.goto(f"{at}/app/teams/{slug}/secrets")
                assert await http_page.evaluate("window.isSecureContext") is False
                await expect(http_page.get_by_role("link", name="DATABASE_URL")).to_be_visible()
                await expect(http_page.locator("#e2e-notice")).to_contain_text(
                    "tidak dibuka lewat HTTPS")
                await expect(http_page.get_by_role("button", name="Simpan", exact=True)
                             ).to_be_disabled()
                await expect(http_page.get_by_role("button", name="Tampilkan nilai DATABASE_URL")
                             ).to_be_disabled()
                await landed(http_page, "e2e-http", width, shot=True)
                leak = f"not-to-be-sent-{width}"
                await http_page.get_by_label("Nama", exact=True).fill("LEAK_CHECK")
                await http_page.get_by_label("Nilai (disegel di peramban ini)").fill(leak)
                sent = await http_page.evaluate("""() => {
                    const form = document.querySelector("form[data-e2e-create]");
                    return Array.from(new FormData(form).values()).map(String);
                }""")
                assert leak not in sent
                await http_page.evaluate(
                    "() => document.querySelector('form[data-e2e-create]').submit()")
                await expect(http_page.get_by_role("alert")).to_be_visible()  # refused, no 500
                await no_plaintext(database_url, [*plain, leak])
                assert not await query(database_url, "SELECT 1 FROM secrets WHERE name = %s",
                                       ("LEAK_CHECK",))
                await http_page.get_by_role("link", name="Tim", exact=True).click()
                await http_page.get_by_label("Nama tim").fill("Tanpa HTTPS")
                await http_page.get_by_label("Slug").fill(f"tanpa-https-{width}")
                await http_page.get_by_label("End-to-end").check()
                await http_page.get_by_role("button", name="Buat tim").click()
                await expect(http_page.get_by_role("alert")).to_contain_text("HTTPS")
                assert not await query(database_url, "SELECT 1 FROM teams WHERE slug = %s",
                                       (f"tanpa-https-{width}",))
                await insecure.close()
                await context.close()
        finally:
            await browser.close()
    assert not problems, problems



async def signed_in_with_keys(browser: Any, base: str, api: Api, slug: str,
                              value: str) -> tuple[Any, dict, str]:
    """A new owner signed in, their keys set up (the recovery key kept), an end-to-end team
    made and DATABASE_URL = `value` saved in it: (page, owner, recovery key)."""
    from playwright.async_api import expect

    owner = await api.register(f"e2e_{slug.replace('-', '_')}")
    page = await (await browser.new_context(bypass_csp=True)).new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    await page.goto(f"{base}/signin")
    await page.get_by_label("Email atau username").fill(owner["username"])
    await page.get_by_label("Kata sandi").fill(PASSWORD)
    await page.get_by_role("button", name="Masuk").click()
    await page.wait_for_url(f"{base}/app/teams")
    await page.get_by_role("link", name="Akun", exact=True).click()
    await page.get_by_label("Passphrase baru (minimal 12 karakter)").fill(PASSPHRASE)
    await page.get_by_label("Ulangi passphrase").fill(PASSPHRASE)
    await page.get_by_role("button", name="Siapkan kunci end-to-end").click()
    recovery = page.get_by_role("region", name="Kunci pemulihan")
    await expect(recovery).to_be_visible()
    recovery_key = (await recovery.locator("pre").inner_text()).strip()
    await page.get_by_role("link", name="Tim", exact=True).click()
    await page.get_by_label("Nama tim").fill(slug.title())
    await page.get_by_label("Slug").fill(slug)
    await page.get_by_label("End-to-end").check()
    await page.get_by_role("button", name="Buat tim").click()
    await expect(page.get_by_role("status").filter(has_text="Tim dibuat.")).to_have_count(1)
    await page.get_by_label("Nama", exact=True).fill("DATABASE_URL")
    await page.get_by_label("Nilai (disegel di peramban ini)").fill(value)
    await page.get_by_role("button", name="Simpan", exact=True).click()
    await expect(page.get_by_role("status").filter(has_text="Secret disimpan.")).to_have_count(1)
    await page.get_by_role("link", name="DATABASE_URL").click()
    return page, owner, recovery_key


async def anchors(database_url: str, team_id: str) -> int:
    rows = await query(database_url, "SELECT count(*) AS n FROM team_e2e_anchors WHERE "
                       "team_id = %s", (team_id,))
    return rows[0]["n"]


async def wait_for_anchor(database_url: str, team_id: str) -> None:
    """The page stores the member's anchor with a request of its own, after it opened the key."""
    import asyncio

    for _ in range(100):
        if await anchors(database_url, team_id):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("no anchor stored")


def chromium(pw: Any) -> Any:
    return pw.chromium.launch(
        executable_path=str(CHROMIUM),
        args=[*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {INSECURE_HOST} 127.0.0.1"])


async def test_e2e_dashboard_reveals_and_rolls_back_to_a_version_sealed_before_a_rekey(
        client: TestClient, api: Api, database_url: str) -> None:
    """The page carries every wrap the member holds, and each envelope is opened with the key
    of the version it names: after a re-key, version 1 is revealed and rolled back to."""
    require_chromium()
    from playwright.async_api import async_playwright, expect

    base = str(client.make_url("/")).rstrip("/")
    slug, a, b = "rekeyed", "postgres://app:sebelum@db/app", "postgres://app:sesudah@db/app"
    async with async_playwright() as pw:
        browser = await chromium(pw)
        try:
            page, _, _ = await signed_in_with_keys(browser, base, api, slug, a)
            # Version 1 (a) and 2 (b) under key version 1; the re-key seals b as version 3.
            secret_url = page.url
            await page.get_by_label("Nilai baru").fill(b)
            await page.get_by_role("button", name="Simpan perubahan").click()
            await expect(page.get_by_text("Versi sekarang: 2")).to_be_visible()
            await page.goto(f"{base}/app/teams/{slug}/members")
            await page.get_by_role("button", name="Ganti kunci tim").click()
            await page.get_by_role("button", name="Konfirmasi ganti kunci tim").click()
            await expect(page.get_by_role("heading", name="Kunci tim end-to-end (versi 2)")
                         ).to_be_visible()
            await page.goto(secret_url)
            await expect(page.get_by_text("Versi sekarang: 3")).to_be_visible()
            await page.get_by_role("button", name="Tampilkan nilai versi 1").click()
            await expect(page.get_by_label("Nilai versi 1")).to_have_text(a)
            await page.get_by_role("button", name="Kembalikan ke versi 1").click()
            await expect(page.get_by_text("Versi sekarang: 4")).to_be_visible()
            await page.get_by_role("button", name="Tampilkan nilai sekarang").click()
            await expect(page.get_by_label("Nilai sekarang")).to_have_text(a)
            await no_plaintext(database_url, [a, b])
        finally:
            await browser.close()


async def test_e2e_share_without_its_key_or_https_spends_no_view(
        client: TestClient, api: Api, database_url: str) -> None:
    """A share seen once (max_views 1), opened without its #fragment, with a cut one, or over
    plain HTTP: refused before a view is spent; then it opens with the whole link."""
    require_chromium()
    from playwright.async_api import async_playwright, expect

    base = str(client.make_url("/")).rstrip("/")
    value = "postgres://app:sekali@db/app"
    async with async_playwright() as pw:
        browser = await chromium(pw)
        try:
            page, _, _ = await signed_in_with_keys(browser, base, api, "dibagi", value)
            await page.get_by_role("button", name="Tampilkan nilai sekarang").click()
            await expect(page.get_by_label("Nilai sekarang")).to_have_text(value)
            await page.get_by_label("Berapa kali boleh dilihat").fill("1")
            await page.get_by_role("button", name="Buat tautan").click()
            shown = page.locator("[data-e2e-share-url]")
            await expect(shown).to_contain_text("#")
            link = (await shown.inner_text()).strip()
            bare, key = link.split("#", 1)
            reader = await (await browser.new_context()).new_page()
            for address, said in ((bare, "tidak lengkap"), (f"{bare}#{key[:40]}", "tidak lengkap"),
                                  (link.replace("127.0.0.1", INSECURE_HOST), "lewat HTTPS")):
                await reader.goto(address)
                await reader.get_by_role("button", name="Tampilkan secret").click()
                await expect(reader.get_by_role("alert")).to_contain_text(said)
                await expect(reader.locator("#secret-value")).to_have_text("")
            views = await query(database_url, "SELECT view_count FROM secret_shares")
            assert [r["view_count"] for r in views] == [0]
            await reader.goto(link)
            await reader.get_by_role("button", name="Tampilkan secret").click()
            await expect(reader.locator("#secret-value")).to_have_text(value)
        finally:
            await browser.close()


async def test_e2e_unlock_and_recovery_refuse_a_public_key_not_of_the_private_key(
        client: TestClient, api: Api, database_url: str) -> None:
    """The public key kept with the opened private key is derived from it: when the server's
    differs, unlock and recovery refuse (the key stays locked, the wrap unchanged)."""
    require_chromium()
    from playwright.async_api import async_playwright, expect

    base = str(client.make_url("/")).rstrip("/")
    async with async_playwright() as pw:
        browser = await chromium(pw)
        try:
            page, owner, recovery_key = await signed_in_with_keys(
                browser, base, api, "ditukar", "postgres://app:kunci@db/app")
            await page.get_by_role("link", name="Akun", exact=True).click()
            await page.get_by_role("button", name="Kunci", exact=True).click()
            await expect(page.get_by_text("Status: terkunci.")).to_be_visible()
            await query(database_url, "UPDATE user_e2e_keys SET public_key = %s WHERE user_id = %s",
                        (bytes(range(32)), owner["id"]))
            await page.reload()
            await page.get_by_label("Passphrase", exact=True).fill(PASSPHRASE)
            await page.get_by_role("button", name="Buka kunci").click()
            await expect(page.get_by_text("tidak cocok dengan kunci privat")).to_be_visible()
            await expect(page.get_by_text("Status: terkunci.")).to_be_visible()
            stored = "SELECT wrapped_private_key FROM user_e2e_keys WHERE user_id = %s"
            wrapped = await query(database_url, stored, (owner["id"],))
            await page.get_by_role("textbox", name="Kunci pemulihan").fill(recovery_key)
            await page.get_by_label("Passphrase baru (minimal 12 karakter)").fill(
                PASSPHRASE + " baru")
            await page.get_by_label("Ulangi passphrase baru").fill(PASSPHRASE + " baru")
            await page.get_by_role("button", name="Pulihkan dengan kunci pemulihan").click()
            await expect(page.get_by_role("alert").filter(has_text="tidak cocok dengan kunci")
                         ).to_be_visible()
            await expect(page.get_by_text("Status: terkunci.")).to_be_visible()
            assert await query(database_url, stored, (owner["id"],)) == wrapped
        finally:
            await browser.close()


async def test_e2e_dashboard_refuses_an_unauthenticated_recipient_and_a_key_off_its_anchor(
        client: TestClient, api: Api, database_url: str) -> None:
    """Format 2 in the dashboard: the re-key refuses a recipient whose auth does not check (here
    the server dropped it) before wrapping anything; a team key the server substituted in the
    member's wrap does not chain to the anchor the page stored at its first open, so no value is
    opened or sealed."""
    require_chromium()
    from playwright.async_api import async_playwright, expect

    base = str(client.make_url("/")).rstrip("/")
    slug = "dijangkar"
    async with async_playwright() as pw:
        browser = await chromium(pw)
        try:
            page, owner, _ = await signed_in_with_keys(browser, base, api, slug,
                                                       "postgres://app:jangkar@db/app")
            team_id = await page.locator("#e2e-context").get_attribute("data-team-id")
            await wait_for_anchor(database_url, team_id)
            await query(database_url, "UPDATE team_key_wraps SET auth = NULL WHERE team_id = %s",
                        (team_id,))
            await page.goto(f"{base}/app/teams/{slug}/members")
            await page.get_by_role("button", name="Ganti kunci tim").click()
            await page.get_by_role("button", name="Konfirmasi ganti kunci tim").click()
            await expect(page.get_by_role("alert").filter(has_text="Ganti kunci dibatalkan")
                         ).to_contain_text(owner["username"])
            assert [r["v"] for r in await query(
                database_url, "SELECT max(key_version) AS v FROM team_key_wraps "
                "WHERE team_id = %s", (team_id,))] == [1]

            # The server's own key, wrapped to the owner's stored public key at version 1.
            row = await query(database_url, "SELECT public_key FROM user_e2e_keys "
                              "WHERE user_id = %s", (owner["id"],))
            forged = e2e.wrap_team_key(e2e.new_team_key(), team_id, 1, bytes(row[0]["public_key"]))
            await query(database_url, "UPDATE team_key_wraps SET wrapped_key = %s "
                        "WHERE team_id = %s", (forged, team_id))
            await page.goto(f"{base}/app/teams/{slug}/secrets")
            await expect(page.locator("#e2e-notice")).to_contain_text("tidak tersambung")
            await expect(page.get_by_role("button", name="Tampilkan nilai DATABASE_URL")
                         ).to_be_disabled()
            await expect(page.get_by_role("button", name="Simpan", exact=True)).to_be_disabled()
        finally:
            await browser.close()
