"""The instance's own settings, chosen in its pages rather than in the environment (migration
0034, one row): the plan new teams get.

Which plan a new team gets: the one chosen here (by the first admin on the set-up page, or later
in the admin panel), else the operator's `CVSM_DEFAULT_PLAN`, else Starter. The set-up page
offers the choice on a self-hosted server (billing off) with `suggested_plan` preselected:
the operator's `CVSM_DEFAULT_PLAN` when set, else Professional (the server is its operator's own;
Starter's one environment is for a managed server, where teams pay for more).
"""

from __future__ import annotations

from ..audit import log as audit
from .. import db
from ..core.actor import Actor
from ..core.config import PLAN_NAMES
from ..core.errors import BadRequest

STARTER = "starter"
SELF_HOSTED_PLAN = "professional"
PLAN_INVALID = "Paket untuk tim baru harus salah satu dari starter, professional, enterprise"


def check_plan(plan: object) -> str:
    """`plan` when it names a plan; 400 otherwise."""
    if not isinstance(plan, str) or plan not in PLAN_NAMES:
        raise BadRequest(PLAN_INVALID)
    return plan


def suggested_plan(configured: str | None) -> str:
    """What the set-up page preselects: the operator's `CVSM_DEFAULT_PLAN` when set, else
    Professional (a self-hosted server)."""
    return configured or SELF_HOSTED_PLAN


async def stored_default_plan(cur: db.Cursor) -> str | None:
    """The plan chosen for new teams; None while none was chosen."""
    row = await db.fetchone(cur, "SELECT default_plan FROM instance_settings")
    return None if row is None else row["default_plan"]


async def default_plan(cur: db.Cursor, configured: str | None) -> str:
    """The plan a team created now gets: the chosen one, else `configured` (the operator's
    `CVSM_DEFAULT_PLAN`), else Starter."""
    return await stored_default_plan(cur) or configured or STARTER


async def store_default_plan(cur: db.Cursor, actor: Actor, plan: str, **extra: str) -> None:
    """Choose `plan` for new teams (in the caller's transaction, whose actor may do so),
    audited as `default_plan_change` with `{from, to}` (and `extra`: `via`)."""
    check_plan(plan)
    before = await db.fetchone(cur, "SELECT default_plan FROM instance_settings FOR UPDATE")
    previous = None if before is None else before["default_plan"]
    await cur.execute(
        """INSERT INTO instance_settings (id, default_plan) VALUES (true, %s)
           ON CONFLICT (id) DO UPDATE SET default_plan = EXCLUDED.default_plan, updated_at = now()""",
        (plan,))
    if previous != plan:
        await audit.record(cur, actor, "default_plan_change", "instance",
                           metadata={"from": previous, "to": plan, **extra})
