"""Mail: queued with the action, sealed at rest, delivered by the background sender through a
real SMTP server (aiosmtpd), retried while SMTP is down, and written to the outbox without SMTP."""

from __future__ import annotations

import asyncio
import base64
import email
import email.policy
import logging
import stat

from conftest import MASTER_KEY, query
from smtpbox import Mailbox, link_in, text_of

from cvsm_server import db
from cvsm_server.mail import messages as mail, sender as mail_sender, tokens as mailtokens
from cvsm_server.core.config import Settings
from cvsm_server.crypto.sealing import Keyring


def keyring() -> Keyring:
    return Keyring(base64.b64decode(MASTER_KEY))


async def queue_one(database_url: str, to: str, link: str, token: str) -> None:
    pool = await db.create_pool(database_url, maxsize=1)
    try:
        async with db.pool_transaction(pool) as cur:
            await mail.send(cur, keyring(), "verify_email", "verify_email", to,
                            {"name": "Ana", "link": link, "app_url": "https://cvsm.test"},
                            tokens=(token,))
    finally:
        pool.close()
        await pool.wait_closed()


async def test_queued_mail_is_sealed_and_delivered_over_smtp(start_client, make_settings, mailbox,
                                                             database_url) -> None:
    token = mailtokens.generate()
    link = f"https://cvsm.test/verify-email?token={token}"
    await queue_one(database_url, "ana@example.com", link, token)
    [row] = await query(database_url, "SELECT * FROM mail_outbox")
    assert token.encode() not in bytes(row["ciphertext"])
    assert row["recipient"] == "ana@example.com"
    await start_client(make_settings(smtp_url=mailbox.url, background_jobs="on"))
    message = await mailbox.receive("ana@example.com")
    assert message["Subject"] == "Verifikasi alamat email Anda"
    assert link_in(message, "/verify-email") == link
    assert link in message.get_body(preferencelist=("html",)).get_content()
    assert message["From"] == "cvsm <no-reply@localhost>"
    for _ in range(100):  # the row goes once delivered
        if not await query(database_url, "SELECT id FROM mail_outbox"):
            break
        await asyncio.sleep(0.02)
    assert await query(database_url, "SELECT id FROM mail_outbox") == []


async def test_smtp_down_delays_the_mail_and_loses_nothing(start_client, make_settings,
                                                           database_url, caplog) -> None:
    down = Mailbox()  # a port with nothing listening yet
    await start_client(make_settings(smtp_url=down.url, background_jobs="on",
                                     mail_poll_seconds="0.2"))
    token = mailtokens.generate()
    with caplog.at_level(logging.WARNING, logger="cvsm.mail"):
        await queue_one(database_url, "budi@example.com", f"https://cvsm.test/x?token={token}", token)
        for _ in range(200):
            rows = await query(database_url, "SELECT attempts, last_error FROM mail_outbox")
            if rows and rows[0]["attempts"] >= 1 and rows[0]["last_error"]:
                break
            await asyncio.sleep(0.02)
    assert rows[0]["attempts"] == 1 and rows[0]["last_error"]
    assert token not in caplog.text
    down.start()  # SMTP is back; the retry is due (the clock moved on)
    try:
        await query(database_url, "UPDATE mail_outbox SET next_attempt_at = now() RETURNING id")
        message = await down.receive("budi@example.com")
        assert token in text_of(message)
    finally:
        down.stop()


async def test_without_smtp_mail_goes_to_the_outbox_and_the_log_has_no_token(
        start_client, make_settings, database_url, tmp_path, caplog) -> None:
    settings: Settings = make_settings(background_jobs="on")
    token = mailtokens.generate()
    with caplog.at_level(logging.INFO, logger="cvsm.mail"):
        await queue_one(database_url, "cici@example.com", f"https://cvsm.test/v?token={token}", token)
        await start_client(settings)
        outbox = settings.outbox_dir
        for _ in range(200):
            files = sorted(outbox.glob("*.eml")) if outbox.exists() else []
            # The file is written before its log line: wait for both.
            if files and "written to" in caplog.text:
                break
            await asyncio.sleep(0.02)
    [path] = files
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
    assert message["To"] == "cici@example.com"
    assert token in text_of(message)
    assert "https://cvsm.test/v?token=[token]" in caplog.text
    assert token not in caplog.text


def test_message_and_transport_reprs_hold_no_secret() -> None:
    message = mail.render("verify_email", "d@example.com",
                          {"name": "D", "link": "https://x/?token=abcdefghijklmnopq", "app_url": "https://x"},
                          tokens=("abcdefghijklmnopq",))
    assert "abcdefghijklmnopq" not in repr(message)
    transport = mail_sender.SmtpTransport("smtp://user:hunter2secret@127.0.0.1:2525", "a@b")
    assert "hunter2secret" not in repr(transport)
    settings = Settings.from_env({"CVSM_SMTP_URL": "smtp://u:hunter2secret@h:25",
                                  "CVSM_MASTER_KEY": MASTER_KEY, "CVSM_JWT_SECRET": "s" * 40,
                                  "CVSM_OAUTH_ACME_CLIENT_ID": "id",
                                  "CVSM_OAUTH_ACME_CLIENT_SECRET": "oauth-secret-value",
                                  "CVSM_OAUTH_ACME_ISSUER": "https://idp.example"})
    for secret in ("hunter2secret", "oauth-secret-value", "s" * 40, MASTER_KEY):
        assert secret not in repr(settings)
    assert settings.oauth_providers["acme"].issuer == "https://idp.example"


async def test_due_mail_is_delivered_in_the_order_it_was_queued(database_url) -> None:
    """One batch of the sender delivers what it took in queue order (its UPDATE ... RETURNING
    gives the rows in no particular order)."""
    tokens = [mailtokens.generate() for _ in range(12)]
    for n, token in enumerate(tokens):  # each in its own transaction, as requests queue them
        await queue_one(database_url, f"urut{n}@example.com",
                        f"https://cvsm.test/v?token={token}", token)
    delivered: list[str] = []

    class Recorder:
        async def deliver(self, message: mail.Message, mail_id: object) -> None:
            delivered.append(next(t for t in tokens if t in message.text))

    pool = await db.create_pool(database_url, maxsize=2)
    try:
        assert await mail_sender.deliver_due(pool, keyring(), Recorder()) == len(tokens)
    finally:
        pool.close()
        await pool.wait_closed()
    assert delivered == tokens
