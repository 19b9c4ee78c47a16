"""Who is acting: one value built once per request (or by a CLI command or a job) and passed
to every domain function, which never looks at the HTTP request itself.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

USER_AGENT_MAX = 512


def cut_user_agent(agent: str | None) -> str:
    """The user agent as stored everywhere (audit rows, token last use): at most 512 chars."""
    return (agent or "")[:USER_AGENT_MAX]


@dataclass(frozen=True, slots=True)
class Scope:
    """What a scoped API token may reach: one team, some environments, reads only. `None`
    fields do not narrow anything."""

    team_id: uuid.UUID | None = None
    environments: tuple[str, ...] | None = None
    read_only: bool = False

    def allows_team(self, team_id: uuid.UUID) -> bool:
        return self.team_id is None or self.team_id == team_id

    def allows_environment(self, environment: str) -> bool:
        return self.environments is None or environment in self.environments


@dataclass(frozen=True, slots=True)
class Actor:
    """The caller: a user (through a JWT session or an API token) or nobody, with the client
    address and user agent the audit log records.

    `via` is "jwt", "api_token", "anonymous", "mail_link" (someone holding a link mailed to the
    account), "system" (a command run by the operator, or a background job) or "device_flow"
    (the approver of a `cvsm login`, as the terminal's poll mints its token:
    `accounts.device_flow`).
    """

    ip: str | None
    user_agent: str = ""
    user_id: uuid.UUID | None = None
    email: str | None = None
    via: str = "anonymous"
    session_id: uuid.UUID | None = None
    token_id: uuid.UUID | None = None
    # Set when the credential came from this process's cache and is not yet confirmed against
    # the revocation epoch (see credentials.py); the request's first statement confirms it.
    epoch: int | None = None
    # A scoped API token's limits (None: the user's full power).
    scope: Scope | None = None

    @classmethod
    def anonymous(cls, ip: str | None, user_agent: str | None = None) -> Actor:
        return cls(ip=ip, user_agent=cut_user_agent(user_agent))

    @classmethod
    def system(cls) -> Actor:
        return cls(ip=None, user_agent="cvsm-server", via="system")

    def as_user(self, user_id: uuid.UUID, email: str, *, via: str = "jwt",
                session_id: uuid.UUID | None = None, token_id: uuid.UUID | None = None,
                epoch: int | None = None, scope: Scope | None = None) -> Actor:
        """The same client, now known as a user (after login or credential checks)."""
        return Actor(ip=self.ip, user_agent=self.user_agent, user_id=user_id, email=email,
                     via=via, session_id=session_id, token_id=token_id, epoch=epoch, scope=scope)

    @property
    def environments(self) -> list[str] | None:
        """The environments this actor may see (None: all), as an SQL array parameter."""
        return list(self.scope.environments) if self.scope and self.scope.environments else None

    @property
    def rate_key(self) -> str:
        """The key the per-credential API rate limit counts under."""
        return f"token:{self.token_id}" if self.token_id else f"user:{self.user_id}"
