"""Schemathesis against the running server and its own document: the app from `create_app` on a
real port, a user with a team and a secret, then `schemathesis run` on `/api/v1/openapi.json`
with the user's JWT. Per operation, a bounded number of derandomized examples (`MAX_EXAMPLES`)
in the examples, coverage, fuzzing and stateful phases, positive and negative data (about 4,900
cases; 2 to 4 minutes on a shared 2-core machine, most of it the fuzzing phase).

The path parameters `team_id` and `secret_id` are the arranged team and secret, so most cases
reach the handlers instead of stopping at 404; `DELETE .../secrets/{secret_id}` gets a secret of
its own, so that deleting it leaves the one every other case (and the stateful phase's links,
which the fixed parameter overrides) reads. `POST /me/logout-all` and `DELETE /teams/{id}`
are left out: they would end the session or the team for every case after them; so is the change
stream (`GET /secrets/changes`), which never ends by itself (test_changes.py covers it, and
test_hostile_pages.py runs Schemathesis on it alone, reading its first event).

Every check runs (`--checks all`), including that schema-valid data is accepted and schema-invalid
data refused. A few operations refuse data no schema can describe, with a 400 the document lists:
a mail-link, invite or newsletter token that is not one the server issued, a time range whose
end is not after its start, a two-factor step out of order. Those are declared in `DECLARED_400`,
each with its reason; for every other operation a 400 to schema-valid data fails the test.
Generated text holds no NUL (the document says text never does: 400).

The stateful phase may follow a created secret with its rotation routes (fixed to the arranged
secret, `path.secret_id`), whose 404 means "this secret has no rotation policy", not "the
secret is gone": those three (`NO_POLICY_404`) are left out of the stateful phase only (a check
cannot be switched off per operation there) and run in every other phase. So is
`delete_secret`: its fixed secret would stand in for the one a link just created."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

MAX_EXAMPLES = 50
CHECKS = "all"
EXCLUDED = ("logout_all", "delete_team", "secret_changes")
# operation id -> why a schema-valid request may still be answered 400
DECLARED_400 = {
    "verify_email": "a token the server did not mail, or one used or expired",
    "reset_password": "a token the server did not mail, or one used or expired",
    "accept_invite": "a token the server did not mail, or one used or expired",
    "confirm": "a newsletter token the server did not mail",
    "unsubscribe": "a newsletter token the server did not mail",
    "export_audit": "`to` not after `from`",
    "totp_enable": "two-factor not set up first",
    "totp_disable": "two-factor not on",
    "request_deletion": "`confirm` from an account that has a password (the account decides "
                        "which of `password` and `confirm` it needs)",
    "admin_update_user": "an admin taking their own admin right or account away",
    "create_token": "`expires_at` not in the future (the clock decides)",
    "set_rotation": "an `admin_secret_id` that is not a secret of this team, an `owner_group` "
                    "that is one of the two roles, or a webhook `url` that DNS refuses",
    "create_webhook": "a URL whose host does not resolve, or only to addresses webhooks may not "
                      "reach (DNS decides)",
    # End-to-end teams (docs/e2e.md): the arranged team is not one, and the team decides.
    "get_team_key": "a team that is not end-to-end",
    "list_e2e_members": "a team that is not end-to-end",
    "grant_e2e_access": "a team that is not end-to-end",
    "rekey_team": "a team that is not end-to-end, or an entry listed twice",
    "get_anchor": "a team that is not end-to-end",
    "put_anchor": "a team that is not end-to-end",
    "set_user_key": "a low-order X25519 public key (the all-zero one among them), which the "
                    "pattern cannot tell from another",
    "create_team": "an `id` without `e2e` (a client-chosen id is for end-to-end teams only)",
    "create_secret": "an `id` for a team that is not end-to-end (the team decides)",
    "create_share": "a `value` for a secret of a team that is not end-to-end (the team decides)",
    "device_token": "a device code the server did not issue: RFC 8628's fixed `error` values",
}
# operations whose 404 is about a sub-resource a new secret has none of (its rotation policy)
NO_POLICY_404 = ["delete_rotation", "get_rotation", "rotate_now"]
# positive_data_acceptance's default statuses, and 400
ACCEPTED = ["2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]


async def test_server_conforms_to_its_openapi_document(client: Any, api: Any, owner: Any,
                                                       team_id: str, tmp_path: Path) -> None:
    secret_id = await api.secret(owner, team_id, "DATABASE_URL", "postgres://x")
    doomed_id = await api.secret(owner, team_id, "TO_BE_DELETED", "x")
    owner_id = owner["id"]
    base = str(client.make_url("/")).rstrip("/")
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        "[parameters]\n"
        f'"path.team_id" = "{team_id}"\n'
        f'"path.secret_id" = "{secret_id}"\n'
        f'"path.user_id" = "{owner_id}"\n'
        "[generation]\n"
        "allow-x00 = false\n"
        "[[operations]]\n"
        f"include-operation-id = {sorted(DECLARED_400)!r}\n"
        f"checks.positive_data_acceptance.expected-statuses = {ACCEPTED!r}\n"
        "[[operations]]\n"
        f"include-operation-id = {NO_POLICY_404!r}\n"
        "phases.stateful.enabled = false\n"
        "[[operations]]\n"
        'include-operation-id = "delete_secret"\n'
        f'parameters = {{"path.secret_id" = "{doomed_id}"}}\n'
        # Its fixed secret overrides the id a stateful link would pass: once an earlier case
        # deleted it, a link from a just-created secret would meet that 404 (ST302).
        "phases.stateful.enabled = false\n"
    )
    args = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(config),
        "run", f"{base}/api/v1/openapi.json", "--url", base,
        "--header", f"Authorization: Bearer {owner['token']}",
        "--checks", CHECKS,
        "--phases", "examples,coverage,fuzzing,stateful",
        "--max-examples", str(MAX_EXAMPLES), "--generation-deterministic",
        "--no-shrink",
        "--workers", "1", "--no-color", "--request-timeout", "30",
        "--report-dir", str(tmp_path / "report"),
        *[arg for name in EXCLUDED for arg in ("--exclude-operation-id", name)],
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "", "NO_COLOR": "1"}
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT, env=env,
                                                cwd=tmp_path)  # its cache stays out of the repo
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=540)
    text = out.decode(errors="replace")
    (tmp_path / "schemathesis.txt").write_text(text)  # the whole report, beside the config
    assert proc.returncode == 0, text[-12000:]
