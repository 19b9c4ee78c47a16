"""The background jobs, in one registry (`JOBS`): what runs beside the server, how often, and
what each logs. `app._background_jobs` starts every job as a task on the process that runs them
(`CVSM_BACKGROUND_JOBS`) and cancels them at shutdown.

Three kinds:
- `Periodic`: a step run every `interval` seconds (at start-up, then after each wait, or after
  the first wait with `at_start=False`). A failing step is logged on the job's logger through
  `db.OutageLog` (a database outage once, and once when it is back) and the job goes on; what
  the step returns, when it is a count above zero, is logged with `done`.
- `Queue`: a PostgreSQL-backed queue's sender (`queues.QueueWorker`: mail, webhook deliveries,
  rotation runs), which wakes on its channel's `NOTIFY` and restarts itself on failure.
- `Loop`: a job with a schedule of its own (the audit checkpoints: due from the last one the
  database stored, `audit_chain.checkpoint_loop`).

A new background job is one entry here: a domain function that takes the pool (and what
`Context` holds), a name, an interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..audit import log as audit, chain as audit_chain, watch as audit_watch
from .. import db
from ..accounts import deletion
from ..billing import service as billing
from ..mail import sender as mail_sender, tokens as mailtokens
from ..db import queues
from ..accounts import ratelimit
from ..outbound import rotation as rotation_runner
from ..accounts import sessions, tokens
from ..outbound import webhooks as webhook_sender
from ..core.config import Settings
from ..crypto.sealing import Keyring


@dataclass(frozen=True)
class Context:
    """What the jobs are built from."""
    pool: db.Pool
    keyring: Keyring
    settings: Settings
    checkpoints: audit_chain.CheckpointSigner


@dataclass(frozen=True)
class Periodic:
    name: str
    interval: Callable[[Settings], float]
    step: Callable[[Context], Awaitable[Any]]
    logger: str
    label: str  # the job in its log lines ("<label> failed", "<label>: the database is back")
    done: str | None = None  # the log line (with the count) when a step did something
    at_start: bool = True

    async def run(self, context: Context) -> None:
        log = logging.getLogger(self.logger)
        outage = db.OutageLog(log, self.label)
        interval = self.interval(context.settings)
        if not self.at_start:
            await asyncio.sleep(interval)
        while True:
            try:
                result = await self.step(context)
                if self.done and isinstance(result, int) and result:
                    log.info(self.done, result)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                outage.failed(exc)
            else:
                outage.ok()
            await asyncio.sleep(interval)


@dataclass(frozen=True)
class Queue:
    name: str
    worker: Callable[[Context], queues.QueueWorker]

    async def run(self, context: Context) -> None:
        await self.worker(context).run()


@dataclass(frozen=True)
class Loop:
    name: str
    loop: Callable[[Context], Awaitable[None]]

    async def run(self, context: Context) -> None:
        await self.loop(context)


Job = Periodic | Queue | Loop

HOUSEKEEPING_SECONDS = 600.0
AUDIT_PURGE_SECONDS = 3600.0


async def housekeeping(context: Context) -> None:
    """Expired sessions, old rate-limit windows, token failures, used mail links, finished
    webhook deliveries."""
    pool = context.pool
    await sessions.purge_expired(pool)
    await ratelimit.purge_old_windows(pool)
    await tokens.purge_old_failures(pool)
    await mailtokens.purge_old(pool)
    await webhook_sender.purge_finished(pool)


BILLING_GRACE_SECONDS = 3600.0


async def billing_grace(context: Context) -> int:
    """While billing is on: teams past due for the grace period fall to Starter."""
    if context.settings.billing is None:
        return 0
    async with db.connection(context.pool) as conn:
        return await billing.expire_grace(conn, grace_days=context.settings.billing_grace_days)


JOBS: tuple[Job, ...] = (
    Periodic("audit_purge", lambda s: AUDIT_PURGE_SECONDS,
             lambda c: audit.purge_expired(c.pool, c.checkpoints, c.settings.audit_archive_dir),
             "cvsm.audit",
             label="audit retention purge",
             done="audit retention purge removed %d entries"),
    Periodic("housekeeping", lambda s: HOUSEKEEPING_SECONDS, housekeeping, "cvsm.app",
             label="housekeeping"),
    Queue("mail", lambda c: mail_sender.MailSender(
        c.pool, c.keyring, mail_sender.transport_for(c.settings),
        poll_seconds=c.settings.mail_poll_seconds)),
    Periodic("account_deletion", lambda s: deletion.PURGE_INTERVAL,
             lambda c: deletion.purge_due(c.pool, datetime.now(timezone.utc)), "cvsm.deletion",
             label="account deletion job"),
    Loop("audit_checkpoint", lambda c: audit_chain.checkpoint_loop(
        c.pool, c.checkpoints, c.settings.audit_checkpoint_seconds)),
    Periodic("audit_seal", lambda s: s.audit_seal_seconds,
             lambda c: audit_chain.seal_pending(c.pool), "cvsm.audit",
             label="audit sealing job", at_start=False),
    Periodic("audit_verify", lambda s: audit_watch.VERIFY_SECONDS,
             lambda c: audit_watch.verify_since_last_run(c.pool, c.checkpoints), "cvsm.audit",
             label="audit verify job", at_start=False),
    Queue("webhooks", lambda c: webhook_sender.WebhookSender(
        c.pool, c.keyring, allow_private=c.settings.webhook_allow_private,
        poll_seconds=c.settings.webhook_poll_seconds)),
    Queue("rotation", lambda c: rotation_runner.RotationWorker(
        c.pool, c.keyring, allow_private=c.settings.webhook_allow_private,
        poll_seconds=c.settings.rotation_poll_seconds)),
    Periodic("billing_grace", lambda s: BILLING_GRACE_SECONDS, billing_grace, "cvsm.billing",
             label="billing grace job",
             done="billing grace job put %d past-due teams on Starter"),
)


def start(context: Context, jobs: tuple[Job, ...] = JOBS) -> list[asyncio.Task]:
    """Every job as a task named after it."""
    return [asyncio.create_task(job.run(context), name=f"cvsm-job-{job.name}") for job in jobs]
