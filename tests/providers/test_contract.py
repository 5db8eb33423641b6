"""The Store contract (rxmesh/providers/_store.py), run against every kind in STORE_KINDS."""

from __future__ import annotations

import asyncio

import pytest

from rxmesh.aio import first_value
from rxmesh.exceptions import StoreConflictError
from rxmesh.faults import is_transient_connect_fault
from rxmesh.model import (
    ChangeFeedGap,
    CommitAnnounced,
    FrameKind,
    MeshNode,
    NodeChange,
    NodeQuery,
    QueryFrame,
    StoreEvidence,
)
from rxmesh.providers import Store, observe
from tests.providers.conftest import SHARED_DATABASE_KINDS, WAIT, Recorder, collect


def node(path: str, *, request_id: str | None = "req-1", **fields: object) -> MeshNode:
    data: dict[str, object] = {"node_type": "Note", "content": {"text": path}}
    data.update(fields)
    return MeshNode(path=path, request_id=request_id, **data)  # type: ignore[arg-type]


async def put(store: Store, *nodes: MeshNode) -> list[MeshNode]:
    return [await asyncio.wait_for(store.write(n), WAIT) for n in nodes]


async def get(store: Store, path: str) -> MeshNode | None:
    return await asyncio.wait_for(store.read(path), WAIT)


# -- the protocol and laziness ---------------------------------------------------------------


def test_the_store_implements_the_protocol(store: Store) -> None:
    assert isinstance(store, Store)
    assert isinstance(store.name, str)
    assert store.name


async def test_an_unawaited_write_writes_nothing(store: Store, partition: str) -> None:
    store.write(node(f"{partition}/a")).close()
    store.write_many([node(f"{partition}/b")])
    assert await get(store, f"{partition}/a") is None
    assert await get(store, f"{partition}/b") is None


async def test_each_subscription_of_a_verb_observed_does_the_work_again(
    store: Store, partition: str
) -> None:
    read = observe(store.read, f"{partition}/a")
    assert await first_value(read, timeout=WAIT) is None
    await put(store, node(f"{partition}/a"))
    again = await first_value(read, timeout=WAIT)  # the same observable, subscribed again
    assert again is not None
    assert again.path == f"{partition}/a"


# -- reads -----------------------------------------------------------------------------------


async def test_a_written_node_reads_back(store: Store, partition: str) -> None:
    original = node(f"{partition}/a", content={"n": 1, "s": "x"}, created_by="alice")
    (written,) = await put(store, original)
    read = await get(store, original.path)
    assert read == written
    assert written.path == original.path
    assert written.node_type == "Note"
    assert written.content == {"n": 1, "s": "x"}
    assert written.created_by == "alice"
    assert written.request_id == "req-1"
    assert written.version >= 1


async def test_a_stamped_version_is_kept(store: Store, partition: str) -> None:
    (written,) = await put(store, node(f"{partition}/a", version=3))
    assert written.version == 3


async def test_an_absent_path_in_an_existing_partition_reads_none(
    store: Store, partition: str
) -> None:
    await put(store, node(f"{partition}/a"))
    assert await get(store, f"{partition}/absent") is None


async def test_a_path_in_a_missing_partition_reads_none(store: Store, partition: str) -> None:
    assert await get(store, f"{partition}/a") is None
    assert await get(store, partition) is None


async def test_read_many_returns_only_the_present_paths(
    store: Store, partition: str, other_partition: str
) -> None:
    await put(store, node(f"{partition}/a"), node(f"{partition}/b"))
    wanted = [f"{partition}/a", f"{partition}/b", f"{partition}/c", f"{other_partition}/x"]
    found = await asyncio.wait_for(store.read_many(wanted), WAIT)
    assert set(found) == {f"{partition}/a", f"{partition}/b"}
    assert found[f"{partition}/a"].path == f"{partition}/a"
    assert await asyncio.wait_for(store.read_many([]), WAIT) == {}


# -- single writes ---------------------------------------------------------------------------


async def test_a_write_with_the_same_request_id_lands_idempotently(
    store: Store, partition: str
) -> None:
    first = node(f"{partition}/a", request_id="req-same")
    (landed,) = await put(store, first)
    (again,) = await put(store, first.model_copy(update={"content": {"other": True}}))
    assert again == landed  # the stored row, not the second payload
    assert await get(store, first.path) == landed


