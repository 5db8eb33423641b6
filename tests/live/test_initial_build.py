"""A large read is built without the collector's passes and with the next batch already asked
for (issue 16, item 3).

A 50k-row Initial made some 230 young collections, 20 middle ones and a full pass over the whole
heap inside the store's build (objects that cannot be garbage yet: they are in the list being
built), and the store asked for each batch of rows only once the previous one was built, so the
server waited while this process built. Now each build step runs with the collector held off
(:func:`rxmesh._util.collector.collector_paused`) and the cursor's next batch is read while this one
is built (:func:`rxmesh.providers.postgres._reads._read_ahead`).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import asyncpg.cursor
import pytest

import rxmesh.providers.postgres as postgres
from rxmesh._util.collector import collector_paused
from rxmesh._util.path_order import PathOrdered
from rxmesh.aio import first_value
from rxmesh.model import MeshNode, NodeQuery
from rxmesh.providers.postgres import _reads
from rxmesh.providers.postgres import _rows as rows_module
from tests.providers.postgres.kinds import started


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every collection the cyclic collector starts while the test runs."""
    started: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(note)
    try:
        yield started
    finally:
        gc.callbacks.remove(note)


def test_the_collector_is_off_inside_and_as_it_was_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError, match="inside"), collector_paused():
        raise ValueError("raised inside")
    assert gc.isenabled()  # put back when the block raises too


def test_a_collector_the_application_disabled_stays_disabled() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the pause does not switch on what it found off
    finally:
        gc.enable()


_NAMES = ("path", "node_type", "content", "created_by", "created_at", "version", "request_id")


class _Row(tuple[Any, ...]):
    """A row as asyncpg gives it: by position and by column name."""

    def __getitem__(self, key: Any) -> Any:
        return super().__getitem__(_NAMES.index(key) if isinstance(key, str) else key)


