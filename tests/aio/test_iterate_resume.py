"""iterate's coalescing keeps resume tokens: the merged frame stands where its latest frame
does, a resumed Delta merged with later deltas stays resumed, and a reset Initial replaces what
waits and stays reset."""

from __future__ import annotations

import asyncio

from reactivex.subject import Subject

from rxmesh.aio import iterate
from rxmesh.model import FrameKind, MeshNode, QueryFrame


def delta(token: str, path: str, *, resumed: bool = False) -> QueryFrame:
    frame = QueryFrame.delta([MeshNode(path=path)])
    return frame.model_copy(update={"resume_token": token, "resumed": resumed})


def initial(token: str, *paths: str, reset: bool = False) -> QueryFrame:
    frame = QueryFrame.initial([MeshNode(path=p) for p in paths])
    return frame.model_copy(update={"resume_token": token, "reset": reset})


async def coalesced(*frames: QueryFrame) -> QueryFrame:
    """What a consumer busy while ``frames`` arrived takes next (one merged frame)."""
    subject: Subject[QueryFrame] = Subject()
    iterator = iterate(subject)
    async with asyncio.timeout(5):
        pending = asyncio.ensure_future(anext(iterator))
        await asyncio.sleep(0)  # subscribed
        subject.on_next(initial("t0", "p/0"))
        await pending  # then the consumer is busy while the frames arrive
        for frame in frames:
            subject.on_next(frame)
        assert iterator.pending == 1
        merged = await anext(iterator)
    await iterator.aclose()
    return merged


async def test_merged_deltas_carry_the_latest_token() -> None:
    merged = await coalesced(delta("t1", "p/a"), delta("t2", "p/b"))
    assert merged.resume_token == "t2" and not merged.resumed


async def test_a_resumed_delta_merged_with_later_deltas_stays_resumed() -> None:
    merged = await coalesced(delta("t5", "p/a", resumed=True), delta("t6", "p/b"))
    assert merged.kind is FrameKind.DELTA and merged.resumed and merged.resume_token == "t6"
    assert [n.path for n in merged.nodes] == ["p/a", "p/b"]


async def test_a_reset_initial_replaces_what_waits_and_stays_reset() -> None:
    merged = await coalesced(
        delta("t1", "p/a", resumed=True), initial("t9", "p/z", reset=True), delta("t10", "p/y")
    )
    assert merged.kind is FrameKind.INITIAL and merged.reset and not merged.resumed
    assert merged.resume_token == "t10"
    assert [n.path for n in merged.nodes] == ["p/y", "p/z"]


async def test_negative_control_a_plain_initial_is_not_marked_reset() -> None:
    merged = await coalesced(delta("t1", "p/a"), initial("t9", "p/z"))
    assert merged.kind is FrameKind.INITIAL and not merged.reset
