"""``WriteGroups``: concurrent creates of one key go as one group only when every lane is busy.

Each send here is a coroutine the test releases by hand (an ``asyncio.Event``), so which writes
share a group is decided by the test, never by timing. The PostgreSQL side (one statement, one
transaction, conflicts decided alone) is tests/providers/postgres/test_write_groups.py.
"""

from __future__ import annotations

import asyncio

import pytest

from rxmesh.providers.postgres._groups import WriteGroups

WAIT = 5.0


class Sends:
    """A fake ``send``: records each group, lands what is not in ``taken``, raises ``error``."""

    def __init__(self, taken: frozenset[str] = frozenset()) -> None:
        self.groups: list[list[str]] = []
        self.release = asyncio.Event()
        self.taken = taken
        self.error: Exception | None = None
        self.refused = False

    async def __call__(self, key: str, items: list[str]) -> set[str] | None:
        self.groups.append(list(items))
        await self.release.wait()
        if self.error is not None:
            raise self.error
        if self.refused:
            return None
        return {item for item in items if item not in self.taken}


def _groups(sends: Sends, lanes: int = 1, most: int = 64) -> WriteGroups[str, str]:
    return WriteGroups(sends, lambda item: item, lanes=lanes, most=most)


async def _lone(groups: WriteGroups[str, str], key: str, gate: asyncio.Event) -> str:
    """A lone create: takes a lane, holds it until ``gate`` is set."""
    assert groups.enter(key)
    try:
        await gate.wait()
        return "alone"
    finally:
        groups.leave(key)


async def _write(groups: WriteGroups[str, str], key: str, item: str) -> bool | str | None:
    """What ``PostgresStore.write`` does: alone when a lane is free, else in a group."""
    if groups.enter(key):
        groups.leave(key)
        return "alone"
    return await groups.join(key, item)


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def _behind_a_busy_lane(
    groups: WriteGroups[str, str], items: list[str]
) -> tuple[asyncio.Event, asyncio.Task[str], list[asyncio.Task[bool | str | None]]]:
    """A lone create holding partition ``p``'s only lane (until the returned gate is set), and
    a write of each of ``items`` queued behind it."""
    gate = asyncio.Event()
    lone = asyncio.create_task(_lone(groups, "p", gate))
    await _turns()
    waiting = [asyncio.create_task(_write(groups, "p", item)) for item in items]
    await _turns()
    return gate, lone, waiting


async def test_a_write_with_a_free_lane_goes_alone_and_no_group_is_sent() -> None:
    sends = Sends()
    groups = _groups(sends, lanes=2)
    assert [await _write(groups, "p", f"p/{i}") for i in range(5)] == ["alone"] * 5
    assert sends.groups == [] and groups.groups_sent == 0


async def test_writes_that_wait_behind_a_busy_lane_go_as_one_group_in_arrival_order() -> None:
    sends = Sends()
    groups = _groups(sends, lanes=1)
    gate, lone, waiting = await _behind_a_busy_lane(groups, [f"p/{i}" for i in range(6)])
    assert sends.groups == []  # nothing is sent while the only lane is busy
    gate.set()
    await _turns()
    assert sends.groups == [[f"p/{i}" for i in range(6)]]
    sends.release.set()
    assert await asyncio.wait_for(asyncio.gather(*waiting), WAIT) == [True] * 6
    assert await lone == "alone"
    assert groups.groups_sent == 1


async def test_another_key_is_not_held_by_a_busy_one() -> None:
    """Negative control of the lane rule: lanes are per key."""
    sends = Sends()
    groups = _groups(sends, lanes=1)
    gate = asyncio.Event()
    lone = asyncio.create_task(_lone(groups, "p", gate))
    await _turns()
    assert await _write(groups, "q", "q/1") == "alone"
    gate.set()
    await lone


async def test_two_writes_of_one_path_never_share_a_group_and_most_caps_a_group() -> None:
    sends = Sends(taken=frozenset())
    groups = _groups(sends, lanes=1, most=3)
    items = ["p/a", "p/a", "p/b", "p/c", "p/d"]
    gate, lone, waiting = await _behind_a_busy_lane(groups, items)
    gate.set()
    await _turns()
    assert sends.groups == [["p/a", "p/b", "p/c"]]
    sends.release.set()
    await asyncio.wait_for(asyncio.gather(*waiting), WAIT)
    assert sends.groups == [["p/a", "p/b", "p/c"], ["p/a", "p/d"]]
    await lone


