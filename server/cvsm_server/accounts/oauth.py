"""Sign-in through OAuth 2.0 / OpenID Connect providers: the flow, the code exchange, the ID
token check and what the provider's identity becomes here (a signed-in user, a linked identity
or a new account).

- **Providers** come from `Settings.oauth_providers` (`CVSM_OAUTH_<IDP>_*`). One with an issuer
  is a generic OpenID Connect provider: its endpoints come from the issuer's discovery document
  (cached per process for an hour; its `issuer` must equal the configured one) and its ID token is
  verified against the issuer's JWKS (signature, `iss`, `aud`, `exp`, `nonce`). `github` is a
  preset without an issuer: GitHub does PKCE but no ID token, so the user comes from its API and
  only an email GitHub marks `verified` counts.
- **The flow** (`start`) is a row in `oauth_flows`: the `state` only as its HMAC, the PKCE
  verifier (S256) and the nonce, for ten minutes. `callback` deletes the row in the statement that
  finds it, so a replayed or forged state finds nothing; a replayed code fails at the provider.
- **The outcome**: an identity seen before signs its user in; otherwise a provider-verified email
  that matches an account links the identity to it; otherwise a new account without a password
  (subscribed to the newsletter, confirmed: the provider verified the address). An email the
  provider does not call verified never links or creates anything. A flow started by a signed-in
  user (`link_user_id`) attaches the identity to that user instead. A user with two-factor on gets
  no session here: the caller runs the TOTP step (`Outcome.second_factor`).
- **Failures** are one `OAuthFailure` whatever went wrong (provider error, state, nonce,
  signature, unverified email, network); the audit row `oauth_failed` names the reason, never a
  code, token or state.

authlib's httpx client builds the authorization URL and exchanges the code; joserfc verifies the
ID token. Every network call has a timeout.
"""

from __future__ import annotations

import hmac
import re
import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx2 as httpx
from joserfc.errors import JoseError

from ..core.actor import Actor
from ..core.errors import DomainError
from ..core.inputs import one_line
from ..crypto.sealing import Keyring
from ..audit import log as audit
from ..mail import tokens as mailtokens
from .oauth_providers import (GITHUB_SCOPE, Identity, OAuthFailure, OIDC_SCOPE, Providers,
                              fetch_identity, redirect_uri)
from .. import db
from . import sessions, users

FLOW_LIFETIME = timedelta(minutes=10)


@dataclass(frozen=True)
class Outcome:
    """What a callback did: `token` is the new session's JWT (None with `second_factor`, when the
    TOTP step is still due, and for a linking flow)."""

    user_id: uuid.UUID
    token: str | None = None
    second_factor: bool = False
    linked: bool = False
    created: bool = False


# The flow ----------------------------------------------------------------------------------

async def start(conn: db.Connection, client: Actor, providers: Providers, name: str, app_url: str,
                keyring: Keyring, *, link_user_id: uuid.UUID | None = None) -> tuple[str, str]:
    """Begin a sign-in (or, with `link_user_id`, a linking) flow: (the provider's authorization
    URL, the state). The caller binds the state to the browser (a cookie) and redirects."""
    provider = providers.get(name)
    try:
        endpoints = await providers.endpoints(provider)
    except (OAuthFailure, httpx.HTTPError) as exc:
        await _audit_failure(conn, client, name, exc, link_user_id)
        raise OAuthFailure("provider_unreachable", link=link_user_id is not None) from None
    state, verifier, nonce = mailtokens.generate(), secrets.token_urlsafe(48), mailtokens.generate()
    async with db.transaction(conn) as cur:
        await cur.execute("DELETE FROM oauth_flows WHERE expires_at < now()")
        await cur.execute(
            """INSERT INTO oauth_flows (state_hash, provider, code_verifier, nonce, expires_at,
                                        link_user_id)
               VALUES (%s, %s, %s, %s, now() + %s, %s)""",
            (keyring.token_hash(state), name, verifier, nonce, FLOW_LIFETIME, link_user_id),
        )
    oidc = endpoints.issuer is not None
    async with providers.http(client_id=provider.client_id, redirect_uri=redirect_uri(app_url, name),
                              scope=OIDC_SCOPE if oidc else GITHUB_SCOPE,
                              code_challenge_method="S256") as oauth:
        extra = {"nonce": nonce} if oidc else {"allow_signup": "true"}
        url, _ = oauth.create_authorization_url(endpoints.authorization, state=state,
                                                code_verifier=verifier, **extra)
    return url, state


