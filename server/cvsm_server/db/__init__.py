"""PostgreSQL: opening the database (embedded or external) as the server's own role, the aiopg
pool, connections, transactions and migrations. The package's modules: `pool` (the pool,
connections, transactions, cursors), `statements` (statements prepared once per connection),
`migrations`, `supervision` (opening the database for a process, supervising the embedded one),
`embedded` (the embedded PostgreSQL itself) and `queues` (the loop of the PostgreSQL-backed
queues). Every caller uses the names below as `db.<name>`.

With `CVSM_DATABASE_URL` unset the server runs the embedded PostgreSQL (`db.embedded`) in
`<data dir>/pg`, and supervises it (`db.supervision`): a postmaster that dies is started again, with
its crash recovery, and requests recover by themselves (each pooled connection to the dead one
fails once, as a 503, and is replaced). When it cannot be started again the server stops, and
exits 1, so that its own supervisor (systemd, Docker) restarts it.

While the database is away, a background job logs one line when it loses it and one when it is
back (`OutageLog`), not a traceback at each retry.

The server never serves requests as a superuser or as the owner of the tables: migrations run as
the owner (the embedded superuser, or `CVSM_MIGRATION_DATABASE_URL`), and requests run as a login
role that is a member of `cvsm_app`, which holds only the table privileges the server needs (no
UPDATE, no TRUNCATE of the audit log; it can neither disable a trigger nor change
`session_replication_role`). See migration 0004 and docs/server.md, "The database role".
"""

from .embedded import EmbeddedPostgres
from .migrations import migrate, migrate_as_owner, migration_files, pending_migrations, SchemaTooNew
from .pool import (APP_ROLE, HEADROOM, JOB_CONNECTIONS, MIN_POOL, OUTAGE, POOL_SIZE, POOL_WAIT,
                   UNAVAILABLE, acquire, connection, connection_budget, create_pool, cursor,
                   fetchall, fetchone, first_line, pool_size_for, pool_transaction, row_cursor,
                   transaction, unique_as_conflict, with_keepalives, with_user, Connection, Cursor,
                   OutageLog, Pool, StatementTimeout)
from .statements import Statement
from .supervision import embedded_lost, migrate_database, open, running, schema_owner, Database

__all__ = ["APP_ROLE", "Connection", "Cursor", "Database", "EmbeddedPostgres", "HEADROOM",
           "JOB_CONNECTIONS", "MIN_POOL", "OUTAGE", "OutageLog", "POOL_SIZE", "POOL_WAIT", "Pool",
           "SchemaTooNew", "Statement", "StatementTimeout", "UNAVAILABLE", "acquire", "connection",
           "connection_budget", "create_pool", "cursor", "embedded_lost", "fetchall", "fetchone",
           "first_line", "migrate", "migrate_as_owner", "migrate_database", "migration_files",
           "open", "pending_migrations", "pool_size_for", "pool_transaction", "row_cursor",
           "running", "schema_owner", "transaction", "unique_as_conflict", "with_keepalives",
           "with_user"]