def _rows(count: int, partition: str = "p") -> list[_Row]:
    """Rows as the store's live-query SELECT returns them (``_COLUMNS`` order)."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        _Row((f"{partition}/{i:06d}", "Row", f'{{"n": {i}, "s": ["x"]}}', "w", at, 1, f"r{i}"))
        for i in range(count)
    ]


def test_a_store_build_starts_no_collection_of_its_own(collections: list[int]) -> None:
    """Regression: at c1ffe01 building these 5,000 rows started young collections inside the
    build (every 700 new objects); now none starts until the build step is over."""
    rows = _rows(5000)
    gc.collect()
    collections.clear()
    nodes = rows_module._stored_nodes_of(rows, "p")  # type: ignore[arg-type]
    inside = len(collections)  # read before anything is allocated (that may start one)
    due = gc.get_count()[0]
    assert inside == 0
    # What was built is collected as usual afterwards: the allocation count was kept (well past
    # the young generation's threshold), so the next allocations start the collection due.
    assert due > gc.get_threshold()[0]
    assert [n.path for n in nodes[:2]] == ["p/000000", "p/000001"] and len(nodes) == 5000
    assert nodes[1].content == {"n": 1, "s": ["x"]} and nodes[1].request_id == "r1"
    assert collections
    # The negative control: the same objects made with the collector on start collections
    # while they are made, so the count above would have seen them.
    collections.clear()
    again = [MeshNode.model_construct(**node.__dict__) for node in nodes]
    assert len(again) == 5000 and collections and collections[0] == 0


def test_a_row_that_is_no_node_is_left_out_of_the_build_with_the_collector_back_on() -> None:
    """A row that fails full validation is that row's defect (reported, left out), never the
    end of the build (issue 31, item 8)."""
    rows = _rows(3)
    rows[1] = _Row(("elsewhere/x", "Row", "{}", "w", rows[1][4], -1, None))
    nodes = rows_module._stored_nodes_of(rows, "p")  # type: ignore[arg-type]
    assert [n.path for n in nodes] == ["p/000000", "p/000002"]
    assert gc.isenabled()


def test_a_foreign_but_valid_row_is_validated_and_its_chunk_keeps_its_order() -> None:
    """A row outside the table's partition goes through full validation (it is built, checked);
    the rows around it are still built trusted, each equal to its validated self, in order."""
    rows = _rows(4)
    rows[2] = _Row(("elsewhere/x", "Row", '{"n": 2}', "w", rows[2][4], 1, "r2"))
    nodes = rows_module._stored_nodes_of(rows, "p")  # type: ignore[arg-type]
    assert [n.path for n in nodes] == ["p/000000", "p/000001", "elsewhere/x", "p/000003"]
    for row, node in zip(rows, nodes, strict=True):
        assert node == rows_module._node_from_row(row)  # type: ignore[arg-type]
        assert node.model_fields_set == set(MeshNode.model_fields)
    # The negative control: a foreign row that is not a valid node is left out, not built.
    rows[2] = _Row(("elsewhere/x", "Row", "{}", "w", rows[2][4], -1, None))
    nodes = rows_module._stored_nodes_of(rows, "p")  # type: ignore[arg-type]
    assert [n.path for n in nodes] == ["p/000000", "p/000001", "p/000003"]


def test_paths_ascend_only_when_strictly_ascending_and_above_the_last() -> None:
    rows = _rows(3)
    assert _reads._paths_ascend(rows, None)  # type: ignore[arg-type]
    assert _reads._paths_ascend(rows, "p/")  # type: ignore[arg-type]
    assert _reads._paths_ascend([], "p/z")
    assert not _reads._paths_ascend(rows, "p/000000")  # type: ignore[arg-type]  # not above
    assert not _reads._paths_ascend(rows[::-1], None)  # type: ignore[arg-type]
    assert not _reads._paths_ascend([rows[0], rows[0]], None)  # type: ignore[arg-type]


@pytest.mark.postgres
async def test_an_initial_over_partitions_out_of_path_order_is_still_sorted(
    pg_dsn: str, prefix: str
) -> None:
    """Partitions are read one after the other: ``p-x/...`` sorts before ``p/...`` although
    ``p`` is read first here, so the read is not in path order as it comes and is sorted; the
    control: one partition's read comes as the checked ``PathOrdered``."""
    async with started(pg_dsn, prefix) as store:
        nodes = [MeshNode(path=p, version=1) for p in ("p/b", "p/a", "p-x/a", "p-x/b")]
        for node in nodes:
            await store.write(node)
        whole = await first_value(store.query(NodeQuery()), timeout=10)
        assert [n.path for n in whole.nodes] == ["p-x/a", "p-x/b", "p/a", "p/b"]
        one = await first_value(store.query(NodeQuery(partition="p")), timeout=10)
        assert isinstance(one.nodes, PathOrdered)
        assert [n.path for n in one.nodes] == ["p/a", "p/b"]
        selected = await store._select(NodeQuery())
        # read in schema-name order, "p" before "p-x": not ascending as it came
        assert [n.path for n in selected] == ["p/a", "p/b", "p-x/a", "p-x/b"]
        assert not isinstance(selected, PathOrdered)