async def callback(conn: db.Connection, client: Actor, providers: Providers, keyring: Keyring,
                   signer: sessions.JwtSigner, name: str, app_url: str, params: Mapping[str, str],
                   *, bound_state: str | None) -> Outcome:
    """Finish a flow from the provider's redirect (`params`: its query). `bound_state` is the
    state this browser started with (its cookie): a callback carried to another browser fails.

    Raises `OAuthFailure` for every failure (audited as `oauth_failed`), `NotFound` for an
    unknown provider."""
    provider = providers.get(name)
    flow = None
    try:
        flow = await _consume_flow(conn, keyring, name, params.get("state"))
        if not isinstance(bound_state, str) or \
                not hmac.compare_digest(bound_state.encode(), str(params.get("state")).encode()):
            raise OAuthFailure("state_not_bound_to_browser")
        if params.get("error"):
            raise OAuthFailure("provider_error")
        code = params.get("code")
        if not code or len(code) > 2048:
            raise OAuthFailure("missing_code")
        identity = await fetch_identity(providers, provider, name, app_url, flow, code)
        return await _settle(conn, client, signer, name, identity, flow["link_user_id"])
    except (OAuthFailure, httpx.HTTPError, JoseError, DomainError, ValueError) as exc:
        link_user_id = flow["link_user_id"] if flow else None
        await _audit_failure(conn, client, name, exc, link_user_id)
        raise OAuthFailure(getattr(exc, "reason", "failed"), link=link_user_id is not None) from None


async def _consume_flow(conn: db.Connection, keyring: Keyring, name: str, state: object) -> dict:
    if not mailtokens.well_formed(state):
        raise OAuthFailure("state_malformed")
    async with db.transaction(conn) as cur:
        flow = await db.fetchone(
            cur,
            """DELETE FROM oauth_flows WHERE state_hash = %s
               RETURNING provider, code_verifier, nonce, link_user_id, expires_at > now() AS live""",
            (keyring.token_hash(state),),
        )
    if flow is None:
        raise OAuthFailure("state_unknown")
    if not flow["live"]:
        raise OAuthFailure("flow_expired")
    if flow["provider"] != name:
        raise OAuthFailure("state_other_provider")
    return flow


# What the identity becomes -------------------------------------------------------------------

async def _settle(conn: db.Connection, client: Actor, signer: sessions.JwtSigner, name: str,
                  identity: Identity, link_user_id: uuid.UUID | None) -> Outcome:
    async with db.transaction(conn) as cur:
        known = await db.fetchone(
            cur, "SELECT user_id FROM user_identities WHERE provider = %s AND subject = %s",
            (name, identity.subject))
        if link_user_id is not None:
            return await _link(cur, client, name, identity, link_user_id, known)
        created = False
        if known is not None:
            user = await _user(cur, known["user_id"])
        elif not identity.email or not identity.email_verified:
            raise OAuthFailure("email_unverified")
        else:
            user = await db.fetchone(
                cur, f"SELECT {_USER_COLUMNS} FROM users WHERE lower(email) = lower(%s) FOR NO KEY UPDATE",
                (identity.email,))
            if user is None:
                user = await _create_user(cur, identity)
                created = True
            elif not user["email_verified"]:
                # Someone may have registered this address before its owner (pre-hijacking):
                # linking would hand the owner an account whose password another person knows.
                # The owner proves the address by mail first (verification or password reset).
                raise OAuthFailure("local_email_unverified")
            await _attach(cur, name, identity, user["id"])
            actor = client.as_user(user["id"], user["email"])
            if not created:
                await audit.record(cur, actor, "oauth_link", "user", resource_id=user["id"],
                                   metadata={"provider": name, "by": "verified_email"})
        if user["disabled_at"] is not None:
            raise OAuthFailure("account_disabled")
        actor = client.as_user(user["id"], user["email"])
        await audit.record(cur, actor, "oauth_login", "user", resource_id=user["id"],
                           metadata={"provider": name, "created": created,
                                     "second_factor": bool(user["totp_enabled"])})
        if user["totp_enabled"]:
            return Outcome(user["id"], second_factor=True, created=created)
        token = await sessions.issue(cur, signer, user["id"])
        return Outcome(user["id"], token=token, created=created)


_USER_COLUMNS = "id, email, email_verified, totp_enabled, disabled_at"


