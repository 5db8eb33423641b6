"""A partition's schema: identifiers, the table and its columns, the notify trigger, and
its lazy, race-safe creation.

Partition ``P`` lives in the schema ``"<schema_prefix>P"`` (partitions are case-sensitive and the
quoted identifier keeps their case, so the mapping is injective), one ``nodes`` table per schema.
Statement-level triggers ``pg_notify`` small payloads on one channel, ``<schema_prefix>changes``:
``[schema, op, [[path, version], ...], xid]``, one per ~6 kB of changed rows, so a bulk window of
1000 rows is a handful of NOTIFYs, not 1000; ``xid`` is the writing transaction's id, which tells
the change feed how far its delivery has come (:mod:`._dispatch`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

from loguru import logger

from rxmesh.model import validate_path
from rxmesh.providers.postgres._connections import Connection
from rxmesh.providers.postgres._errors import MISSING_SCHEMA

__all__ = [
    "DEFAULT_SCHEMA_PREFIX",
    "DEFAULT_TOMBSTONE_RETENTION",
    "Schemas",
    "quote_identifier",
    "schema_for_partition",
]

T = TypeVar("T")

DEFAULT_SCHEMA_PREFIX = "rxmesh_"
"""Schemas of partitions are named ``<prefix><partition>``."""
DEFAULT_TOMBSTONE_RETENTION = 7 * 24 * 3600.0
"""Seconds a deleted path's tombstone is kept: a resume token older than that (whose view may
have held a path deleted since) is answered with a reset. A week covers a client offline over a
weekend."""

_PREFIX_RULE = re.compile(r"[a-z][a-z0-9_]{0,14}")
_HELD_STAMP = (
    "CASE WHEN NOT isfinite(created_at) OR created_at BETWEEN '0001-01-01 00:00:00+00'"
    " AND '9999-12-31 23:59:59.999999+00' THEN created_at END AS created_at"
)
"""``created_at`` as asyncpg's binary decoding can hold it, else NULL: a foreign row's time
outside Python's years 1 to 9999 (PostgreSQL keeps 4713 BC to 294276 AD) is read as unknown,
instead of failing the whole read with asyncpg's ``OverflowError``. The live reads take the text
and report such a row (:func:`_row_stamps`)."""
_COLUMNS = (
    f"path, node_type, content::text AS content, created_by, {_HELD_STAMP}, version, request_id"
)
_LIVE_COLUMNS = (
    "path, node_type, content::text AS content, created_by, created_at::text AS created_at,"
    " version, request_id"
)
"""The columns of a live query's reads (the Initial, a gap's re-select): ``created_at`` as its
text, which :func:`_stamps_of` turns into the datetime asyncpg would have made, for a fraction
of the cost (asyncpg's binary decoding of a ``timestamptz`` is a large part of a big read's
client CPU). The read's transaction sets ``DateStyle`` and ``TimeZone`` locally
(:data:`_LIVE_SETTINGS`), so the text is ISO 8601 in UTC whatever the session's settings."""
_LIVE_SETTINGS = "SET LOCAL DateStyle = 'ISO'; SET LOCAL TimeZone = 'UTC'"
"""Transaction-scoped (gone at its end: nothing left on a pooled or a pooler's connection)."""
_WRITE_COLUMNS = (
    "path",
    "node_type",
    "content",
    "created_by",
    "created_at",
    "version",
    "request_id",
)
"""The columns a write fills, in the order of a bulk window's records."""


def quote_identifier(name: str) -> str:
    """Quote ``name`` as a PostgreSQL identifier (double quotes, embedded quotes doubled)."""
    if not name or "\x00" in name:
        raise ValueError(f"not a valid identifier: {name!r}")
    return '"' + name.replace('"', '""') + '"'


def schema_for_partition(partition: str, prefix: str = DEFAULT_SCHEMA_PREFIX) -> str:
    """The (unquoted) schema name of ``partition``: ``prefix + partition``, case kept.

    The partition is validated by the path rules first (``[A-Za-z0-9._-]``, at most 48
    characters, not reserved), so the name fits PostgreSQL's 63-byte identifiers.
    """
    validate_path(partition, allow_reserved=False)
    if "/" in partition:
        raise ValueError(f"{partition!r} is a path, not a partition")
    return prefix + partition


