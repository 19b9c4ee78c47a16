"""cvsm reference server: a team secrets manager on aiohttp and PostgreSQL."""

__version__ = "0.4.0"
