"""The `cvsm-server` command: `serve [--host H] [--port P]` and `migrate`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from aiohttp import web

from . import __version__, db, keys
from .config import ConfigError, Settings


def _serve(settings: Settings, host: str, port: int) -> int:
    from .app import create_app

    try:
        app = create_app(settings)
    except ConfigError as exc:
        print(f"cvsm-server: {exc}", file=sys.stderr)
        return 2
    try:
        web.run_app(app, host=host, port=port,  # the app wires its own access logger
                    print=lambda *_: logging.getLogger("cvsm").info(
                        "cvsm-server %s listening on http://%s:%d", __version__, host, port))
    except keys.KeyMismatch as exc:
        print(f"cvsm-server: refusing to start: {exc}", file=sys.stderr)
        return 3
    return 0


async def _migrate(settings: Settings) -> list[int]:
    embedded = None
    url = settings.database_url
    if not url:
        embedded = db.EmbeddedPostgres(settings.data_dir)
        url = embedded.start()
    try:
        pool = await db.create_pool(url, maxsize=2)
        try:
            return await db.migrate(pool)
        finally:
            pool.close()
            await pool.wait_closed()
    finally:
        if embedded is not None:
            embedded.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cvsm-server", description="cvsm reference server")
    parser.add_argument("--version", action="version", version=f"cvsm-server {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP server (migrations run at start-up)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    sub.add_parser("migrate", help="apply database migrations and exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"cvsm-server: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        return _serve(settings, args.host, args.port)
    applied = asyncio.run(_migrate(settings))
    print(f"applied migrations: {', '.join(f'{n:04d}' for n in applied) or 'none (up to date)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
