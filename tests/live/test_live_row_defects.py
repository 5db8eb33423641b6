"""A foreign row rxmesh cannot read as it reads a node is the defect of that row, reported once,
never the death of the partition's reads (docs/providers.md, "Rows another writer put there").

Issue 31, item 8: at 1d389e8 one row with ``created_at`` outside Python's years 1 to 9999
(PostgreSQL keeps 4713 BC to 294276 AD), inserted by another session, ended an open standing
watch with an error, failed every new live query of the partition, and made a create of that
path answer UNKNOWN "OverflowError" (asyncpg's binary decoding of the time). Now such a time is
read as unknown (``created_at=None``), the row's defect logged once; a row that is not a node at
all (a negative version, content Python cannot decode) is left out of the live reads and
reported, and the others are delivered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from rxmesh import Mesh, MeshNode
from rxmesh.aio import first_value
from rxmesh.ledger import PendingWriteLedger
from rxmesh.model import NodeQuery, QueryFrame
from rxmesh.operations import RejectionReason
from rxmesh.providers.postgres import PostgresStore
from tests.helpers import ALICE, LogRecords
from tests.providers.conftest import Recorder
from tests.providers.postgres.kinds import started

WAIT = 10.0
OUT_OF_RANGE = {
    "p/year-10000": "10000-01-01 00:00:00+00",
    "p/bc": "4713-01-01 00:00:00+00 BC",
}
"""Times PostgreSQL keeps and Python cannot."""
HELD = {
    "p/first": ("0001-01-01 00:00:00+00", datetime(1, 1, 1, tzinfo=UTC)),
    "p/last": ("9999-12-31 23:59:59.999999+00", datetime(9999, 12, 31, 23, 59, 59, 999999, UTC)),
}
"""The extreme times Python holds (the negative control: read back exactly, nothing reported)."""


@pytest.fixture
async def store(pg_dsn: str, prefix: str) -> AsyncIterator[PostgresStore]:
    async with started(pg_dsn, prefix) as store:
        await store.write(MeshNode(path="p/seed", node_type="Doc", content={}, version=1))
        yield store


async def insert(store: PostgresStore, dsn: str, rows: dict[str, str], **columns: Any) -> None:
    """Rows written by another session, in plain SQL: ``created_at`` from its text."""
    table = f'"{store.schema_of("p")}".nodes'
    version = columns.get("version", 1)
    content = columns.get("content", "{}")
    conn = await asyncpg.connect(dsn)
    try:
        for path, at in rows.items():
            await conn.execute(
                f"INSERT INTO {table} (path, node_type, content, created_by, created_at, version,"
                " request_id) VALUES ($1, 'Doc', $2::jsonb, 'mallory', $3::text::timestamptz, $4,"
                " 'foreign-1')",
                path,
                content,
                at,
                version,
            )
    finally:
        await conn.close()


def defects(log_records: LogRecords) -> list[tuple[object, object]]:
    return [
        (r["extra"]["path"], r["extra"]["defect"])
        for r in log_records.at("ERROR")
        if r["extra"].get("event") == "row_defect"
    ]


@pytest.mark.postgres
async def test_an_open_watch_survives_a_foreign_row_of_an_unholdable_time(
    store: PostgresStore, pg_dsn: str
) -> None:
    """Fails at 1d389e8: the standing watch ended with an error when the row arrived."""
    frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
    try:
        assert [n.path for n in (await frames.next()).nodes] == ["p/seed"]
        await insert(store, pg_dsn, OUT_OF_RANGE)
        seen: dict[str, MeshNode] = {}
        while set(seen) != set(OUT_OF_RANGE):
            seen.update({n.path: n for n in (await frames.next()).nodes})
        assert {path: node.created_at for path, node in seen.items()} == dict.fromkeys(OUT_OF_RANGE)
        assert all(node.created_by == "mallory" for node in seen.values())
        # Still alive: a later write of this process reaches it.
        await store.write(MeshNode(path="p/after", node_type="Doc", content={}, version=1))
        await frames.next_matching(lambda f: any(n.path == "p/after" for n in f.nodes))
    finally:
        frames.dispose()


@pytest.mark.postgres
async def test_a_new_live_query_reads_the_partition_and_reports_the_row_once(
    store: PostgresStore, pg_dsn: str, log_records: LogRecords
) -> None:
    """Fails at 1d389e8: every new live query of the partition failed ("created_at '10000-01-01
    00:00:00+00' is not a time this process can hold"). The defect is logged once per row, however
    many reads meet it."""
    await insert(store, pg_dsn, OUT_OF_RANGE)
    for _ in range(2):
        frame = await first_value(store.query(NodeQuery(partition="p")), timeout=WAIT)
        assert {n.path: n.created_at for n in frame.nodes if n.path != "p/seed"} == dict.fromkeys(
            OUT_OF_RANGE
        )
    assert sorted(defects(log_records)) == sorted((p, "created_at") for p in OUT_OF_RANGE)


@pytest.mark.postgres
async def test_the_extreme_times_python_holds_read_back_exactly(
    store: PostgresStore, pg_dsn: str, log_records: LogRecords
) -> None:
    """Negative control: years 1 and 9999 are times, read back exactly, nothing reported."""
    await insert(store, pg_dsn, {path: text for path, (text, _) in HELD.items()})
    frame = await first_value(store.query(NodeQuery(partition="p")), timeout=WAIT)
    read = {n.path: n.created_at for n in frame.nodes if n.path != "p/seed"}
    assert read == {path: at for path, (_, at) in HELD.items()}
    assert {p: (await store.read(p)).created_at for p in HELD} == read  # type: ignore[union-attr]
    assert defects(log_records) == []


@pytest.mark.postgres
async def test_the_verbs_on_that_path_answer_what_the_row_is(
    store: PostgresStore, pg_dsn: str
) -> None:
    """Fails at 1d389e8: the create answered UNKNOWN "Unexpected error: OverflowError: date value
    out of range" (and so did an update). The row exists: NODE_ALREADY_EXISTS; the update lands
    and leaves the row's own creation time as it was."""
    await insert(store, pg_dsn, OUT_OF_RANGE)
    mesh = Mesh(store, retry_delays=(0.01,), ledger=PendingWriteLedger(journal_dir=None))
    try:
        # The partition as the mesh makes it (its root and owner), so the update is judged.
        await mesh.create(MeshNode(path="p/healed", node_type="Doc", content={}), access=ALICE)
        path = "p/year-10000"
        node = await store.read(path)
        assert node is not None and node.created_at is None and node.version == 1
        body = {"node": {"path": path, "node_type": "Doc", "content": {"a": 1}}}
        created = await first_value(mesh.create_node({**body, "access": {"user": "system"}}))
        assert created.rejection_reason is RejectionReason.NODE_ALREADY_EXISTS, created.error
        updated = await first_value(mesh.update_node({**body, "access": {"user": "system"}}))
        assert updated.success, updated.error
        assert updated.node is not None and updated.node.version == 2
        assert updated.node.created_at is None
    finally:
        mesh.dispose()
    conn = await asyncpg.connect(pg_dsn)
    try:
        table = f'"{store.schema_of("p")}".nodes'
        kept = await conn.fetchval(f"SELECT created_at::text FROM {table} WHERE path = $1", path)
    finally:
        await conn.close()
    assert kept == OUT_OF_RANGE[path]


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("columns", "defect"),
    [({"version": -1}, "row"), ({"content": '{"n": 1' + "0" * 5000 + "}"}, "content")],
    ids=["negative-version", "content-int-5001-digits"],
)
async def test_a_row_that_is_no_node_is_left_out_and_reported(
    store: PostgresStore, pg_dsn: str, log_records: LogRecords, columns: dict[str, Any], defect: str
) -> None:
    """Fails at 1d389e8: the partition's live query failed (a ValidationError of the row, or
    json's ValueError for the whole chunk). Now the row is left out, once reported, and the
    partition's other rows delivered."""
    await insert(store, pg_dsn, {"p/broken": "2026-01-01 00:00:00+00"}, **columns)
    await insert(store, pg_dsn, {"p/fine": "2026-01-01 00:00:00+00"})
    for _ in range(2):
        frame = await first_value(store.query(NodeQuery(partition="p")), timeout=WAIT)
        assert [n.path for n in frame.nodes] == ["p/fine", "p/seed"]
    assert defects(log_records) == [("p/broken", defect)]
