"""`cvsm-server mail list|show`: the outbox read back with its quoted-printable decoded, links
whole; the README's mail step, run as printed after a real sign-up, gives a link that verifies."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import uuid
from html import escape
from pathlib import Path

import pytest

from cvsm_server.runtime import cli
from cvsm_server.mail import messages as mail, sender as mail_sender, outbox
from cvsm_server.core.config import Settings

from test_cli import CONSOLE_SCRIPT

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_mail_step() -> str:
    """The `sh` block of the README's "Your first hour" that reads the outbox, unindented."""
    section = README.read_text().split("## Your first hour", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^( *)```sh\n(.*?)^\1```", section, re.S | re.M)
    [(indent, block)] = [b for b in blocks if "cvsm-server mail" in b[1]]
    return "\n".join(line.removeprefix(indent) for line in block.splitlines()) + "\n"


async def wait_for_mail(directory: Path, count: int = 1) -> list[Path]:
    for _ in range(500):
        files = sorted(directory.glob("*.eml")) if directory.exists() else []
        if len(files) >= count:
            return files
        await asyncio.sleep(0.02)
    raise AssertionError(f"no mail written to {directory}")


async def test_the_readmes_mail_step_as_printed_gives_a_whole_link_that_verifies_the_sign_up(
        database_url: str, start_client, make_settings, tmp_path: Path) -> None:
    # `database_url` first: set up before the app, so dropped after it stops (its jobs run).
    settings: Settings = make_settings(background_jobs="on", mail_poll_seconds="1")
    client = await start_client(settings)
    resp = await client.post("/api/v1/auth/register", json={
        "email": "first.hour.reader@example.com", "username": "first_hour",
        "password": "correct horse 1", "name": "A self-hoster with a rather long name"})
    assert resp.status == 201
    jwt = (await resp.json())["token"]
    [written] = await wait_for_mail(settings.outbox_dir)
    raw = written.read_text()
    # What the README used to say, `grep -o 'http[^ ]*token=[^ ]*'`, gets the encoded, cut link.
    grepped = re.findall(r"http[^ ]*token=[^ ]*", raw)
    assert grepped and all("=3D" in link for link in grepped)

    checkout = tmp_path / "checkout"  # the block runs where `make serve` leaves `.venv/`
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (checkout / ".venv" / "bin" / "cvsm-server").symlink_to(CONSOLE_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVSM_")}
    env["CVSM_DATA_DIR"] = str(settings.data_dir)
    done = await asyncio.to_thread(
        subprocess.run, ["bash", "-euo", "pipefail", "-c", readme_mail_step()], cwd=checkout,
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    listed, *link_lines = done.stdout.strip().splitlines()
    assert re.fullmatch(r"[0-9a-f]{8}  \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ  first\.hour\.reader@example\.com"
                        r"  Verifikasi alamat email Anda", listed), listed
    [link] = link_lines
    assert re.fullmatch(r"https://cvsm\.test/verify-email\?token=[A-Za-z0-9_-]{43}", link), link

    token = link.split("token=", 1)[1]
    resp = await client.post("/api/v1/auth/verify-email", json={"token": token},
                             headers={"Authorization": f"Bearer {jwt}"})
    assert resp.status == 200, await resp.text()
    me = await (await client.get("/api/v1/me", headers={"Authorization": f"Bearer {jwt}"})).json()
    assert me["email_verified"] is True


def write(directory: Path, mail_id: str, to: str, subject: str, text: str) -> None:
    """A message as the templates make one: each link of the text a link in the HTML."""
    html = outbox.LINK.sub(lambda m: f'<a href="{escape(m[0].rstrip("."))}">buka</a>', text)
    message = mail.Message(to=to, subject=subject, text=text, html=f"<p>{html}</p>")
    mail_sender.OutboxTransport(directory, "cvsm <no-reply@localhost>")._write(message, uuid.UUID(mail_id))


@pytest.fixture
def outbox_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("CVSM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CVSM_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data" / "outbox"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["mail", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_mail_list_and_show_decode_the_outbox_and_fail_in_one_line(
        outbox_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "list") == (0, "", f"cvsm-server: no mail in {outbox_env}\n")
    assert run(capsys, "show", "--last") == (1, "", f"cvsm-server: no mail in {outbox_env}\n")

    long_link = "https://cvsm.example/reset-password?token=" + "x_Y-9" * 12
    write(outbox_env, "aaaa0000-0000-4000-8000-000000000001", "ana@example.com", "Pertama",
          f"Halo,\n\n{long_link}\n\nSalam.\n")
    write(outbox_env, "aaaa1111-0000-4000-8000-000000000002", "budi@example.com", "Kedua ünïcode",
          "Tautan: https://cvsm.example/a?token=abc=def&x=1.\n")
    assert "=3D" in next(outbox_env.glob("*0001.eml")).read_text()  # quoted-printable on disk

    code, out, err = run(capsys, "list")
    assert code == 0 and err == ""
    first, second = out.splitlines()
    assert first.startswith("aaaa0000  ") and first.endswith("  ana@example.com  Pertama")
    assert second.startswith("aaaa1111  ") and second.endswith("  budi@example.com  Kedua ünïcode")

    code, out, err = run(capsys, "show", "aaaa0")
    assert code == 0 and err == ""
    assert out.startswith("From: cvsm <no-reply@localhost>\nTo: ana@example.com\nDate: ")
    assert "Subject: Pertama\n" in out and f"\n\nHalo,\n\n{long_link}\n\nSalam.\n" in out
    assert run(capsys, "show", "--links", "aaaa0000-0000-4000-8000-000000000001") == (0, long_link + "\n", "")
    assert run(capsys, "show", "--last", "--links") == (
        0, "https://cvsm.example/a?token=abc=def&x=1\n", "")  # the sentence's stop is not the link's
    assert run(capsys, "show")[1] == run(capsys, "show", "--last")[1]  # the newest by default

    code, out, err = run(capsys, "show", "aaaa")
    assert (code, out) == (1, "") and err == "cvsm-server: 'aaaa' starts 2 message ids; give more of it\n"
    code, out, err = run(capsys, "show", "bbbb")
    assert (code, out) == (1, "") and err.startswith("cvsm-server: no message 'bbbb' in ")
    assert err.count("\n") == 1
    assert run(capsys, "show", "--last", "aaaa0") == (2, "", "cvsm-server: give an ID or --last, not both\n")
