"""Statements prepared once per connection (PREPARE, then EXECUTE with the arguments): the hot read
path's SQL is parsed and planned once per pooled connection, not per request."""

from __future__ import annotations

import itertools
import re
import weakref
from typing import Any

import aiopg
import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras

_PARAM = re.compile(r"%\((\w+)\)s")
_generation = itertools.count(1)
# psycopg2 connection -> {statement key: the name it is prepared under on that connection}. A
# connection the pool opens anew is a new object, so it prepares afresh.
_prepared: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()


class Statement:
    """A hot statement, prepared once per connection (`PREPARE`) and then only executed.

    psycopg2 has no protocol-level prepare, so `sql` (with `%(name)s` parameters) becomes
    `PREPARE <name> AS <sql with $1..$n>`, and each call sends `EXECUTE <name>(<values>)`: the
    statement is parsed, analysed and planned once per connection instead of at every call
    (PostgreSQL settles on a generic plan after five executions; `explain` shows it). The first
    call on a connection sends PREPARE and EXECUTE in one message, so it is still one round trip.

    Each prepare uses a new name: a PREPARE whose outcome is unknown (its message failed) is
    never named again. A statement that vanished from its connection (`DISCARD ALL`, `DEALLOCATE`,
    a transaction-pooling PgBouncer: not supported, see docs/deploy.md) is prepared again when
    the connection is outside a transaction; inside one, the error aborts it."""

    def __init__(self, key: str, sql: str) -> None:
        names: list[str] = []
        def number(match: re.Match) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"
        self.key = key
        self.names = tuple(names)
        self._body = _PARAM.sub(number, sql)  # keeps `%%`: the message is interpolated whole
        self._args = f"({', '.join(f'%({n})s' for n in names)})" if names else ""
        self._columns: tuple[str, ...] | None = None  # of its rows, read once (`fetchone`)

    def __repr__(self) -> str:
        return f"Statement({self.key!r})"

    def _execute_sql(self, name: str) -> str:
        return f"EXECUTE {name}{self._args}"

    async def execute(self, cur: aiopg.Cursor, params: dict) -> None:
        """Run the statement on `cur`'s connection, preparing it there first if need be."""
        conn = cur.raw.connection
        names = _prepared.get(conn)
        if names is None:
            names = _prepared[conn] = {}
        name = names.get(self.key)
        if name is not None:
            try:
                await cur.execute(self._execute_sql(name), params)
                return
            except psycopg2.errors.InvalidSqlStatementName:
                names.pop(self.key, None)
                if conn.get_transaction_status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
                    raise
        name = f"{self.key}_{next(_generation)}"
        try:
            await cur.execute(f"PREPARE {name} AS {self._body}; {self._execute_sql(name)}",
                              params)
        except BaseException:
            names.pop(self.key, None)
            raise
        names[self.key] = name

    async def fetchone(self, cur: aiopg.Cursor, params: dict) -> dict | None:
        """The first row as a dict, on a dict cursor or a tuple one (`row_cursor`)."""
        await self.execute(cur, params)
        row = await cur.fetchone()
        if row is None or type(row) is not tuple:
            return row
        names = self._columns
        if names is None:  # the same statement always answers the same columns
            names = self._columns = tuple(column.name for column in cur.description)
        return dict(zip(names, row))

    async def fetchall(self, cur: aiopg.Cursor, params: dict) -> list[dict]:
        await self.execute(cur, params)
        return list(await cur.fetchall())

    async def explain(self, cur: aiopg.Cursor, params: dict) -> str:
        """The plan PostgreSQL executes now for these parameters (`EXPLAIN EXECUTE`)."""
        await self.execute(cur, params)
        name = _prepared[cur.raw.connection][self.key]
        await cur.execute(f"EXPLAIN {self._execute_sql(name)}", params)
        return "\n".join(next(iter(row.values())) if isinstance(row, dict) else row[0]
                         for row in await cur.fetchall())
