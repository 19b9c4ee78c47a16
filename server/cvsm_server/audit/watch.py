"""The audit verify job (issue 40): every VERIFY_SECONDS, each chain is verified from where the
job's last run ended (the newest checkpoint it had then, signed by this server's key), so a run
reads only what was sealed since, whatever the log's size. Its first run in a process starts at
each chain's newest checkpoint; the whole walk is `cvsm-server audit verify` (docs/operations.md:
now and then, say monthly). A broken chain is logged as an error at each run until it is fixed.
"""

from __future__ import annotations

import logging
import uuid
import weakref

from . import chain as audit_chain
from .. import db

log = logging.getLogger("cvsm.audit")

VERIFY_SECONDS = 3600.0
# pool -> {chain: the checkpoint row its last good run ended at}
_marks: weakref.WeakKeyDictionary[db.Pool, dict[uuid.UUID, dict]] = weakref.WeakKeyDictionary()


async def verify_since_last_run(pool: db.Pool, signer: audit_chain.CheckpointSigner) -> int:
    """One run of the job; returns how many entries it checked (those of broken chains too)."""
    marks = _marks.setdefault(pool, {})
    checked = 0
    async with db.cursor(pool) as cur:
        await audit_chain.seal(cur)
        for chain in await audit_chain.chains(cur):
            chain_id = chain["chain_id"]
            newest = await audit_chain.latest_checkpoint(cur, signer, chain_id)
            since = marks.get(chain_id)
            span = await audit_chain.chain_span(cur, chain_id)
            if since is None or span is None or since["seq"] < span[0]:  # first run, or purged
                since = newest
            verdict = await audit_chain.verify_chain(cur, signer, chain_id, since=since)
            checked += verdict.checked
            if not verdict.ok:
                log.error("audit chain %s is broken at seq %s: %s",
                          chain["slug"] or chain_id, verdict.first_broken["seq"],
                          verdict.first_broken["reason"])
                continue
            if newest is not None:
                marks[chain_id] = newest
    return checked
