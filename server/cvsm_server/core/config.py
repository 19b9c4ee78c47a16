"""Server settings: every `CVSM_*` environment variable is read here and nowhere else."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from .inputs import decimal

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class ConfigError(Exception):
    """A setting is missing or malformed; the message names the variable."""


@dataclass(frozen=True)
class RateLimit:
    """At most `limit` requests per `period` seconds."""

    limit: int
    period: int

    @classmethod
    def parse(cls, name: str, text: str) -> RateLimit | None:
        text = text.strip().lower()
        if text == "off":
            return None
        limit_text, _, period_text = text.partition("/")
        limit, period = decimal(limit_text, max_digits=9), decimal(period_text, max_digits=9)
        if limit is None or period is None:
            raise ConfigError(f"{name} must be N/SECONDS or off, got {text!r}")
        if limit < 1 or period < 1:
            raise ConfigError(f"{name} must be N/SECONDS with N and SECONDS at least 1")
        return cls(limit, period)


DEFAULT_RATE_LIMITS = {
    "auth": "10/60",
    "api": "60/60",
    "public": "30/60",
    "newsletter": "5/10",
    # Failed credentials (bad API tokens, failed logins) per client IP: past this nothing more is
    # stored for that address until the window ends (not in the spec: hardening).
    "failed_auth": "20/60",
    # Questions to the support assistant and escalations, per user (not in the spec).
    "support": "20/60",
}


@dataclass(frozen=True)
class OAuthProvider:
    """One identity provider (`CVSM_OAUTH_<IDP>_*`): `issuer` is an OpenID Connect issuer whose
    discovery document gives the endpoints; GitHub is a preset without one. The repr never
    shows the client secret."""

    name: str
    client_id: str
    client_secret: str = field(repr=False)
    issuer: str | None = None


def _oauth_providers(env: Mapping[str, str]) -> dict[str, OAuthProvider]:
    names = set()
    for key, value in env.items():
        match = _OAUTH_VAR.match(key)
        if match and value:
            names.add(match.group(1))
    providers = {}
    for upper in sorted(names):
        def var(suffix: str) -> str | None:
            return env.get(f"CVSM_OAUTH_{upper}_{suffix}") or None
        name = upper.lower()
        client_id, client_secret, issuer = var("CLIENT_ID"), var("CLIENT_SECRET"), var("ISSUER")
        if not client_id or not client_secret:
            raise ConfigError(f"CVSM_OAUTH_{upper}_CLIENT_ID and CVSM_OAUTH_{upper}_CLIENT_SECRET "
                              "are both required")
        if issuer is None and name != "github":
            raise ConfigError(f"CVSM_OAUTH_{upper}_ISSUER is required (an OpenID Connect issuer "
                              "URL); only `github` is a preset without one")
        if issuer is not None and not issuer.startswith(("https://", "http://")):
            raise ConfigError(f"CVSM_OAUTH_{upper}_ISSUER must be an http(s) URL")
        providers[name] = OAuthProvider(name, client_id, client_secret,
                                        issuer.rstrip("/") if issuer else None)
    return providers


_OAUTH_VAR = re.compile(r"CVSM_OAUTH_([A-Z0-9]{1,32})_(?:CLIENT_ID|CLIENT_SECRET|ISSUER)\Z")


@dataclass(frozen=True)
class Settings:
    """Everything the server needs to run, built once by `from_env`."""

    data_dir: Path
    # URLs may carry a password, and the keys are secrets: none of them is in the repr.
    database_url: str | None = field(default=None, repr=False)
    migration_database_url: str | None = field(default=None, repr=False)
    allow_superuser: bool = False
    master_key: bytes | None = field(default=None, repr=False)
    jwt_secret: str | None = field(default=None, repr=False)
    # Base of share links; None: the address the server listens on (`web.request.app_url`).
    app_url: str | None = None
    env: str = "development"
    cors_origins: tuple[str, ...] = ()
    trusted_proxies: tuple[IPNetwork, ...] = ()
    rate_limits: Mapping[str, RateLimit | None] = field(default_factory=dict)
    jwt_lifetime_seconds: int = 12 * 3600
    background_jobs: bool = True
    # Requests' connections this process's pool may hold (`db.pool_size_for`); None: derived
    # from the database's connection slots at start-up. `serve --workers` sets it per worker.
    pool_size: int | None = None
    # How many processes serve together (`serve --workers N` sets it): rate-limit leases are
    # sized by it (`ratelimit.Leases`).
    processes: int = 1
    credential_cache_seconds: float = 60.0
    # Mail: SMTP (`smtp://` or `smtps://`, `?starttls=true`); None writes .eml files to the
    # outbox directory under the data dir.
    smtp_url: str | None = field(default=None, repr=False)
    mail_from: str = "cvsm <no-reply@localhost>"
    # How often the mail sender looks at the outbox when nothing woke it (seconds).
    mail_poll_seconds: float = 30.0
    oauth_providers: Mapping[str, OAuthProvider] = field(default_factory=dict)
    # The plan new teams get (`starter`, `professional` or `enterprise`) until one is chosen on
    # the set-up page or in the admin panel (`instance.settings`); None: not set (Starter).
    default_plan: str | None = None
    # The pages' and mails' language when the account chose none and the browser's
    # `Accept-Language` names neither (`id` or `en`; `CVSM_DEFAULT_LANGUAGE`, default `id`).
    default_language: str = "id"
    # How long a token minted by `cvsm login` (the device flow) lives, in days
    # (`CVSM_DEVICE_TOKEN_DAYS`, 90); after that it answers as any expired token.
    device_token_days: int = 90
    # Master keys being rotated away from (`CVSM_OLD_MASTER_KEYS`): they still decrypt, never seal.
    old_master_keys: tuple[bytes, ...] = field(default=(), repr=False)
    # `GET /metrics` answers only when set, and only to `Authorization: Bearer <this>`.
    metrics_token: str | None = field(default=None, repr=False)
    # Where tickets escalated from the support assistant are mailed; None: only in the panel.
    support_email: str | None = None
    # How often the background job signs a checkpoint of every audit chain that grew (seconds).
    audit_checkpoint_seconds: float = 300.0
    # How often the background job seals committed audit entries into their chains (seconds).
    audit_seal_seconds: float = 1.0
    # Where the retention purge writes a month's signed archives before dropping it
    # (`CVSM_AUDIT_ARCHIVE_DIR`, audit_archive.py); None: no archive.
    audit_archive_dir: Path | None = None
    # Webhooks: allow targets in private, loopback, link-local and other non-global ranges
    # (`CVSM_WEBHOOK_ALLOW_PRIVATE=1`; for tests and closed networks), and how often the sender
    # looks at the queue when nothing woke it (seconds).
    webhook_allow_private: bool = False
    webhook_poll_seconds: float = 30.0
    # Secret rotation: how often the background job looks for due rotations when nothing woke
    # it (seconds). Rotation targets obey `webhook_allow_private` too.
    rotation_poll_seconds: float = 60.0
    # At SIGTERM: how long the requests in flight (uploads still arriving included) may take to
    # finish before the server stops anyway (seconds; `drain.py`).
    shutdown_drain_seconds: float = 30.0
    # The event loop `serve` runs on (`eventloop.py`): `uvloop` (the default, where installed) or
    # `asyncio` (`CVSM_EVENT_LOOP=asyncio`, the standard library's loop).
    event_loop: str = "uvloop"
    # Billing (`CVSM_BILLING=stripe`; None: off, plans are the operator's): Stripe's secret key,
    # the webhook endpoint's signing secret, one Price id per paid plan (`CVSM_STRIPE_PRICE_<PLAN>`),
    # the API's base URL (`CVSM_STRIPE_API_BASE`: Stripe's own unless set, e.g. for stripe-mock)
    # and the days a past-due subscription keeps its plan (`CVSM_BILLING_GRACE_DAYS`, 7).
    billing: str | None = None
    stripe_secret_key: str | None = field(default=None, repr=False)
    stripe_webhook_secret: str | None = field(default=None, repr=False)
    stripe_prices: Mapping[str, str] = field(default_factory=dict)
    stripe_api_base: str | None = None
    billing_grace_days: int = 7

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Settings from `CVSM_*` variables (the process environment by default)."""
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            value = env.get(name)
            return value if value not in (None, "") else None

        data_dir = Path(get("CVSM_DATA_DIR") or Path.home() / ".local" / "share" / "cvsm")
        master_key = None
        if (raw := get("CVSM_MASTER_KEY")) is not None:
            master_key = parse_master_key(raw)
        rate_limits = {
            kind: RateLimit.parse(
                f"CVSM_RATELIMIT_{kind.upper()}",
                get(f"CVSM_RATELIMIT_{kind.upper()}") or default,
            )
            for kind, default in DEFAULT_RATE_LIMITS.items()
        }
        origins = tuple(o.strip() for o in (get("CVSM_CORS_ORIGINS") or "").split(",") if o.strip())
        proxies = []
        for item in (get("CVSM_TRUSTED_PROXIES") or "").split(","):
            if item.strip():
                try:
                    proxies.append(ipaddress.ip_network(item.strip(), strict=False))
                except ValueError:
                    raise ConfigError(f"CVSM_TRUSTED_PROXIES: {item.strip()!r} is not an IP or CIDR") from None
        return cls(
            data_dir=data_dir.expanduser(),
            database_url=get("CVSM_DATABASE_URL"),
            migration_database_url=get("CVSM_MIGRATION_DATABASE_URL"),
            allow_superuser=_flag(get("CVSM_ALLOW_SUPERUSER")),
            master_key=master_key,
            jwt_secret=get("CVSM_JWT_SECRET"),
            app_url=(get("CVSM_APP_URL") or "").rstrip("/") or None,
            env=(get("CVSM_ENV") or "development").lower(),
            cors_origins=origins,
            trusted_proxies=tuple(proxies),
            rate_limits=rate_limits,
            background_jobs=(get("CVSM_BACKGROUND_JOBS") or "on").lower() != "off",
            credential_cache_seconds=_seconds("CVSM_CREDENTIAL_CACHE_SECONDS",
                                              get("CVSM_CREDENTIAL_CACHE_SECONDS"), 60.0),
            smtp_url=_smtp_url(get("CVSM_SMTP_URL")),
            mail_from=get("CVSM_MAIL_FROM") or "cvsm <no-reply@localhost>",
            mail_poll_seconds=_seconds("CVSM_MAIL_POLL_SECONDS", get("CVSM_MAIL_POLL_SECONDS"), 30.0)
            or 30.0,
            oauth_providers=_oauth_providers(env),
            default_plan=_plan(get("CVSM_DEFAULT_PLAN")),
            default_language=_language(get("CVSM_DEFAULT_LANGUAGE")),
            device_token_days=_device_token_days(get("CVSM_DEVICE_TOKEN_DAYS")),
            old_master_keys=_old_master_keys(get("CVSM_OLD_MASTER_KEYS")),
            metrics_token=_metrics_token(get("CVSM_METRICS_TOKEN")),
            support_email=_email("CVSM_SUPPORT_EMAIL", get("CVSM_SUPPORT_EMAIL")),
            audit_checkpoint_seconds=_seconds("CVSM_AUDIT_CHECKPOINT_SECONDS",
                                              get("CVSM_AUDIT_CHECKPOINT_SECONDS"), 300.0)
            or 300.0,
            audit_seal_seconds=_seconds("CVSM_AUDIT_SEAL_SECONDS", get("CVSM_AUDIT_SEAL_SECONDS"),
                                        1.0) or 1.0,
            audit_archive_dir=Path(get("CVSM_AUDIT_ARCHIVE_DIR"))
            if get("CVSM_AUDIT_ARCHIVE_DIR") else None,
            webhook_allow_private=_flag(get("CVSM_WEBHOOK_ALLOW_PRIVATE")),
            webhook_poll_seconds=_seconds("CVSM_WEBHOOK_POLL_SECONDS",
                                          get("CVSM_WEBHOOK_POLL_SECONDS"), 30.0) or 30.0,
            rotation_poll_seconds=_seconds("CVSM_ROTATION_POLL_SECONDS",
                                           get("CVSM_ROTATION_POLL_SECONDS"), 60.0) or 60.0,
            shutdown_drain_seconds=_seconds("CVSM_SHUTDOWN_DRAIN_SECONDS",
                                            get("CVSM_SHUTDOWN_DRAIN_SECONDS"), 30.0),
            event_loop=_event_loop(get("CVSM_EVENT_LOOP")),
            **_billing(env),
        )

    @property
    def outbox_dir(self) -> Path:
        return self.data_dir / "outbox"

    def rate_limit(self, kind: str) -> RateLimit | None:
        return self.rate_limits.get(kind)


