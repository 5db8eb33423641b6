"""The partition table's statement trigger: every changed row is announced once, whatever the
statement's size, in payloads the feed parses and PostgreSQL accepts.

The trigger reads a statement of up to 8 rows by a plain scan of its transition table and a
larger one by the windowed aggregate (issue 15: the aggregate is planned again on every
statement, which cost a single-row INSERT a fifth of its rate). These tests pin what both
branches announce, at the sizes on either side of the switch, for inserts, updates and deletes.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import asyncpg
import pytest

from rxmesh.model import MeshNode
from rxmesh.providers.postgres import PostgresStore, quote_identifier
from rxmesh.providers.postgres._notifications import parse_notification

pytestmark = pytest.mark.postgres

WAIT = 10.0


def announced(payloads: list[str], prefix: str) -> Counter[tuple[str, str, int]]:
    """(op, path, version) of every row the payloads announce, counted."""
    seen: Counter[tuple[str, str, int]] = Counter()
    for payload in payloads:
        assert len(payload.encode()) < 8000, len(payload)
        for _schema, path, op, version in parse_notification(payload, prefix):
            seen[(op, path, version)] += 1
    return seen


class _Listener:
    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.arrived = asyncio.Event()

    def __call__(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self.payloads.append(payload)
        self.arrived.set()


async def _drain(listener: _Listener, marker: str) -> list[str]:
    """The payloads up to (without) the one that announces ``marker`` (NOTIFYs arrive in commit
    order, so every payload of the statement before the marker's is in by then)."""
    async with asyncio.timeout(WAIT):
        while not any(marker in payload for payload in listener.payloads):
            listener.arrived.clear()
            await listener.arrived.wait()
    taken = [p for p in listener.payloads if marker not in p]
    listener.payloads.clear()
    return taken


@pytest.mark.parametrize("rows", [1, 2, 8, 9, 40, 300])
async def test_every_row_of_a_statement_is_announced_once(
    pg_dsn: str, prefix: str, rows: int
) -> None:
    store = PostgresStore(pg_dsn, schema_prefix=prefix)
    async with store:
        await asyncio.wait_for(store.write(MeshNode(path="p/seed", version=1)), WAIT)
        table = f"{quote_identifier(store.schema_of('p'))}.nodes"
        # Long paths, so that 40 and 300 rows need several payloads of the aggregate branch and
        # 8 rows of them overflow the small branch's byte bound (it hands over to the aggregate).
        paths = [f"p/{i:04d}/" + "/".join(["x" * 60] * 6) for i in range(rows)]
        conn = await asyncpg.connect(pg_dsn)
        listener = _Listener()
        await conn.add_listener(store._schemas.channel, listener)  # the trigger's channel
        writer = await asyncpg.connect(pg_dsn)
        try:
            marks = iter(range(1000))

            async def statement(sql: str, *args: object) -> list[str]:
                await writer.execute(sql, *args)
                mark = f"p/mark{next(marks)}"
                await writer.execute(f"INSERT INTO {table} (path, version) VALUES ($1, 1)", mark)
                return await _drain(listener, mark)

            inserted = await statement(
                f"INSERT INTO {table} (path, version) SELECT unnest($1::text[]), 1", paths
            )
            assert announced(inserted, prefix) == Counter(("upsert", p, 1) for p in paths)
            updated = await statement(
                f"UPDATE {table} SET version = 2 WHERE path = ANY($1::text[])", paths
            )
            assert announced(updated, prefix) == Counter(("upsert", p, 2) for p in paths)
            deleted = await statement(f"DELETE FROM {table} WHERE path = ANY($1::text[])", paths)
            assert announced(deleted, prefix) == Counter(("delete", p, 2) for p in paths)
            # A statement that changes nothing announces nothing.
            assert await statement(f"DELETE FROM {table} WHERE path = ANY($1::text[])", paths) == []
        finally:
            await writer.close()
            await conn.close()


def test_the_check_sees_a_lost_or_doubled_row() -> None:
    """Negative control of :func:`announced`'s comparison: a payload list that drops a row, or
    announces one twice, differs from what the statement changed."""
    prefix = "rxtcontrol_"
    payload = '["rxtcontrol_p","upsert",[["p/a",1],["p/b",1]]]'
    expected = Counter({("upsert", "p/a", 1): 1, ("upsert", "p/b", 1): 1})
    assert announced([payload], prefix) == expected
    assert announced(['["rxtcontrol_p","upsert",[["p/a",1]]]'], prefix) != expected
    assert announced([payload, '["rxtcontrol_p","upsert",[["p/b",1]]]'], prefix) != expected


async def test_an_earlier_versions_function_is_replaced_on_a_process_first_write(
    pg_dsn: str, prefix: str
) -> None:
    """A partition made by an earlier version keeps its notify function until a process running
    this one writes there first: then it is replaced (docs/performance.md, the notify trigger).
    The negative control is the state before that write: the old body is still in place."""
    async with PostgresStore(pg_dsn, schema_prefix=prefix) as first:
        await asyncio.wait_for(first.write(MeshNode(path="p/seed", version=1)), WAIT)
        schema = first.schema_of("p")
    conn = await asyncpg.connect(pg_dsn)
    try:
        function = f"{quote_identifier(schema)}.rxmesh_notify()"
        # Stand-in for an earlier version's body (same payload shape, no small-statement scan).
        await conn.execute(
            f"CREATE OR REPLACE FUNCTION {function} RETURNS trigger LANGUAGE plpgsql AS "
            "$fn$ BEGIN RETURN NULL; END $fn$"
        )
        body = "SELECT prosrc FROM pg_proc WHERE oid = $1::regprocedure"
        assert "LIMIT 9" not in await conn.fetchval(body, function)
        async with PostgresStore(pg_dsn, schema_prefix=prefix) as second:
            await asyncio.wait_for(second.write(MeshNode(path="p/next", version=1)), WAIT)
        assert "LIMIT 9" in await conn.fetchval(body, function)
    finally:
        await conn.close()
