"""Talking to an OAuth 2.0 / OpenID Connect provider: its endpoints (discovery and JWKS kept for a
while per process), the code exchange, the ID token's check, GitHub's user API, and the identity
that comes out of it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2 as httpx
from authlib.integrations.httpx_client import AsyncOAuth2Client
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from ..core.config import OAuthProvider
from ..core.errors import NotFound
from ..core.inputs import is_email

METADATA_TTL = 3600.0  # seconds a discovery document or a JWKS is kept per process
HTTP_TIMEOUT = 10.0
MAX_RESPONSE_BYTES = 512 * 1024
ID_TOKEN_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
                       "ES512", "EdDSA")
CLOCK_LEEWAY = 60
OIDC_SCOPE = "openid email profile"
GITHUB_SCOPE = "read:user user:email"


class OAuthFailure(Exception):
    """A sign-in through a provider failed. `reason` is for the audit log only (a fixed word,
    never a value from the provider); `link` tells the caller the flow was a linking one."""

    def __init__(self, reason: str, *, link: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.link = link


@dataclass(frozen=True)
class GitHubEndpoints:
    """Where the `github` preset talks to. The defaults are GitHub's; tests give a local fake
    (through `Providers(github=...)`, never from the environment)."""

    authorize: str = "https://github.com/login/oauth/authorize"
    token: str = "https://github.com/login/oauth/access_token"
    api: str = "https://api.github.com"


@dataclass(frozen=True)
class Endpoints:
    """What the flow needs from a provider."""

    authorization: str
    token: str
    issuer: str | None = None  # None: no ID token (GitHub)
    jwks_uri: str | None = None
    userinfo: str | None = None
    token_auth_method: str = "client_secret_basic"


@dataclass(frozen=True)
class Identity:
    """Who the provider says signed in."""

    subject: str
    email: str | None
    email_verified: bool
    name: str | None = field(default=None)


class Providers:
    """The configured providers and their per-process caches (discovery documents, JWKS)."""

    def __init__(self, providers: Mapping[str, OAuthProvider], *,
                 github: GitHubEndpoints | None = None, timeout: float = HTTP_TIMEOUT) -> None:
        self._providers = dict(providers)
        self.github = github or GitHubEndpoints()
        self.timeout = timeout
        self._metadata: dict[str, tuple[float, Any]] = {}

    def __repr__(self) -> str:
        return f"Providers({sorted(self._providers)!r})"

    @property
    def names(self) -> list[str]:
        return sorted(self._providers)

    @property
    def choices(self) -> list[tuple[str, str]]:
        """(name, label) of every configured provider, for the sign-in buttons."""
        return [(name, label(name)) for name in self.names]

    def get(self, name: str) -> OAuthProvider:
        """The provider named in a path; unknown or unconfigured is a 404."""
        provider = self._providers.get(name)
        if provider is None:
            raise NotFound(UNKNOWN_PROVIDER)
        return provider

    def http(self, **kwargs: Any) -> AsyncOAuth2Client:
        """An authlib client (httpx) with this registry's timeout; redirects are not followed."""
        return AsyncOAuth2Client(timeout=self.timeout, follow_redirects=False, **kwargs)

    async def _fetch_json(self, url: str, **kwargs: Any) -> Any:
        async with self.http() as client:
            resp = await client.request("GET", url, withhold_token=True,
                                        headers={"Accept": "application/json"}, **kwargs)
        return _json(resp)

    async def _cached(self, key: str, load: Any, *, refresh: bool = False) -> Any:
        hit = self._metadata.get(key)
        if hit is not None and not refresh and time.monotonic() - hit[0] < METADATA_TTL:
            return hit[1]
        value = await load()
        self._metadata[key] = (time.monotonic(), value)
        return value

    async def endpoints(self, provider: OAuthProvider) -> Endpoints:
        if provider.issuer is None:
            gh = self.github
            return Endpoints(authorization=gh.authorize, token=gh.token,
                             token_auth_method="client_secret_post")
        issuer = provider.issuer

        async def discover() -> Endpoints:
            doc = await self._fetch_json(f"{issuer}/.well-known/openid-configuration")
            if not isinstance(doc, dict) or doc.get("issuer", "").rstrip("/") != issuer:
                raise OAuthFailure("discovery_issuer_mismatch")
            try:
                methods = doc.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
                return Endpoints(
                    authorization=_url(doc["authorization_endpoint"]),
                    token=_url(doc["token_endpoint"]),
                    issuer=doc["issuer"],
                    jwks_uri=_url(doc["jwks_uri"]),
                    userinfo=_url(doc["userinfo_endpoint"]) if doc.get("userinfo_endpoint") else None,
                    token_auth_method=("client_secret_basic" if "client_secret_basic" in methods
                                       else "client_secret_post"),
                )
            except (KeyError, TypeError):
                raise OAuthFailure("discovery_incomplete") from None

        return await self._cached(f"discovery:{issuer}", discover)

    async def keys(self, endpoints: Endpoints, *, refresh: bool = False) -> KeySet:
        async def load() -> KeySet:
            doc = await self._fetch_json(endpoints.jwks_uri)
            try:
                return KeySet.import_key_set(doc)
            except (JoseError, ValueError, TypeError, KeyError):
                raise OAuthFailure("jwks_invalid") from None

        return await self._cached(f"jwks:{endpoints.jwks_uri}", load, refresh=refresh)