@pytest.fixture
def fetches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every cursor fetch: ("asked", n) when it is sent, ("got", rows) when it returns."""
    log: list[tuple[str, int]] = []
    fetch = asyncpg.cursor.Cursor.fetch

    async def logged(self: Any, n: int, *, timeout: float | None = None) -> list[Any]:
        log.append(("asked", n))
        rows = await fetch(self, n, timeout=timeout)
        log.append(("got", len(rows)))
        return rows

    monkeypatch.setattr(asyncpg.cursor.Cursor, "fetch", logged)
    monkeypatch.setattr(_reads, "_FETCH_BATCH", 10)
    return log


async def _with_rows(store: postgres.PostgresStore, count: int) -> None:
    nodes = [MeshNode(path=f"p/{i:03d}", node_type="Row", version=1) for i in range(count)]
    await first_value(store.write_many(nodes), timeout=30)


@pytest.mark.postgres
async def test_the_next_batch_is_asked_for_while_this_one_is_built(
    pg_dsn: str, prefix: str, fetches: list[tuple[str, int]]
) -> None:
    """Regression: at c1ffe01 a batch was asked for only after the previous one was built
    (the server idle meanwhile), and an empty batch was asked for after the last one."""
    async with started(pg_dsn, prefix) as store:
        await _with_rows(store, 25)
        events: list[tuple[str, int]] = fetches
        paths: list[str] = []

        async def build(partition: str, rows: list[asyncpg.Record]) -> None:
            events.append(("building", len(rows)))
            await asyncio.sleep(0)  # the store's build yields before each step
            await asyncio.sleep(0)
            paths.extend(row[0] for row in rows)
            events.append(("built", len(rows)))

        fetches.clear()
        async with asyncio.timeout(10):
            await store._select_batches(NodeQuery(partition="p"), build)
        assert paths == [f"p/{i:03d}" for i in range(25)]
        asked = [i for i, event in enumerate(events) if event[0] == "asked"]
        built = [i for i, event in enumerate(events) if event[0] == "built"]
        assert len(asked) == 3  # 10, 10, 5: the short batch is the last, nothing more asked
        assert asked[1] < built[0] and asked[2] < built[1]  # each asked before the last built


@pytest.mark.postgres
async def test_a_batch_that_fills_the_last_fetch_asks_once_more(
    pg_dsn: str, prefix: str, fetches: list[tuple[str, int]]
) -> None:
    async with started(pg_dsn, prefix) as store:
        await _with_rows(store, 20)
        fetches.clear()
        async with asyncio.timeout(10):
            nodes = await store._select(NodeQuery(partition="p"))
        assert [n.path for n in nodes] == [f"p/{i:03d}" for i in range(20)]
        assert [n for what, n in fetches if what == "got"] == [10, 10, 0]


@pytest.mark.postgres
async def test_a_build_that_fails_while_a_batch_is_read_ahead_leaves_the_connection_clean(
    pg_dsn: str, prefix: str, fetches: list[tuple[str, int]]
) -> None:
    """The build's own error comes out unchanged, the read-ahead is settled first (a
    transaction ended with a command in flight would fail with asyncpg's "another operation is
    in progress" instead), and the store's one connection answers the next read."""
    async with started(pg_dsn, prefix, min_size=1, max_size=1) as store:
        await _with_rows(store, 25)

        async def broken(partition: str, rows: list[asyncpg.Record]) -> None:
            await asyncio.sleep(0)
            raise ValueError("a build that fails")

        async with asyncio.timeout(10):
            with pytest.raises(ValueError, match="a build that fails"):
                await store._select_batches(NodeQuery(partition="p"), broken)
            assert ("asked", 10) in fetches[1:]  # the read-ahead was in flight
            nodes = await store._select(NodeQuery(partition="p"))
        assert len(nodes) == 25


@pytest.mark.postgres
async def test_a_read_cancelled_while_a_batch_is_read_ahead_leaves_the_connection_clean(
    pg_dsn: str, prefix: str, fetches: list[tuple[str, int]]
) -> None:
    async with started(pg_dsn, prefix, min_size=1, max_size=1) as store:
        await _with_rows(store, 25)
        building = asyncio.Event()

        async def stuck(partition: str, rows: list[asyncpg.Record]) -> None:
            building.set()
            await asyncio.Event().wait()  # until cancelled

        async with asyncio.timeout(10):
            read = asyncio.ensure_future(store._select_batches(NodeQuery(partition="p"), stuck))
            await building.wait()
            await asyncio.sleep(0)
            read.cancel()
            with pytest.raises(asyncio.CancelledError):
                await read
            nodes = await store._select(NodeQuery(partition="p"))
        assert len(nodes) == 25
