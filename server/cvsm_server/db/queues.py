"""The loop every PostgreSQL-backed queue runs in the background (mail, webhook deliveries):
deliver what is due, then sleep until a `NOTIFY` on the queue's channel (a commit that queued
something, on any server process), the next retry falls due, or the poll interval passes,
whichever comes first. A failure of the loop itself is logged and the loop starts again after
the poll interval; while the database is away, one line when it goes and one when it is back
(`db.OutageLog`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .. import db


class QueueWorker:
    """Subclasses set `channel`, `name` and `next_due_sql` (one row, `seconds` until the earliest
    pending item is due, or NULL) and implement `deliver_due`."""

    channel: str
    name: str
    next_due_sql: str

    def __init__(self, pool: db.Pool, *, poll_seconds: float = 30.0) -> None:
        self.pool = pool
        self.poll_seconds = poll_seconds
        self.log = logging.getLogger(f"cvsm.{self.name}")

    async def deliver_due(self) -> int:
        """Deliver everything due now; how many went out."""
        raise NotImplementedError

    async def run(self) -> None:
        outage = db.OutageLog(self.log, f"{self.name} sender")
        while True:
            try:
                async with self.pool.acquire() as listener:
                    async with listener.cursor() as cur:
                        await cur.execute(f"LISTEN {self.channel}")
                    outage.ok()
                    await self._serve(listener)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                outage.failed(exc)
                await asyncio.sleep(self.poll_seconds)

    async def _serve(self, listener: Any) -> None:
        while True:
            await self.deliver_due()
            wait = self.poll_seconds
            async with db.cursor(self.pool) as cur:
                due = await db.fetchone(cur, self.next_due_sql)
            if due and due["seconds"] is not None:
                wait = max(0.05, min(wait, float(due["seconds"])))
            try:
                await asyncio.wait_for(listener.notifies.get(), wait)
            except asyncio.TimeoutError:
                pass
            while not listener.notifies.empty():  # one pass serves every wake-up so far
                listener.notifies.get_nowait()