def _literal(text: str) -> str:
    """``text`` as a SQL string literal (quotes doubled; the text is a validated identifier)."""
    return "'" + text.replace("'", "''") + "'"


async def _one_transaction(conn: Connection, statements: str) -> None:
    """``statements`` as one READ COMMITTED transaction in one round trip: a simple query that
    carries its own ``BEGIN`` and ``COMMIT``. A failure part-way leaves the session in an
    aborted transaction; it is rolled back before the error propagates (unchanged), so the
    connection goes back to the pool clean (no reset query runs there)."""
    try:
        await conn.execute(f"BEGIN ISOLATION LEVEL READ COMMITTED;\n{statements}\nCOMMIT;")
    except BaseException:
        if not conn.is_closed() and conn.is_in_transaction():
            try:
                await conn.execute("ROLLBACK;")
            except Exception as rollback:  # noqa: BLE001 - the first error is the one raised
                logger.bind(error_type=type(rollback).__name__).debug(
                    "rolling back a failed schema transaction failed too: {}", rollback
                )
        raise


def _notify_branch(rows: str, op: str, channel: str) -> str:
    """The notify function's part for one transition table: a statement of up to 8 rows (and
    6 kB of paths) is announced from a plain scan of it, a larger one by the windowed aggregate
    (one payload per ~6 kB of rows)."""
    return f"""
                        FOR r IN SELECT path, version FROM {rows} LIMIT 9 LOOP
                            counted := counted + 1;
                            total := total + octet_length(r.path) + 24;
                            EXIT WHEN total > 6000;
                            items := items || CASE WHEN counted = 1 THEN '' ELSE ',' END
                                || json_build_array(r.path, r.version)::text;
                        END LOOP;
                        IF counted <= 8 AND total <= 6000 THEN
                            IF counted > 0 THEN
                                PERFORM pg_notify('{channel}', '[' || to_json(TG_TABLE_SCHEMA)::text
                                    || ',"{op}",[' || items || '],'
                                    || pg_current_xact_id()::text || ']');
                            END IF;
                            RETURN NULL;
                        END IF;
                        FOR payload IN
                            SELECT json_build_array(TG_TABLE_SCHEMA, '{op}',
                                json_agg(json_build_array(path, version)),
                                pg_current_xact_id()::text::numeric)::text
                            FROM (SELECT path, version, sum(octet_length(path) + 24)
                                      OVER (ROWS UNBOUNDED PRECEDING) / 6000 AS g
                                  FROM {rows}) AS c
                            GROUP BY g
                        LOOP
                            PERFORM pg_notify('{channel}', payload);
                        END LOOP;"""


