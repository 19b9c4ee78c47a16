"""Archives of the audit log (issue 40, item 3): one signed JSON-lines file per team (chain) and
UTC month, written before a purge removes the month (`CVSM_AUDIT_ARCHIVE_DIR`) and on demand
(`cvsm-server audit archive`), and verified offline, with no database, by
`cvsm-server audit verify --file F`.

A file, `audit-<chain id>-<YYYY-MM>.jsonl`, is:
* line 1, the header: `{"cvsm_audit_archive": 1, "chain": .., "team": <slug or null>,
  "month": "YYYY-MM", "first_seq": .., "last_seq": .., "entries": ..}`;
* one line per entry, seq `first_seq` to `last_seq` in order (the month's entries of the chain,
  and the few of the next month sealed between them): the entry's canonical document (the
  fields its hash covers, `audit_chain.canonical`, `metadata` as PostgreSQL's jsonb text) plus
  `"hash"`, its hash in hex;
* the last line, the signature: `{"signed": {"chain", "seq", "hash", "kind": "archive",
  "signed_at", "key_id", "public_key", "signature"}}`, the checkpoint key's Ed25519 signature
  (as a checkpoint's, `audit_chain.checkpoint_message`) over the last entry's hash.

Verification recomputes every entry's hash from its line, checks each line links to the one
before (seq + 1, `prev_hash`), that the last one is the signed head, and the signature (against
the public key given, else the file's, whose key id it prints): an edited line fails with its
line number.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from . import chain as audit_chain, months as audit_months
from .. import db

FORMAT = 1
KIND = "archive"
PAGE = 5000

_ENTRIES = f"""SELECT a.id, s.chain_id, s.seq, a.created_at, a.user_email, a.action, a.resource,
                     a.resource_id, a.ip_address, a.user_agent, a.metadata::text AS metadata_text,
                     {audit_chain.link_of("s")} AS prev_hash, s.hash
              FROM (SELECT * FROM audit_seals s
                    WHERE {audit_chain.chain_is("s.chain_id", "%(chain)s")}
                      AND s.seq > %(after)s AND s.seq <= %(last)s
                    ORDER BY s.seq LIMIT %(page)s) s
              CROSS JOIN LATERAL (SELECT * FROM audit_logs a
                                  WHERE a.pos = s.pos AND a.created_at = s.created_at) a
              WINDOW w AS (ORDER BY s.seq)
              ORDER BY s.seq"""
_FIRST = f"""SELECT min(s.seq) AS seq FROM audit_seals s
             WHERE {audit_chain.chain_is("s.chain_id", "%(chain_id)s")}
               AND s.created_at >= %(lo)s AND s.created_at < %(hi)s"""


def file_name(chain_id: uuid.UUID, month: date) -> str:
    return f"audit-{chain_id}-{month.year:04d}-{month.month:02d}.jsonl"


def _line(doc: dict) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"


async def archive_month(cur: db.Cursor, signer: audit_chain.CheckpointSigner, month: date,
                        out_dir: Path, *, team: uuid.UUID | None = None) -> list[Path]:
    """Write the month's file of every chain with entries in it (or only `team`'s); returns
    the files written. Entries not sealed yet are not in them: callers `seal` first."""
    span = audit_months.month_span(month)
    heads = await db.fetchall(cur, audit_months.HEADS, span)
    slugs = {r["id"]: r["slug"] for r in await db.fetchall(
        cur, "SELECT id, slug FROM teams WHERE id = ANY(%s)", ([h["chain_id"] for h in heads],))}
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for head in heads:
        chain = head["chain_id"]
        if team is not None and chain != team:
            continue
        first = (await db.fetchone(cur, _FIRST, {**span, "chain_id": chain}))["seq"]
        last, last_hash = head["seq"], bytes(head["hash"])
        path = out_dir / file_name(chain, month)
        part = path.with_name(path.name + ".part")
        with part.open("w", encoding="utf-8") as out:
            out.write(_line({"cvsm_audit_archive": FORMAT, "chain": str(chain),
                             "team": slugs.get(chain), "month": f"{month:%Y-%m}",
                             "first_seq": first, "last_seq": last,
                             "entries": last - first + 1}))
            after = first - 1
            while after < last:
                rows = await db.fetchall(cur, _ENTRIES, {"chain": chain, "after": after,
                                                         "last": last, "page": PAGE})
                if not rows:
                    raise ValueError(f"audit chain {chain}: entry {after + 1} is missing")
                for row in rows:
                    if row["seq"] != after + 1:
                        raise ValueError(f"audit chain {chain}: entry {after + 1} is missing")
                    if row["prev_hash"] is None:  # its predecessor went without a checkpoint
                        raise ValueError(f"audit chain {chain}: entry {after} is missing")
                    doc = json.loads(audit_chain.canonical(row))
                    doc["hash"] = bytes(row["hash"]).hex()
                    out.write(_line(doc))
                    after = row["seq"]
            signed_at = datetime.now(timezone.utc)
            out.write(_line({"signed": {
                "chain": str(chain), "seq": last, "hash": last_hash.hex(), "kind": KIND,
                "signed_at": audit_chain.utc_micro(signed_at), "key_id": signer.key_id,
                "public_key": signer.public_key.hex(),
                "signature": signer.sign(audit_chain.checkpoint_message(
                    chain, last, last_hash, KIND, signed_at)).hex()}}))
        part.replace(path)
        written.append(path)
    return written


@dataclass
class FileVerdict:
    ok: bool
    entries: int
    line: int | None = None
    reason: str | None = None
    key_id: str | None = None
    header: dict | None = None


def verify_file(path: Path, public_key: bytes | None = None) -> FileVerdict:
    """Check an archive offline (see the module's text)."""
    checked = 0

    def bad(line: int, reason: str) -> FileVerdict:
        return FileVerdict(False, checked, line, reason)

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return bad(0, f"cannot read the file: {exc}")
    docs: list[Any] = []
    for number, text in enumerate(lines, 1):
        try:
            docs.append(json.loads(text))
        except ValueError:
            return bad(number, "not a JSON line")
        if not isinstance(docs[-1], dict):
            return bad(number, "not a JSON object")
    if len(docs) < 3 or docs[0].get("cvsm_audit_archive") != FORMAT:
        return bad(1, "not a cvsm audit archive (header, entries, signature)")
    header, signed = docs[0], docs[-1].get("signed")
    prev: bytes | None = None
    seq: int | None = None
    for number, doc in enumerate(docs[1:-1], 2):
        try:
            recorded = bytes.fromhex(doc.pop("hash"))
            row = {**doc, "chain_id": doc["chain"], "metadata_text": doc["metadata"],
                   "prev_hash": bytes.fromhex(doc["prev_hash"]),
                   "created_at": datetime.strptime(doc["created_at"], "%Y-%m-%dT%H:%M:%S.%fZ")
                   .replace(tzinfo=timezone.utc)}
            digest = audit_chain.entry_hash(row)
            this_seq = int(doc["seq"])
        except (KeyError, TypeError, ValueError, AttributeError):
            return bad(number, "not an audit entry")
        if doc["chain"] != header.get("chain"):
            return bad(number, "an entry of another chain")
        if seq is None and this_seq != header.get("first_seq"):
            return bad(number, f"the first entry is seq {this_seq}, not {header.get('first_seq')}")
        if seq is not None and this_seq != seq + 1:
            return bad(number, f"entry {seq + 1} is missing (seq {this_seq} follows {seq})")
        if prev is not None and row["prev_hash"] != prev:
            return bad(number, "its prev_hash is not the hash of the line before")
        if digest != recorded:
            return bad(number, "its content does not match its hash (edited)")
        prev, seq = digest, this_seq
        checked += 1
    last = len(docs)
    if not isinstance(signed, dict):
        return bad(last, "no signature line")
    try:
        key = bytes.fromhex(signed["public_key"])
        message = audit_chain.checkpoint_message(
            uuid.UUID(signed["chain"]), int(signed["seq"]), bytes.fromhex(signed["hash"]),
            signed["kind"], datetime.strptime(signed["signed_at"], "%Y-%m-%dT%H:%M:%S.%fZ")
            .replace(tzinfo=timezone.utc))
        signature = bytes.fromhex(signed["signature"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return bad(last, "a malformed signature line")
    if public_key is not None and key != public_key:
        return bad(last, f"signed by key {audit_chain.key_id_of(key)}, not by the key given")
    try:
        Ed25519PublicKey.from_public_bytes(key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return bad(last, "the signature is not valid")
    if signed["chain"] != header.get("chain") or signed["kind"] != KIND:
        return bad(last, "the signature is of another chain")
    if int(signed["seq"]) != seq or bytes.fromhex(signed["hash"]) != prev:
        return bad(last, "the signed head is not the last entry (entries removed or edited)")
    if header.get("last_seq") != seq or header.get("entries") != checked:
        return bad(1, "the header does not match the entries")
    return FileVerdict(True, checked, key_id=audit_chain.key_id_of(key), header=header)


async def purge_expired(pool: db.Pool, signer: audit_chain.CheckpointSigner,
                        archive_dir: Path | None = None) -> int:
    """The retention purge (`audit_chain.purge_expired`), each month it drops archived first to
    `archive_dir` when given (CVSM_AUDIT_ARCHIVE_DIR)."""
    async def archive(month: date) -> None:
        async with db.cursor(pool) as cur:
            await archive_month(cur, signer, month, archive_dir)

    return await audit_chain.purge_expired(
        pool, signer, before_drop=archive if archive_dir is not None else None)