EVENT_LOOPS = ("uvloop", "asyncio")


def _event_loop(text: str | None) -> str:
    choice = (text or "uvloop").strip().lower()
    if choice not in EVENT_LOOPS:
        raise ConfigError(f"CVSM_EVENT_LOOP must be uvloop or asyncio, got {text!r}")
    return choice


PLAN_NAMES = ("starter", "professional", "enterprise")
# The plans a team can pay for (Starter is the free one every team falls back to).
PAID_PLANS = ("professional", "enterprise")
_STRIPE_PRICE_VAR = re.compile(r"CVSM_STRIPE_PRICE_([A-Z0-9_]{1,32})\Z")


def _billing(env: Mapping[str, str]) -> dict:
    """The billing settings (`CVSM_BILLING`, `CVSM_STRIPE_*`, `CVSM_BILLING_GRACE_DAYS`). No
    message ever quotes a key or a secret."""
    def get(name: str) -> str | None:
        value = (env.get(name) or "").strip()
        return value or None

    mode = (get("CVSM_BILLING") or "off").lower()
    if mode not in ("off", "stripe"):
        raise ConfigError(f"CVSM_BILLING must be stripe or off (unset), got {mode!r}")
    grace_text = get("CVSM_BILLING_GRACE_DAYS")
    grace = 7 if grace_text is None else decimal(grace_text, max_digits=3)
    if grace is None or grace > 90:
        raise ConfigError("CVSM_BILLING_GRACE_DAYS must be a whole number of days, 0 to 90")
    prices: dict[str, str] = {}
    for key in env:
        match = _STRIPE_PRICE_VAR.match(key)
        if match is None or not get(key):
            continue
        plan = match.group(1).lower()
        if plan not in PAID_PLANS:
            raise ConfigError(f"{key}: only {', '.join(PAID_PLANS)} are paid plans "
                              f"(CVSM_STRIPE_PRICE_PROFESSIONAL, CVSM_STRIPE_PRICE_ENTERPRISE)")
        if not re.fullmatch(r"price_[A-Za-z0-9_]{1,200}", get(key) or ""):
            raise ConfigError(f"{key} must be a Stripe Price id (price_...)")
        prices[plan] = get(key)  # type: ignore[assignment]
    base = get("CVSM_STRIPE_API_BASE")
    if base is not None and not base.startswith(("https://", "http://")):
        raise ConfigError("CVSM_STRIPE_API_BASE must be an http(s) URL")
    if mode == "off":
        return {"billing_grace_days": grace}
    secret_key, webhook_secret = get("CVSM_STRIPE_SECRET_KEY"), get("CVSM_STRIPE_WEBHOOK_SECRET")
    if secret_key is None or not secret_key.startswith(("sk_", "rk_")):
        raise ConfigError("CVSM_BILLING=stripe needs CVSM_STRIPE_SECRET_KEY (a secret key, sk_... "
                          "or a restricted key, rk_...)")
    if webhook_secret is None or not webhook_secret.startswith("whsec_"):
        raise ConfigError("CVSM_BILLING=stripe needs CVSM_STRIPE_WEBHOOK_SECRET (the webhook "
                          "endpoint's signing secret, whsec_...)")
    if not prices:
        raise ConfigError("CVSM_BILLING=stripe needs a Price id for at least one paid plan: "
                          "CVSM_STRIPE_PRICE_PROFESSIONAL and/or CVSM_STRIPE_PRICE_ENTERPRISE")
    if len(set(prices.values())) != len(prices):
        raise ConfigError("CVSM_STRIPE_PRICE_*: each paid plan needs its own Price id")
    return {"billing": "stripe", "stripe_secret_key": secret_key,
            "stripe_webhook_secret": webhook_secret,
            "stripe_prices": {plan: prices[plan] for plan in PAID_PLANS if plan in prices},
            "stripe_api_base": base.rstrip("/") if base else None, "billing_grace_days": grace}