def _positions_sql(s: str, retention: float) -> str:
    """What a resume needs in schema ``s`` (docs/live-queries.md, "Resume tokens"): the
    transaction that last wrote each row (a table made before this column existed gets it
    without a rewrite: a row written before any token was given is older than every token),
    stamped by a trigger on update so a foreign writer's update counts too; a tombstone per
    deleted path, with its transaction; and the horizon: the highest tombstone transaction
    pruned (a token that may not have seen it answers a reset), and the retention."""
    return f"""
                DO $add$ BEGIN
                    -- Altered only when the column is missing: an ALTER TABLE would wait for
                    -- every open read of the table, and every query would wait behind it.
                    IF NOT EXISTS (
                        SELECT FROM pg_catalog.pg_attribute
                        WHERE attrelid = '{s}.nodes'::regclass AND attname = 'changed_xid'
                    ) THEN
                        ALTER TABLE {s}.nodes ADD COLUMN changed_xid xid8;
                        ALTER TABLE {s}.nodes
                            ALTER COLUMN changed_xid SET DEFAULT pg_current_xact_id();
                    END IF;
                END $add$;
                CREATE TABLE IF NOT EXISTS {s}.tombstones (
                    path text PRIMARY KEY,
                    deleted_xid xid8 NOT NULL,
                    deleted_at timestamptz NOT NULL DEFAULT now()
                );
                CREATE TABLE IF NOT EXISTS {s}.horizon (
                    one boolean PRIMARY KEY DEFAULT true CHECK (one),
                    created_xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
                    pruned_through xid8,
                    pruned_at timestamptz NOT NULL DEFAULT now(),
                    retention interval NOT NULL
                );
                INSERT INTO {s}.horizon (retention) VALUES (make_interval(secs => {retention!r}))
                    ON CONFLICT (one) DO UPDATE SET retention = EXCLUDED.retention
                    WHERE {s}.horizon.retention <> EXCLUDED.retention;
                CREATE OR REPLACE FUNCTION {s}.rxmesh_stamp() RETURNS trigger
                LANGUAGE plpgsql AS $fn$
                BEGIN
                    NEW.changed_xid := pg_current_xact_id();
                    RETURN NEW;
                END
                $fn$;
                CREATE OR REPLACE TRIGGER rxmesh_stamp BEFORE UPDATE ON {s}.nodes
                    FOR EACH ROW EXECUTE FUNCTION {s}.rxmesh_stamp();
                CREATE OR REPLACE FUNCTION {s}.rxmesh_tombstone() RETURNS trigger
                LANGUAGE plpgsql AS $fn$
                DECLARE
                    horizon record;
                BEGIN
                    INSERT INTO {s}.tombstones AS t (path, deleted_xid)
                        SELECT path, pg_current_xact_id() FROM old_rows
                        ON CONFLICT (path) DO UPDATE
                        SET deleted_xid = EXCLUDED.deleted_xid, deleted_at = now();
                    -- Pruned by the deletions themselves, a sixteenth of the retention apart, by
                    -- one transaction at a time, skipping tombstones another one holds: no
                    -- timer, no wait, no deadlock between two deleting transactions.
                    SELECT * INTO horizon FROM {s}.horizon;
                    IF horizon.pruned_at < now() - horizon.retention / 16
                        AND pg_try_advisory_xact_lock(hashtext(TG_TABLE_SCHEMA || '.prune'))
                    THEN
                        WITH gone AS (
                            DELETE FROM {s}.tombstones WHERE path IN (
                                SELECT path FROM {s}.tombstones
                                WHERE deleted_at < now() - horizon.retention
                                FOR UPDATE SKIP LOCKED)
                            RETURNING deleted_xid)
                        UPDATE {s}.horizon SET pruned_at = now(),
                            pruned_through = GREATEST(pruned_through,
                                                      (SELECT max(deleted_xid) FROM gone));
                    END IF;
                    RETURN NULL;
                END
                $fn$;
                CREATE OR REPLACE TRIGGER rxmesh_tombstone AFTER DELETE ON {s}.nodes
                    REFERENCING OLD TABLE AS old_rows
                    FOR EACH STATEMENT EXECUTE FUNCTION {s}.rxmesh_tombstone();"""