async def test_a_group_holds_at_most_its_byte_budget_and_a_larger_row_goes_alone() -> None:
    sends = Sends()
    sizes = {"p/a": 40, "p/b": 40, "p/c": 40, "p/big": 500, "p/d": 10}
    groups: WriteGroups[str, str] = WriteGroups(
        sends, lambda item: item, lanes=1, size_of=sizes.__getitem__, most_bytes=100
    )
    gate, lone, waiting = await _behind_a_busy_lane(groups, list(sizes))
    gate.set()
    sends.release.set()
    assert await asyncio.wait_for(asyncio.gather(*waiting), WAIT) == [True] * 5
    # 40 + 40 fit, the third 40 does not (120 > 100), the 500 is over any budget; 10 fits
    assert sends.groups == [["p/a", "p/b", "p/d"], ["p/c"], ["p/big"]]
    await lone


async def test_a_member_whose_path_was_taken_learns_it_did_not_land() -> None:
    sends = Sends(taken=frozenset({"p/b"}))
    groups = _groups(sends, lanes=1)
    gate, lone, waiting = await _behind_a_busy_lane(groups, [f"p/{x}" for x in "abc"])
    gate.set()
    sends.release.set()
    assert await asyncio.wait_for(asyncio.gather(*waiting), WAIT) == [True, False, True]
    await lone


async def test_a_group_refused_whole_tells_every_member_to_write_alone() -> None:
    sends = Sends()
    sends.refused = True
    groups = _groups(sends, lanes=1)
    gate, lone, waiting = await _behind_a_busy_lane(groups, [f"p/{x}" for x in "ab"])
    gate.set()
    sends.release.set()
    assert await asyncio.wait_for(asyncio.gather(*waiting), WAIT) == [None, None]
    await lone


async def test_a_failed_group_raises_its_error_in_every_member() -> None:
    sends = Sends()
    sends.error = ConnectionResetError("cut")
    groups = _groups(sends, lanes=1)
    gate, lone, waiting = await _behind_a_busy_lane(groups, [f"p/{i}" for i in range(4)])
    gate.set()
    sends.release.set()
    results = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), WAIT)
    assert all(result is sends.error for result in results)
    await lone
    # the lane is free again: the next write goes alone
    assert await _write(groups, "p", "p/next") == "alone"


async def test_a_member_cancelled_before_its_group_is_sent_is_not_sent() -> None:
    sends = Sends()
    groups = _groups(sends, lanes=1)
    gate, lone, tasks = await _behind_a_busy_lane(groups, [f"p/{x}" for x in "abc"])
    waiting = dict(zip("abc", tasks, strict=True))
    waiting["b"].cancel()
    await _turns()
    gate.set()
    sends.release.set()
    assert await asyncio.wait_for(waiting["a"], WAIT) is True
    assert await asyncio.wait_for(waiting["c"], WAIT) is True
    with pytest.raises(asyncio.CancelledError):
        await waiting["b"]
    assert sends.groups == [["p/a", "p/c"]]  # control: the others were sent
    await lone


async def test_a_member_cancelled_just_before_its_lane_frees_is_not_sent() -> None:
    """The cancelled member's handler has not run yet when the lane frees (same loop turn):
    its entry is still queued, its future already cancelled. Fails against ee0c91c, whose
    _start_group sent it: a cancelled create's row was written."""
    sends = Sends()
    groups = _groups(sends, lanes=1)
    gate, lone, (first, second) = await _behind_a_busy_lane(groups, ["p/a", "p/b"])
    gate.set()  # the lone create wakes first and frees the lane...
    first.cancel()  # ...before the cancelled member's handler runs (it is woken after)
    sends.release.set()
    assert await asyncio.wait_for(second, WAIT) is True
    with pytest.raises(asyncio.CancelledError):
        await first
    assert sends.groups == [["p/b"]]
    await lone


async def test_a_member_cancelled_after_its_group_was_sent_leaves_the_others_their_answer() -> None:
    sends = Sends()
    groups = _groups(sends, lanes=1)
    gate, lone, waiting = await _behind_a_busy_lane(groups, [f"p/{i}" for i in range(3)])
    gate.set()
    await _turns()
    assert sends.groups == [["p/0", "p/1", "p/2"]]
    waiting[1].cancel()
    await _turns()
    sends.release.set()
    assert await asyncio.wait_for(waiting[0], WAIT) is True
    assert await asyncio.wait_for(waiting[2], WAIT) is True
    with pytest.raises(asyncio.CancelledError):
        await waiting[1]
    await lone


@pytest.mark.parametrize(("lanes", "most"), [(0, 64), (2, 1)])
def test_lanes_and_group_size_are_checked(lanes: int, most: int) -> None:
    with pytest.raises(ValueError, match="lanes >= 1 and most >= 2"):
        WriteGroups(Sends(), lambda item: item, lanes=lanes, most=most)