def _plan(text: str | None) -> str | None:
    if not (text or "").strip():
        return None
    plan = (text or "").strip().lower()
    if plan not in PLAN_NAMES:
        raise ConfigError(f"CVSM_DEFAULT_PLAN must be one of {', '.join(PLAN_NAMES)}, got {text!r}")
    return plan


LANGUAGES = ("id", "en")  # core.i18n.LANGUAGES


def _language(text: str | None) -> str:
    language = (text or "id").strip().lower()
    if language not in LANGUAGES:
        raise ConfigError(f"CVSM_DEFAULT_LANGUAGE must be one of {', '.join(LANGUAGES)}, "
                          f"got {text!r}")
    return language


DEVICE_TOKEN_MAX_DAYS = 3650


def _device_token_days(text: str | None) -> int:
    days = 90 if text is None else decimal(text.strip(), max_digits=4)
    if days is None or not 1 <= days <= DEVICE_TOKEN_MAX_DAYS:
        raise ConfigError(f"CVSM_DEVICE_TOKEN_DAYS must be a whole number of days, 1 to "
                          f"{DEVICE_TOKEN_MAX_DAYS}, got {text!r}")
    return days


def _email(name: str, text: str | None) -> str | None:
    if text is None:
        return None
    text = text.strip()
    if not re.fullmatch(r"[^@\s<>,]+@[^@\s<>,]+", text):
        raise ConfigError(f"{name} must be one email address, got {text!r}")
    return text