class Schemas:
    """The partitions' schemas of one store: their names, and which ones this process has made
    sure of (created, or found)."""

    def __init__(self, prefix: str, retention: float = DEFAULT_TOMBSTONE_RETENTION) -> None:
        if not _PREFIX_RULE.fullmatch(prefix):
            raise ValueError(f"schema_prefix {prefix!r} must match {_PREFIX_RULE.pattern}")
        if not 0 < retention < float("inf"):
            raise ValueError(f"tombstone_retention must be a positive number, not {retention!r}")
        self.retention = float(retention)
        self.prefix = prefix
        self.channel = prefix + "changes"
        self.ensured: set[str] = set()

    def schema_of(self, partition: str) -> str:
        """The unquoted schema name of ``partition``."""
        return schema_for_partition(partition, self.prefix)

    def table(self, partition: str) -> str:
        return quote_identifier(self.schema_of(partition)) + ".nodes"

    async def ensure(self, conn: Connection, partition: str) -> None:
        """Create ``partition``'s schema, table and triggers if needed: race-safe across
        processes, and pooler-safe (no session state: every lock is transaction-scoped).

        Concurrent creators are serialised by ``pg_advisory_xact_lock`` on the schema's name, in
        two short READ COMMITTED transactions, each one round trip (a simple query carrying its
        own ``BEGIN`` and ``COMMIT``; a transaction pooler keeps each on one server connection,
        and the lock ends with it: nothing can be left held on a server connection the pooler
        hands to someone else):

        1. lock; create the schema unless a catalog query finds it. Not ``CREATE SCHEMA IF NOT
           EXISTS``: its existence check reads the backend's catalog cache, which an advisory
           lock does not refresh, so a waiter that had cached "no such schema" (a read before
           the partition existed) would miss the schema its predecessor committed while it
           waited and fail with 23505 on pg_namespace. A query takes a fresh snapshot.
        2. lock again; create the table, function and triggers. This transaction began after
           the schema was committed, so its catalog cache sees it (a new transaction processes
           the pending invalidations); ``CREATE TABLE`` locks the schema, which refreshes the
           cache again after any wait, so the function and triggers are found if a predecessor
           made them meanwhile.
        """
        schema = self.schema_of(partition)
        s = quote_identifier(schema)
        lock = f"SELECT pg_advisory_xact_lock(hashtext({_literal(schema)}));"
        # READ COMMITTED whatever the server's default: the catalog query must see what the
        # predecessor committed while this transaction waited for the lock.
        await _one_transaction(
            conn,
            f"""{lock}
                DO $rxmesh$ BEGIN
                    IF NOT EXISTS (
                        SELECT FROM pg_catalog.pg_namespace WHERE nspname = {_literal(schema)}
                    ) THEN
                        CREATE SCHEMA {s};
                    END IF;
                END $rxmesh$;""",
        )
        await _one_transaction(conn, self._sql(s, lock))
        self.ensured.add(partition)

    def _sql(self, s: str, lock: str) -> str:
        """The table, the notify function and its triggers of schema ``s``, after ``lock``."""
        channel = self.channel.replace("'", "''")
        return f"""{lock}
                CREATE TABLE IF NOT EXISTS {s}.nodes (
                    path text PRIMARY KEY,
                    node_type text,
                    content jsonb,
                    created_by text,
                    created_at timestamptz,
                    version bigint NOT NULL DEFAULT 0,
                    request_id text,
                    changed_xid xid8 DEFAULT pg_current_xact_id()
                );
                {_positions_sql(s, self.retention)}
                CREATE OR REPLACE FUNCTION {s}.rxmesh_notify() RETURNS trigger
                LANGUAGE plpgsql AS $fn$
                DECLARE
                    payload text;
                    items text := '';
                    counted int := 0;
                    total int := 0;
                    r record;
                BEGIN
                    -- One NOTIFY per ~6 kB of changed rows: [schema, op, [[path, version], ...]]
                    -- (paths are <= 512 ASCII bytes, so a payload stays under the 8000 limit).
                    -- A statement of a few rows (every single-node write) is read by a plain
                    -- scan of the transition table: the aggregate below is planned on every
                    -- statement (a query over a transition table keeps no plan), too dear for
                    -- a single-row INSERT. More rows: the aggregate.
                    IF TG_OP = 'DELETE' THEN
{_notify_branch("old_rows", "delete", channel)}
                    ELSE
{_notify_branch("new_rows", "upsert", channel)}
                    END IF;
                    RETURN NULL;
                END
                $fn$;
                CREATE OR REPLACE TRIGGER rxmesh_notify_insert AFTER INSERT ON {s}.nodes
                    REFERENCING NEW TABLE AS new_rows
                    FOR EACH STATEMENT EXECUTE FUNCTION {s}.rxmesh_notify();
                CREATE OR REPLACE TRIGGER rxmesh_notify_update AFTER UPDATE ON {s}.nodes
                    REFERENCING NEW TABLE AS new_rows
                    FOR EACH STATEMENT EXECUTE FUNCTION {s}.rxmesh_notify();
                CREATE OR REPLACE TRIGGER rxmesh_notify_delete AFTER DELETE ON {s}.nodes
                    REFERENCING OLD TABLE AS old_rows
                    FOR EACH STATEMENT EXECUTE FUNCTION {s}.rxmesh_notify();
                """

    async def with_schema(
        self,
        conn: Connection,
        partition: str,
        work: Callable[[], Awaitable[T]],
    ) -> T:
        """Run a write that needs ``partition``'s table, creating it lazily (once, race-safe)."""
        if partition not in self.ensured:
            await self.ensure(conn, partition)
        try:
            return await work()
        except MISSING_SCHEMA:
            # Dropped behind our back since we created it: create again, try once more.
            self.ensured.discard(partition)
            await self.ensure(conn, partition)
            return await work()

    async def partitions(self, conn: Connection) -> list[str]:
        rows = await conn.fetch(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1) ORDER BY nspname",
            self.prefix,
        )
        return [row["nspname"][len(self.prefix) :] for row in rows]