async def test_a_write_over_another_requests_row_is_a_conflict_not_an_outage(
    store: Store, partition: str
) -> None:
    await put(store, node(f"{partition}/a", request_id="req-1"))
    with pytest.raises(StoreConflictError) as caught:
        await put(store, node(f"{partition}/a", request_id="req-2", content={"x": 2}))
    assert caught.value.path == f"{partition}/a"
    assert caught.value.existing_request_id == "req-1"
    assert caught.value.sqlstate == "23505"
    assert not is_transient_connect_fault(caught.value)
    kept = await get(store, f"{partition}/a")
    assert kept is not None
    assert kept.request_id == "req-1"


# -- bulk writes -----------------------------------------------------------------------------


async def test_write_many_commits_windows_per_partition_in_order(
    store: Store, partition: str, other_partition: str
) -> None:
    first = [node(f"{partition}/n{i:04d}", request_id=f"r{i}") for i in range(1500)]
    second = [node(f"{other_partition}/n{i:04d}", request_id=f"s{i}") for i in range(1000)]
    windows = await collect(store.write_many(first + second, window=1000), timeout=4 * WAIT)
    assert [(w.partition, w.index, len(w.paths)) for w in windows] == [
        (partition, 0, 1000),
        (partition, 1, 500),
        (other_partition, 0, 1000),
    ]
    assert list(windows[0].paths) == [n.path for n in first[:1000]]
    assert list(windows[1].paths) == [n.path for n in first[1000:]]
    assert list(windows[2].paths) == [n.path for n in second]
    found = await asyncio.wait_for(
        store.read_many([first[0].path, first[-1].path, second[-1].path]), WAIT
    )
    assert len(found) == 3
    assert all(n.version >= 1 for n in found.values())


async def test_write_many_skips_existing_rows_and_never_overwrites(
    store: Store, partition: str
) -> None:
    await put(store, node(f"{partition}/b", content={"old": True}))
    batch = [node(f"{partition}/{name}", content={"new": True}) for name in "abc"]
    windows = await collect(store.write_many(batch, window=10))
    assert [w.paths for w in windows] == [(f"{partition}/a", f"{partition}/c")]
    kept = await get(store, f"{partition}/b")
    assert kept is not None
    assert kept.content == {"old": True}


async def test_write_many_of_nothing_completes_without_a_window(store: Store) -> None:
    assert await collect(store.write_many([], window=10)) == []


# -- update / delete / move ------------------------------------------------------------------


async def test_update_replaces_the_content_and_bumps_the_version(
    store: Store, partition: str
) -> None:
    (written,) = await put(store, node(f"{partition}/a", content={"v": 1}))
    change = written.model_copy(update={"content": {"v": 2}, "node_type": "Memo"})
    updated = await asyncio.wait_for(store.update(change), WAIT)
    assert updated is not None
    assert updated.content == {"v": 2}
    assert updated.node_type == "Memo"
    assert updated.version == written.version + 1
    assert updated.request_id == written.request_id
    assert await get(store, written.path) == updated


async def test_update_of_an_absent_node_is_none(store: Store, partition: str) -> None:
    assert await asyncio.wait_for(store.update(node(f"{partition}/a")), WAIT) is None
    assert await get(store, f"{partition}/a") is None


async def test_delete_removes_the_node_but_not_its_children(store: Store, partition: str) -> None:
    await put(store, node(f"{partition}/a"), node(f"{partition}/a/child"))
    assert await asyncio.wait_for(store.delete(f"{partition}/a"), WAIT) is True
    assert await get(store, f"{partition}/a") is None
    assert await get(store, f"{partition}/a/child") is not None
    assert await asyncio.wait_for(store.delete(f"{partition}/a"), WAIT) is False
    assert await asyncio.wait_for(store.delete(f"{partition}/never"), WAIT) is False


async def test_move_takes_the_node_to_a_free_path(store: Store, partition: str) -> None:
    (written,) = await put(store, node(f"{partition}/a", content={"k": "v"}))
    moved = await asyncio.wait_for(store.move(written.path, f"{partition}/b"), WAIT)
    assert moved is not None
    assert moved.path == f"{partition}/b"
    assert moved.content == {"k": "v"}
    assert moved.version >= written.version
    assert await get(store, f"{partition}/a") is None
    assert await get(store, f"{partition}/b") == moved


