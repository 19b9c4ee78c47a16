"""Read a team's secrets from the cvsm secrets manager.

    import cvsm

    client = cvsm.Client()                  # CVSM_TOKEN, CVSM_BASE_URL, CVSM_TEAM from the environment
    database_url = client.get("DATABASE_URL")

:class:`Client` blocks, :class:`AsyncClient` is its asyncio twin. Every error is a
:class:`CvsmError`; branch on its subclasses.
"""

import logging

from ._async_client import AsyncClient
from ._base import StaleEvent
from ._client import Client
from ._config import ClientConfig
from ._errors import (
    ApiError,
    AuthenticationError,
    ConfigurationError,
    CvsmError,
    DecryptionError,
    NetworkError,
    PermissionDeniedError,
    RateLimitError,
    SecretNotFoundError,
)
from ._version import USER_AGENT, __version__

logging.getLogger("cvsm").addHandler(logging.NullHandler())

__all__ = [
    "USER_AGENT",
    "ApiError",
    "AsyncClient",
    "AuthenticationError",
    "Client",
    "ClientConfig",
    "ConfigurationError",
    "CvsmError",
    "DecryptionError",
    "NetworkError",
    "PermissionDeniedError",
    "RateLimitError",
    "SecretNotFoundError",
    "StaleEvent",
    "__version__",
]