async def _user(cur: db.Cursor, user_id: uuid.UUID) -> dict:
    user = await db.fetchone(cur, f"SELECT {_USER_COLUMNS} FROM users WHERE id = %s FOR NO KEY UPDATE",
                             (user_id,))
    if user is None:
        raise OAuthFailure("user_gone")
    return user


async def _attach(cur: db.Cursor, name: str, identity: Identity, user_id: uuid.UUID) -> None:
    row = await db.fetchone(
        cur,
        """INSERT INTO user_identities (provider, subject, user_id, email) VALUES (%s, %s, %s, %s)
           ON CONFLICT (provider, subject) DO NOTHING RETURNING user_id""",
        (name, identity.subject, user_id, identity.email or ""))
    if row is None:  # attached a moment ago by a concurrent callback
        raise OAuthFailure("identity_race")


async def _link(cur: db.Cursor, client: Actor, name: str, identity: Identity,
                user_id: uuid.UUID, known: Mapping | None) -> Outcome:
    user = await _user(cur, user_id)
    if known is not None and known["user_id"] != user_id:
        raise OAuthFailure("identity_belongs_to_another_user")
    if known is None:
        await _attach(cur, name, identity, user_id)
    await audit.record(cur, client.as_user(user["id"], user["email"]), "oauth_link", "user",
                       resource_id=user_id, metadata={"provider": name, "by": "signed_in"})
    return Outcome(user_id, linked=True)


async def _create_user(cur: db.Cursor, identity: Identity) -> dict:
    """An account without a password, its email verified, subscribed to the newsletter."""
    assert identity.email is not None
    username = await _free_username(cur, identity.email)
    display = one_line(identity.name or "").strip()[:200] or username  # as a provider sent it
    async with db.unique_as_conflict(cur, "Email atau username sudah terdaftar"):
        user = await db.fetchone(
            cur,
            f"""INSERT INTO users (email, username, name, password_hash, email_verified,
                                   newsletter_opt_in)
                VALUES (%s, %s, %s, NULL, true, true) RETURNING {_USER_COLUMNS}""",
            (identity.email, username, display))
    # The spec: a first sign-in through a provider subscribes without double opt-in. An address
    # that unsubscribed before stays unsubscribed.
    await cur.execute(
        """INSERT INTO newsletter_subscriptions (email, status, source, confirmed_at)
           VALUES (%s, 'confirmed', 'oauth', now())
           ON CONFLICT ((lower(email))) DO UPDATE
               SET status = 'confirmed', confirmed_at = now()
               WHERE newsletter_subscriptions.status = 'pending'""",
        (identity.email,))
    return user


_NOT_USERNAME = re.compile(r"[^A-Za-z0-9_]")


def username_base(email: str) -> str:
    """A valid username from an email's local part (as migration 0002 derived them)."""
    base = _NOT_USERNAME.sub("_", email.split("@", 1)[0])[:40]
    if len(base) < 3:
        base = base.ljust(3, "_")
    if base.lower() in users.RESERVED_USERNAMES:
        base = base[:38] + "_1"
    return base


async def _free_username(cur: db.Cursor, email: str) -> str:
    base = username_base(email)
    for n in range(1, 50):
        candidate = base if n == 1 else f"{base[:40 - len(str(n)) - 1]}_{n}"
        taken = await db.fetchone(cur, "SELECT 1 FROM users WHERE lower(username) = lower(%s)",
                                  (candidate,))
        if taken is None:
            return candidate
    return f"{base[:31]}_{secrets.token_hex(4)}"


async def _audit_failure(conn: db.Connection, client: Actor, name: str, exc: BaseException,
                         link_user_id: uuid.UUID | None) -> None:
    reason = exc.reason if isinstance(exc, OAuthFailure) else \
        "network" if isinstance(exc, httpx.HTTPError) else \
        "id_token" if isinstance(exc, JoseError) else "failed"
    metadata: dict[str, Any] = {"provider": name, "reason": reason}
    if link_user_id is not None:
        metadata["link_user_id"] = str(link_user_id)
    async with db.transaction(conn) as cur:
        await audit.record(cur, client, "oauth_failed", "user", resource_id=link_user_id,
                           metadata=metadata)


async def identities(conn: db.Connection, actor: Actor) -> list[dict]:
    """The providers linked to the actor's account (provider, email, created_at)."""
    async with db.cursor(conn) as cur:
        return await db.fetchall(
            cur,
            """SELECT provider, email, created_at FROM user_identities WHERE user_id = %s
               ORDER BY provider, created_at""",
            (actor.user_id,))
