"""End-to-end teams in a real browser (Debian's Chromium through Playwright).

The cryptography: `static/e2e.js`, loaded by a page of the test server under its own strict CSP
(script files only, no inline script, no eval), opens every entry of
conformance/vectors/e2e.json (wraps, values and the refusals, passphrase and recovery wraps, the
share, the token and the bad tokens), and what it seals or wraps opens with the Python
reference `cvsm.e2e`, and the other way round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from cvsm import e2e
from test_docs_page import CHROMIUM, CHROMIUM_ARGS, require_chromium

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
    await E.openPassphraseWrap(v.passphrase.wrapped, v.passphrase.passphrase + " ", v.passphrase.user_id);
    out.wrong_passphrase = "opened";
  } catch (e) { out.wrong_passphrase = e.name; }
  out.recovery = E.b64u(await E.openRecoveryWrap(v.recovery.wrapped,
    E.parseRecoveryKey(v.recovery.recovery_key), v.recovery.user_id));
  out.share = await E.openShare(v.share.envelope, E.unb64u(v.share.share_key, 32));
  const split = E.splitToken(v.token.token);
  out.token = {api_token: split.apiToken, private_key: E.b64u(split.privateKey),
               joined: E.joinToken(split.apiToken, split.privateKey)};
  for (const bad of v.bad_tokens) {
    try { E.splitToken(bad); out.badTokens.push("accepted"); }
    catch (e) { out.badTokens.push(e.name + ": " + e.message); }
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
    passphrase_wrap: await E.wrapPrivateKeyWithPassphrase(member.privateKey, "kuda laut", v.user_id),
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
            assert opened["token"] == {**{k: VECTORS["token"][k] for k in ("api_token",
                                                                         "private_key")},
                                       "joined": VECTORS["token"]["token"]}
            assert len(opened["badTokens"]) == len(VECTORS["bad_tokens"])
            assert all(t.startswith("E2EError: ") for t in opened["badTokens"])
            assert not any(VECTORS["token"]["private_key"] in t for t in opened["badTokens"])

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
    from cvsm_server import dotenv

    return [{"line": e.line, "name": e.name, **({"error": e.error} if e.error else
                                                  {"value": e.value})}
            for e in dotenv.parse(content)]


async def test_e2e_dotenv_js_reads_and_writes_as_the_server_does(client: TestClient) -> None:
    require_chromium()
    import random

    from playwright.async_api import async_playwright

    from cvsm_server import dotenv

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
