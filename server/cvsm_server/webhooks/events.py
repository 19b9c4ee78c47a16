"""The webhook outbox, written from the audit insert: `emit` is called by `audit.record` for
every entry, and an action that maps to an event kind (`ACTIONS`) queues one delivery per
matching webhook of the team in the same transaction, so an event exists exactly when its
action committed, and `NOTIFY cvsm_webhooks` wakes the senders (webhook_sender.py) on commit.
The body is the resource's metadata as the audit entry has it: never a secret value.

A leaf under `audit`: it imports neither `audit` nor `webhooks` (which manages the webhooks
themselves and queues its test event with `QUEUE_FOR_WEBHOOK`)."""

from __future__ import annotations

import uuid
from typing import Any

from psycopg2.extras import Json

from .. import db
from ..core.actor import Actor
from ..core.timeutil import iso, now

CHANNEL = "cvsm_webhooks"
PING = "ping"
# The event kinds a webhook may ask for, and the audit actions (action, resource) they come from.
ACTIONS: dict[tuple[str, str], str] = {
    ("create", "secret"): "secret.created",
    ("update", "secret"): "secret.updated",
    ("delete", "secret"): "secret.deleted",
    ("rollback", "secret"): "secret.rolled_back",
    ("rotate", "secret"): "secret.rotated",
    ("rotation_failed", "secret"): "secret.rotation_failed",
    ("bulk_create", "secret"): "secrets.bulk_created",
    ("bulk_delete", "secret"): "secrets.bulk_deleted",
    ("move_env", "secret"): "secrets.moved",
    ("import", "secret"): "secrets.imported",
    ("share_create", "share"): "share.created",
    ("share_view", "share"): "share.viewed",
    ("share_revoke", "share"): "share.revoked",
    ("token_create", "api_token"): "token.created",
    ("token_revoke", "api_token"): "token.revoked",
    ("token_lock", "api_token"): "token.locked",
    ("member_add", "member"): "member.added",
    ("invite_accepted", "invite"): "member.added",
    ("member_remove", "member"): "member.removed",
    ("member_update", "member"): "member.role_changed",
    # a plan change, by an admin or the operator, or by billing (`by: "billing"`)
    ("team_plan_change", "team"): "team.plan_changed",
}
EVENTS: tuple[str, ...] = tuple(dict.fromkeys(ACTIONS.values()))


# --- events -----------------------------------------------------------------------------------

def _actor_json(actor: Actor | None) -> dict | None:
    if actor is None or actor.user_id is None:
        return None
    return {"id": str(actor.user_id), "email": actor.email}


def payload(event_id: uuid.UUID, kind: str, actor: Actor | None, data: dict) -> dict:
    # `team` is added by the statement that queues it (the slug as it is at that moment).
    return {"id": str(event_id), "type": kind, "created_at": iso(now()),
            "actor": _actor_json(actor), "data": data}


_QUEUE = f"""
WITH queued AS (
    INSERT INTO webhook_deliveries (webhook_id, event_id, event_type, payload)
    SELECT w.id, %(event_id)s, %(type)s,
           %(payload)s::jsonb || jsonb_build_object(
               'team', jsonb_build_object('id', t.id::text, 'slug', t.slug))
    FROM webhooks w JOIN teams t ON t.id = w.team_id
    WHERE w.team_id = %(team_id)s AND {{match}}
    RETURNING id
)
SELECT (SELECT id FROM queued LIMIT 1) AS id,
       (SELECT pg_notify('{CHANNEL}', '') FROM queued LIMIT 1) IS NOT NULL AS notified
"""
_QUEUE_FOR_EVENT = _QUEUE.format(match="%(type)s = ANY (w.events)")
QUEUE_FOR_WEBHOOK = _QUEUE.format(match="w.id = %(webhook_id)s")


async def emit(cur: db.Cursor, actor: Actor | None, action: str, resource: str, *,
               team_id: uuid.UUID | None, resource_id: object | None = None,
               metadata: dict[str, Any] | None = None) -> None:
    """Queue the event an audited action stands for, if any, to the team's webhooks that asked
    for it, in the caller's transaction (one statement; none for actions that are no event)."""
    kind = ACTIONS.get((action, resource))
    if kind is None or team_id is None:
        return
    data: dict[str, Any] = dict(metadata or {})
    if action == "invite_accepted":  # a member joined through an invitation
        data.update({"object": "member", "id": str(actor.user_id) if actor and actor.user_id
                     else None, "invite_id": str(resource_id) if resource_id else None})
    else:
        data.update({"object": resource,
                     "id": str(resource_id) if resource_id is not None else None})
    event_id = uuid.uuid4()
    await cur.execute(_QUEUE_FOR_EVENT, {
        "event_id": event_id, "type": kind, "team_id": team_id,
        "payload": Json(payload(event_id, kind, actor, data)),
    })
