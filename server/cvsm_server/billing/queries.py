"""The billing tables' SQL (migration 0028): a team's Stripe side (`team_billing`), the webhook
events applied (`billing_events`), and a plan change made by billing (`change_plan`)."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from datetime import datetime

from .. import db
from ..audit import log as audit
from ..core.actor import Actor
from ..teams.service import PLANS
from .rules import Subscription


async def billing_row(cur: db.Cursor, team_id: uuid.UUID, *, lock: bool = False) -> dict | None:
    return await db.fetchone(
        cur, "SELECT * FROM team_billing WHERE team_id = %s" + (" FOR UPDATE" if lock else ""),
        (team_id,))


async def states(cur: db.Cursor, team_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, dict]:
    """The billing rows of these teams (those that have one), by team id: for lists."""
    rows = await db.fetchall(cur, "SELECT * FROM team_billing WHERE team_id = ANY(%s::uuid[])",
                             ([str(t) for t in team_ids],))
    return {row["team_id"]: row for row in rows}


async def add_customer(cur: db.Cursor, team_id: uuid.UUID, customer_id: str) -> dict:
    """Keep the team's Customer; the one kept first wins (two checkouts at once)."""
    await cur.execute(
        """INSERT INTO team_billing (team_id, customer_id) VALUES (%s, %s)
           ON CONFLICT (team_id) DO NOTHING""", (team_id, customer_id))
    row = await billing_row(cur, team_id)
    assert row is not None
    return row


async def team_of_customer(cur: db.Cursor, customer_id: str) -> uuid.UUID | None:
    row = await db.fetchone(cur, "SELECT team_id FROM team_billing WHERE customer_id = %s",
                            (customer_id,))
    return None if row is None else row["team_id"]


async def event_seen(cur: db.Cursor, event_id: str) -> bool:
    return await db.fetchone(cur, "SELECT 1 FROM billing_events WHERE id = %s",
                             (event_id,)) is not None


async def claim_event(cur: db.Cursor, event_id: str, event_type: str,
                      team_id: uuid.UUID | None) -> bool:
    """Store the event's id; False when it was stored before (a replay: apply nothing)."""
    row = await db.fetchone(
        cur, """INSERT INTO billing_events (id, type, team_id) VALUES (%s, %s, %s)
                ON CONFLICT (id) DO NOTHING RETURNING id""", (event_id, event_type, team_id))
    return row is not None


async def save_subscription(cur: db.Cursor, team_id: uuid.UUID, sub: Subscription,
                            past_due_since: datetime | None) -> None:
    await cur.execute(
        """UPDATE team_billing SET subscription_id = %s, price_id = %s, status = %s,
                  current_period_end = %s, cancel_at_period_end = %s, past_due_since = %s,
                  updated_at = now()
           WHERE team_id = %s""",
        (sub.id, sub.price_id, sub.status, sub.current_period_end, sub.cancel_at_period_end,
         past_due_since, team_id))


async def lock_team(cur: db.Cursor, team_id: uuid.UUID) -> dict | None:
    return await db.fetchone(
        cur, "SELECT id, slug, name, plan, max_secrets, max_members FROM teams WHERE id = %s "
             "FOR NO KEY UPDATE", (team_id,))


async def past_due_teams(cur: db.Cursor, before: datetime) -> list[dict]:
    """Teams whose subscription has been past due since before `before` and whose plan is not
    Starter yet, locked (others skip them)."""
    return await db.fetchall(
        cur, """SELECT t.id, t.slug, t.name, t.plan, t.max_secrets, t.max_members, b.status
                FROM team_billing b JOIN teams t ON t.id = b.team_id
                WHERE b.past_due_since IS NOT NULL AND b.past_due_since <= %s
                  AND b.status IN ('past_due', 'unpaid') AND t.plan <> 'starter'
                ORDER BY b.past_due_since
                FOR NO KEY UPDATE OF t SKIP LOCKED""", (before,))


async def change_plan(cur: db.Cursor, team: Mapping, plan: str, *, status: str | None) -> None:
    """Put the team (its locked row) on `plan` with that plan's quotas; audited as
    `team_plan_change` by billing, which queues the team's `team.plan_changed` event. Nothing
    the team holds is touched: over a lower plan's quotas, only new things are refused."""
    quotas = PLANS[plan]
    await cur.execute("UPDATE teams SET plan = %s, max_secrets = %s, max_members = %s "
                      "WHERE id = %s",
                      (plan, quotas["max_secrets"], quotas["max_members"], team["id"]))
    await audit.record(cur, Actor.system(), "team_plan_change", "team", team_id=team["id"],
                       resource_id=team["id"], metadata={
                           "from": {"plan": team["plan"], "max_secrets": team["max_secrets"],
                                    "max_members": team["max_members"]},
                           "to": {"plan": plan, "max_secrets": quotas["max_secrets"],
                                  "max_members": quotas["max_members"]},
                           "by": "billing", "status": status})