async def test_move_onto_a_taken_path_is_a_conflict_and_changes_nothing(
    store: Store, partition: str
) -> None:
    await put(store, node(f"{partition}/a"), node(f"{partition}/b", request_id="req-b"))
    with pytest.raises(StoreConflictError) as caught:
        await asyncio.wait_for(store.move(f"{partition}/a", f"{partition}/b"), WAIT)
    assert not is_transient_connect_fault(caught.value)
    assert await get(store, f"{partition}/a") is not None
    kept = await get(store, f"{partition}/b")
    assert kept is not None
    assert kept.request_id == "req-b"


async def test_a_move_onto_itself_is_a_conflict_and_changes_nothing(
    store: Store, partition: str
) -> None:
    """The target is taken, by the node itself. PostgreSQL's DELETE-then-INSERT moved it onto
    itself (version + 1, answered created) while the embedded store refused it; found by
    tests/reliability/test_hostile.py, and this case fails on the PostgreSQL kinds against
    852c3c6."""
    await put(store, node(f"{partition}/a", request_id="req-a"))
    before = await get(store, f"{partition}/a")
    with pytest.raises(StoreConflictError) as caught:
        await asyncio.wait_for(store.move(f"{partition}/a", f"{partition}/a"), WAIT)
    assert caught.value.path == f"{partition}/a"
    assert not is_transient_connect_fault(caught.value)
    assert await get(store, f"{partition}/a") == before


async def test_move_of_an_absent_node_is_none(store: Store, partition: str) -> None:
    assert await asyncio.wait_for(store.move(f"{partition}/a", f"{partition}/b"), WAIT) is None


# -- live queries ----------------------------------------------------------------------------


async def test_a_query_starts_with_an_initial_of_every_match_ordered_by_path(
    store: Store, partition: str, other_partition: str
) -> None:
    await put(
        store,
        node(f"{partition}/c"),
        node(f"{partition}/a"),
        node(f"{partition}/b", node_type="Other"),
        node(f"{other_partition}/a"),
    )
    frames = Recorder(store.query(NodeQuery(partition=partition)))
    try:
        initial = await frames.next()
    finally:
        frames.dispose()
    assert initial.kind is FrameKind.INITIAL
    assert [n.path for n in initial.nodes] == [f"{partition}/{x}" for x in "abc"]

    typed = await first_value(store.query(NodeQuery(partition=partition, node_type="Note")))
    assert [n.path for n in typed.nodes] == [f"{partition}/a", f"{partition}/c"]


async def test_a_query_of_an_empty_partition_starts_with_an_empty_initial(
    store: Store, partition: str
) -> None:
    initial = await first_value(store.query(NodeQuery(partition=partition)), timeout=WAIT)
    assert initial.kind is FrameKind.INITIAL
    assert initial.nodes == ()


async def test_a_query_sees_a_delta_for_each_matching_commit(store: Store, partition: str) -> None:
    frames: Recorder[QueryFrame] = Recorder(
        store.query(NodeQuery(partition=partition, path_prefix=f"{partition}/in"))
    )
    try:
        assert (await frames.next()).kind is FrameKind.INITIAL
        await put(store, node(f"{partition}/out"), node(f"{partition}/in/a"))
        added = await frames.next()
        assert added.kind is FrameKind.DELTA
        assert [n.path for n in added.nodes] == [f"{partition}/in/a"]
        assert added.removed == ()

        updated = await asyncio.wait_for(
            store.update(node(f"{partition}/in/a", content={"v": 2})), WAIT
        )
        changed = await frames.next()
        assert changed.nodes == (updated,)

        await asyncio.wait_for(store.delete(f"{partition}/in/a"), WAIT)
        removed = await frames.next()
        assert removed.kind is FrameKind.DELTA
        assert removed.removed == (f"{partition}/in/a",)
        assert removed.nodes == ()
        assert frames.pending() == 0  # the write outside the prefix made no frame
    finally:
        frames.dispose()


async def test_a_query_sees_nodes_written_in_bulk(store: Store, partition: str) -> None:
    frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition=partition)))
    try:
        await frames.next()
        await collect(store.write_many([node(f"{partition}/{x}") for x in "ab"]))
        seen: set[str] = set()
        async with asyncio.timeout(WAIT):
            while seen != {f"{partition}/a", f"{partition}/b"}:
                seen.update(n.path for n in (await frames.next()).nodes)
    finally:
        frames.dispose()


