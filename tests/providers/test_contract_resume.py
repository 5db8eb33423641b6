"""The resume contract, against every store kind: each frame carries a token; a stream opened
with one answers first with a Delta of what changed since (removals included) that brings the
view it was taken from to the current one, or, for a token the store cannot use, an Initial
marked ``reset``; never an error."""

from __future__ import annotations

import asyncio

from rxmesh.aio import first_value
from rxmesh.model import FrameKind, MeshNode, NodeQuery, QueryFrame, field
from rxmesh.providers import Store
from tests.providers.conftest import WAIT


def note(path: str, **content: object) -> MeshNode:
    return MeshNode(path=path, node_type="Note", content=dict(content), request_id=path)


async def first(store: Store, query: NodeQuery, token: str | None = None) -> QueryFrame:
    return await first_value(store.query(query, token), timeout=WAIT)


def applied(view: QueryFrame, delta: QueryFrame) -> dict[str, MeshNode]:
    nodes = {node.path: node for node in view.nodes}
    for path in delta.removed:
        nodes.pop(path, None)
    nodes.update((node.path, node) for node in delta.nodes)
    return nodes


async def test_a_resume_brings_the_old_view_to_the_current_one(
    store: Store, partition: str
) -> None:
    query = NodeQuery(partition=partition)
    for name in "abcd":
        await asyncio.wait_for(store.write(note(f"{partition}/{name}")), WAIT)
    before = await first(store, query)
    assert before.resume_token is not None
    await asyncio.wait_for(store.update(note(f"{partition}/a", v=2)), WAIT)
    await asyncio.wait_for(store.delete(f"{partition}/b"), WAIT)
    await asyncio.wait_for(store.move(f"{partition}/c", f"{partition}/e"), WAIT)
    resumed = await first(store, query, before.resume_token)
    now = await first(store, query)
    assert resumed.kind is FrameKind.DELTA and resumed.resumed and not resumed.reset
    assert {f"{partition}/b", f"{partition}/c"} <= set(resumed.removed)
    assert {n.path for n in resumed.nodes} >= {f"{partition}/a", f"{partition}/e"}
    assert applied(before, resumed) == {node.path: node for node in now.nodes}
    assert resumed.resume_token is not None


async def test_a_filtered_resume_removes_what_stopped_matching(
    store: Store, partition: str
) -> None:
    query = NodeQuery(partition=partition, where=field("status").eq("open"))
    await asyncio.wait_for(store.write(note(f"{partition}/a", status="open")), WAIT)
    before = await first(store, query)
    await asyncio.wait_for(store.update(note(f"{partition}/a", status="shut")), WAIT)
    resumed = await first(store, query, before.resume_token)
    assert resumed.resumed and f"{partition}/a" in resumed.removed
    assert resumed.nodes == ()


async def test_a_token_the_store_cannot_use_answers_a_reset_initial(
    store: Store, partition: str
) -> None:
    query = NodeQuery(partition=partition)
    await asyncio.wait_for(store.write(note(f"{partition}/a")), WAIT)
    for token in ("", "garbage", "m1.someone-else.1", "p1.x.y.z", "\u0000"):
        reset = await first(store, query, token)
        assert reset.kind is FrameKind.INITIAL and reset.reset and not reset.resumed
        assert [n.path for n in reset.nodes] == [f"{partition}/a"]


async def test_negative_control_a_stream_not_resumed_is_not_marked(
    store: Store, partition: str
) -> None:
    plain = await first(store, NodeQuery(partition=partition))
    assert plain.kind is FrameKind.INITIAL and not plain.reset and not plain.resumed
