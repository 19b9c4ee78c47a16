"""The background jobs' registry (`jobs.JOBS`): each job's name and interval, and what a
periodic job does with a failing step (logs it and goes on)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from cvsm_server.accounts import deletion
from cvsm_server.runtime import jobs
from cvsm_server.core.config import Settings


def test_one_registry_names_every_job_with_its_interval(make_settings: Any) -> None:
    settings: Settings = make_settings(audit_seal_seconds="2")
    names = [job.name for job in jobs.JOBS]
    assert names == ["audit_purge", "housekeeping", "mail", "account_deletion",
                     "audit_checkpoint", "audit_seal", "audit_verify", "webhooks",
                     "rotation", "billing_grace"]
    periodic = {job.name: job for job in jobs.JOBS if isinstance(job, jobs.Periodic)}
    intervals = {name: job.interval(settings) for name, job in periodic.items()}
    assert intervals == {"audit_purge": 3600.0, "housekeeping": 600.0,
                         "account_deletion": deletion.PURGE_INTERVAL, "audit_seal": 2.0,
                         "audit_verify": 3600.0, "billing_grace": 3600.0}
    assert [n for n, job in periodic.items() if not job.at_start] == ["audit_seal",
                                                                      "audit_verify"]


async def test_a_failing_step_is_logged_and_the_job_goes_on(
        make_settings: Any, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    async def step(context: Any) -> int:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return 3

    job = jobs.Periodic("test", lambda s: 0.01, step, "cvsm.test", label="test job",
                        done="test job did %d")
    context = jobs.Context(None, None, make_settings(), None)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="cvsm.test"):
        task = asyncio.create_task(job.run(context))
        while len(calls) < 3:
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    messages = [r.getMessage() for r in caplog.records if r.name == "cvsm.test"]
    assert messages[0] == "test job failed" and "test job did 3" in messages[1:]