async def test_every_query_subscription_gets_its_own_initial(store: Store, partition: str) -> None:
    query = store.query(NodeQuery(partition=partition))
    assert (await first_value(query, timeout=WAIT)).nodes == ()
    await put(store, node(f"{partition}/a"))
    assert [n.path for n in (await first_value(query, timeout=WAIT)).nodes] == [f"{partition}/a"]


# -- hot streams -----------------------------------------------------------------------------


async def test_answers_again_announces_every_kind_of_commit(store: Store, partition: str) -> None:
    evidence: Recorder[StoreEvidence] = Recorder(store.answers_again)

    async def announced(path: str) -> CommitAnnounced:
        item = await evidence.next_matching(
            lambda e: isinstance(e, CommitAnnounced) and e.path == path
        )
        assert isinstance(item, CommitAnnounced)
        return item

    try:
        (written,) = await put(store, node(f"{partition}/a"))
        assert (await announced(f"{partition}/a")).version == written.version
        await asyncio.wait_for(store.update(node(f"{partition}/a", content={"v": 2})), WAIT)
        assert (await announced(f"{partition}/a")).version == written.version + 1
        await asyncio.wait_for(store.move(f"{partition}/a", f"{partition}/b"), WAIT)
        await announced(f"{partition}/b")
        await asyncio.wait_for(store.delete(f"{partition}/b"), WAIT)
        await announced(f"{partition}/b")
    finally:
        evidence.dispose()


async def test_the_change_feed_reports_upserts_and_deletes(store: Store, partition: str) -> None:
    changes: Recorder[NodeChange] = Recorder(store.changes)
    try:
        (written,) = await put(store, node(f"{partition}/a"))
        upsert = await changes.next_matching(lambda c: c.path == f"{partition}/a")
        assert upsert.op == "upsert"
        assert upsert.version == written.version
        assert upsert.source
        await asyncio.wait_for(store.delete(f"{partition}/a"), WAIT)
        deletion = await changes.next_matching(lambda c: c.path == f"{partition}/a")
        assert deletion.op == "delete"
    finally:
        changes.dispose()


async def test_an_idempotent_landing_is_not_announced_as_a_new_commit(
    store: Store, partition: str
) -> None:
    first = node(f"{partition}/a", request_id="req-same")
    changes: Recorder[NodeChange] = Recorder(store.changes)
    try:
        await put(store, first)
        # The first landing's own announcement, first: a NOTIFY is delivered asynchronously, so
        # one still on its way when the watch began would pass for the idempotent landing's.
        landed = await changes.next_matching(lambda c: c.path.startswith(partition))
        assert landed.path == f"{partition}/a"
        await put(store, first)
        await put(store, node(f"{partition}/marker"))
        nxt = await changes.next_matching(lambda c: c.path.startswith(partition))
        assert nxt.path == f"{partition}/marker"
    finally:
        changes.dispose()


def test_gaps_is_a_stream_of_change_feed_gaps(store: Store) -> None:
    seen: list[ChangeFeedGap] = []
    subscription = store.gaps.subscribe(seen.append)
    subscription.dispose()
    assert seen == []  # no gap is declared for a feed that was never lost


# -- two instances on one database (postgres only) -------------------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize(
    "kind",
    list(SHARED_DATABASE_KINDS)
    or [pytest.param("none", marks=pytest.mark.skip(reason="no shared-database store kind"))],
)
async def test_a_commit_by_one_instance_reaches_the_others_change_feed_and_queries(
    kind: str, request: pytest.FixtureRequest, partition: str
) -> None:
    async with SHARED_DATABASE_KINDS[kind](request) as (writer, watcher):
        changes: Recorder[NodeChange] = Recorder(watcher.changes)
        evidence: Recorder[StoreEvidence] = Recorder(watcher.answers_again)
        frames: Recorder[QueryFrame] = Recorder(watcher.query(NodeQuery(partition=partition)))
        try:
            assert (await frames.next()).kind is FrameKind.INITIAL
            await put(writer, node(f"{partition}/a"))
            change = await changes.next_matching(lambda c: c.path == f"{partition}/a")
            assert change.op == "upsert"
            await evidence.next_matching(
                lambda e: isinstance(e, CommitAnnounced) and e.path == f"{partition}/a"
            )
            delta = await frames.next()
            assert [n.path for n in delta.nodes] == [f"{partition}/a"]
        finally:
            for recorder in (changes, evidence, frames):
                recorder.dispose()