def _url(value: object) -> str:
    if not isinstance(value, str) or not value.startswith(("https://", "http://")):
        raise OAuthFailure("discovery_incomplete")
    return value


def _json(resp: httpx.Response) -> Any:
    if resp.status_code != 200 or len(resp.content) > MAX_RESPONSE_BYTES:
        raise OAuthFailure("provider_http_error")
    try:
        return resp.json()
    except ValueError:
        raise OAuthFailure("provider_bad_json") from None


async def fetch_identity(providers: Providers, provider: OAuthProvider, name: str, app_url: str,
                    flow: Mapping, code: str) -> Identity:
    endpoints = await providers.endpoints(provider)
    async with providers.http(client_id=provider.client_id, client_secret=provider.client_secret,
                              redirect_uri=redirect_uri(app_url, name),
                              token_endpoint_auth_method=endpoints.token_auth_method,
                              code_challenge_method="S256") as oauth:
        try:
            token = await oauth.fetch_token(endpoints.token, grant_type="authorization_code",
                                            code=code, code_verifier=flow["code_verifier"])
        except httpx.HTTPError:
            raise
        except Exception:  # authlib's OAuthError and friends: the provider refused the code
            raise OAuthFailure("token_exchange_refused") from None
        if not token.get("access_token"):
            raise OAuthFailure("token_exchange_refused")
        if endpoints.issuer is None:
            return await _github_identity(oauth, providers.github)
        return await _oidc_identity(providers, oauth, provider, endpoints, token, flow["nonce"])


async def _oidc_identity(providers: Providers, oauth: AsyncOAuth2Client, provider: OAuthProvider,
                         endpoints: Endpoints, token: Mapping, nonce: str) -> Identity:
    id_token = token.get("id_token")
    if not isinstance(id_token, str):
        raise OAuthFailure("id_token_missing")
    try:
        decoded = jwt.decode(id_token, await providers.keys(endpoints),
                             algorithms=list(ID_TOKEN_ALGORITHMS))
    except JoseError:
        # The provider may have rotated its keys since they were cached: fetch them once more.
        try:
            decoded = jwt.decode(id_token, await providers.keys(endpoints, refresh=True),
                                 algorithms=list(ID_TOKEN_ALGORITHMS))
        except JoseError:
            raise OAuthFailure("id_token_signature") from None
    claims = decoded.claims
    try:
        jwt.JWTClaimsRegistry(
            leeway=CLOCK_LEEWAY,
            iss={"essential": True, "value": endpoints.issuer},
            sub={"essential": True},
            aud={"essential": True, "value": provider.client_id},
            exp={"essential": True},
            iat={"essential": True},
            nonce={"essential": True, "value": nonce},
        ).validate(claims)
    except JoseError:
        raise OAuthFailure("id_token_claims") from None
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    if provider.client_id not in audiences or \
            (len(audiences) > 1 and claims.get("azp") != provider.client_id):
        raise OAuthFailure("id_token_audience")
    subject = claims["sub"]
    if not isinstance(subject, str) or not 1 <= len(subject) <= 255:
        raise OAuthFailure("id_token_claims")
    email, verified, display = claims.get("email"), claims.get("email_verified"), claims.get("name")
    if email is None and endpoints.userinfo:
        resp = await oauth.get(endpoints.userinfo, headers={"Accept": "application/json"})
        info = _json(resp)
        if not isinstance(info, dict) or info.get("sub") != subject:
            raise OAuthFailure("userinfo_subject")
        email, verified, display = info.get("email"), info.get("email_verified"), info.get("name")
    return Identity(subject, _email(email), verified is True or verified == "true",
                    display if isinstance(display, str) else None)


async def _github_identity(oauth: AsyncOAuth2Client, github: GitHubEndpoints) -> Identity:
    headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
    user = _json(await oauth.get(f"{github.api}/user", headers=headers))
    emails = _json(await oauth.get(f"{github.api}/user/emails", headers=headers))
    if not isinstance(user, dict) or not isinstance(user.get("id"), int) or \
            not isinstance(emails, list):
        raise OAuthFailure("github_bad_answer")
    verified = [e for e in emails if isinstance(e, dict) and e.get("verified") is True
                and _email(e.get("email"))]
    verified.sort(key=lambda e: e.get("primary") is not True)  # the primary address first
    email = verified[0]["email"] if verified else None
    display = user.get("name") or user.get("login")
    return Identity(str(user["id"]), _email(email), email is not None,
                    display if isinstance(display, str) else None)


def _email(value: object) -> str | None:
    if is_email(value):
        return value.strip()  # type: ignore[union-attr]
    return None


UNKNOWN_PROVIDER = "Penyedia identitas tidak dikenal"
_LABELS = {"github": "GitHub", "gitlab": "GitLab", "google": "Google", "microsoft": "Microsoft",
           "keycloak": "Keycloak", "okta": "Okta", "auth0": "Auth0"}


def label(name: str) -> str:
    """The provider's name as people write it (`github` -> `GitHub`)."""
    return _LABELS.get(name, name.capitalize())


def redirect_uri(app_url: str, name: str) -> str:
    return f"{app_url}/api/v1/auth/{name}/callback"
