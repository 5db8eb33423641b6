"""What changed since a position: the read a resume answers with, and the one a live query
recovers by after a change-feed gap, instead of reading every row again.

A row changed since position ``P`` if the transaction that last wrote it (``changed_xid``) is
one ``P`` did not see; a path was removed since ``P`` if its tombstone's transaction is one ``P``
did not see and no row holds the path now. The read cannot tell (and the caller answers with a
full read instead) when the partition's tombstones were pruned past what ``P`` saw, when the
partition was made after ``P`` (its rows could replace ones of a dropped namesake), or when the
partition predates positions (no horizon yet).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import asyncpg

from rxmesh.model import MeshNode, NodeQuery
from rxmesh.providers.postgres._conditions import conditions, scope
from rxmesh.providers.postgres._connections import Connection
from rxmesh.providers.postgres._errors import MISSING_SCHEMA, NO_POSITIONS
from rxmesh.providers.postgres._positions import Position
from rxmesh.providers.postgres._reads import Reads
from rxmesh.providers.postgres._rows import _BUILD_CHUNK, _stored_nodes_of
from rxmesh.providers.postgres._schema import _LIVE_COLUMNS, _LIVE_SETTINGS, quote_identifier

__all__ = ["Changes", "ChangesSince"]


@dataclass(slots=True)
class ChangesSince:
    """What changed in a query's result after one position, as of ``position``."""

    position: Position
    """Where the view stands once this is applied (taken before the reads: a later commit the
    reads saw comes again after it, never the other way round)."""
    nodes: list[MeshNode] = field(default_factory=list)
    """Matching rows written since, ordered by path."""
    removed: list[str] = field(default_factory=list)
    """Paths deleted since, or whose row stopped matching, ordered by path."""


def _changed_rows_statement(
    table: str, prefix: str, query: NodeQuery, since: Position, *, matching: bool
) -> tuple[str, list[object]]:
    """The rows under ``prefix`` written after ``since`` that match the query (as a live read's
    columns), or (``matching=False``) the paths of those that do not."""
    args: list[object] = [since.snapshot, str(since.xmin)]
    under, holds = conditions(prefix, query.node_type, query.where, args)
    where = [
        "changed_xid >= $2::text::xid8",
        "NOT pg_visible_in_snapshot(changed_xid, $1::text::pg_snapshot)",
        *under,
    ]
    if matching:
        where += holds
    else:  # the complement, a row of no type included (``=`` is NULL there)
        where.append(f"NOT COALESCE({' AND '.join(holds)}, false)" if holds else "false")
    columns = _LIVE_COLUMNS if matching else "path"
    return f"SELECT {columns} FROM {table} WHERE {' AND '.join(where)} ORDER BY path", args


def _tombstones_statement(schema: str, prefix: str, since: Position) -> tuple[str, list[object]]:
    """The paths under ``prefix`` deleted after ``since`` that no row holds now."""
    args: list[object] = [since.snapshot, str(since.xmin)]
    under, _ = conditions(prefix, None, None, args)
    where = [
        "t.deleted_xid >= $2::text::xid8",
        "NOT pg_visible_in_snapshot(t.deleted_xid, $1::text::pg_snapshot)",
        f"NOT EXISTS (SELECT FROM {schema}.nodes n WHERE n.path = t.path)",
        *(condition.replace("path", "t.path") for condition in under),
    ]
    return (
        f"SELECT t.path FROM {schema}.tombstones t WHERE {' AND '.join(where)}",
        args,
    )


def _horizon_statement(schema: str) -> str:
    """Whether the partition can tell what changed since ``$1`` (a snapshot whose xmin is
    ``$2``): it existed then, and no tombstone that snapshot might not have seen was pruned."""
    return (
        "SELECT pg_visible_in_snapshot(created_xid, $1::text::pg_snapshot)"
        " AND (pruned_through IS NULL OR pruned_through < $2::text::xid8)"
        f" FROM {schema}.horizon"
    )


class Changes(Reads):
    """The position reads of :class:`~rxmesh.providers.postgres.PostgresStore`."""

    async def _changes_since(self, query: NodeQuery, since: Position) -> ChangesSince | None:
        """What changed in ``query``'s result after ``since``; ``None`` when the store cannot
        tell (the module says when): the caller reads everything instead."""
        prefix, wanted = scope(query)

        async def work(conn: Connection) -> ChangesSince | None:
            answer = ChangesSince(await self._position_now(conn))
            partitions = wanted if wanted is not None else await self._schemas.partitions(conn)
            for partition in partitions:
                schema = quote_identifier(self._schemas.schema_of(partition))
                try:
                    async with conn.transaction(isolation="repeatable_read", readonly=True):
                        await conn.execute(_LIVE_SETTINGS)
                        told = await conn.fetchval(
                            _horizon_statement(schema), since.snapshot, str(since.xmin)
                        )
                        if told is not True:
                            return None
                        table = f"{schema}.nodes"
                        sql, args = _changed_rows_statement(
                            table, prefix, query, since, matching=True
                        )
                        rows = await conn.fetch(sql, *args)
                        gone = []
                        if query.node_type is not None or query.where is not None:
                            sql, args = _changed_rows_statement(
                                table, prefix, query, since, matching=False
                            )
                            gone = await conn.fetch(sql, *args)
                        sql, args = _tombstones_statement(schema, prefix, since)
                        gone += await conn.fetch(sql, *args)
                except MISSING_SCHEMA:
                    return None  # a partition that does not exist now: it may have been dropped
                except NO_POSITIONS:
                    return None
                await _gather(answer, partition, rows, [row[0] for row in gone])
            answer.nodes.sort(key=_path)
            answer.removed.sort()
            return answer

        return await self._connections.run(f"reading what changed in {query!r}", work)


def _path(node: MeshNode) -> str:
    return node.path


async def _gather(
    answer: ChangesSince, partition: str, rows: list[asyncpg.Record], gone: list[str]
) -> None:
    """Rows and tombstones of one partition into ``answer`` (built ``_BUILD_CHUNK`` a turn)."""
    for start in range(0, len(rows), _BUILD_CHUNK):
        if start:
            await asyncio.sleep(0)
        chunk = rows[start : start + _BUILD_CHUNK]
        answer.nodes.extend(_stored_nodes_of(chunk, partition, stamps_as_text=True))
    answer.removed.extend(gone)