def _smtp_url(text: str | None) -> str | None:
    if text is None:
        return None
    parts = urlsplit(text)
    if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
        raise ConfigError("CVSM_SMTP_URL must be smtp://[user:password@]host[:port] or smtps://...")
    try:
        parts.port
    except ValueError:
        raise ConfigError("CVSM_SMTP_URL has an invalid port") from None
    return text


def _flag(text: str | None) -> bool:
    return (text or "").strip().lower() in ("1", "true", "yes", "on")


def _seconds(name: str, text: str | None, default: float) -> float:
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {text!r}") from None
    if not 0 <= value <= 3600:
        raise ConfigError(f"{name} must be between 0 and 3600 seconds")
    return value


def parse_master_key(raw: str, name: str = "CVSM_MASTER_KEY") -> bytes:
    """Decode `CVSM_MASTER_KEY`: base64 of exactly 32 bytes."""
    try:
        key = base64.b64decode(raw.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{name} must be base64 of 32 bytes") from None
    if len(key) != 32:
        raise ConfigError(f"{name} must decode to 32 bytes, not {len(key)}")
    return key


def _old_master_keys(text: str | None) -> tuple[bytes, ...]:
    """`CVSM_OLD_MASTER_KEYS`: a comma-separated list of base64 keys (the message never quotes
    one)."""
    keys = []
    for position, item in enumerate((text or "").split(","), start=1):
        if item.strip():
            keys.append(parse_master_key(item, f"CVSM_OLD_MASTER_KEYS (item {position})"))
    return tuple(keys)


def _metrics_token(text: str | None) -> str | None:
    if text is not None and len(text.strip()) < 16:
        raise ConfigError("CVSM_METRICS_TOKEN must be at least 16 characters")
    return text.strip() if text is not None else None


def make_data_dir(path: Path) -> None:
    """The data dir, made mode 0700 when it does not exist yet (the folders above it, when
    missing, as the umask says); an existing one is left as it is."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
