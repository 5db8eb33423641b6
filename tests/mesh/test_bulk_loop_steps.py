"""A 10,000-node bulk is checked, and its intents built when it is answered UNAVAILABLE, a loop
step at a time (issue 16, item 5: no callback of rxmesh's holds the loop for more than 20 ms).

Each intent is a validated model (about 5 us), so 10,000 of them in one step held the loop
about 50 ms (bench/loop_steps.py, ``bulk_unavailable``); the phase-0 checks of 10,000 nodes
(their strings, then duplicates and each node's fail-fast rules) took another 13 ms in the call
to ``create_nodes`` itself. Measured here in loop turns, not time: a task that counts the loop's
turns runs beside the bulk, and each intent (each node's check) notes the count when it is made;
no more than one step's worth may share a count.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from pathlib import Path
from typing import Any

import pytest

from rxmesh import CreateNodesRequest, MeshNode, RejectionReason
from rxmesh.aio import first_value
from rxmesh.ledger import PendingWriteLedger
from rxmesh.ledger._core import LedgerCore
from rxmesh.mesh import _core, _mesh, _pending
from rxmesh.mesh._requests import CHECK_STEP
from rxmesh.operations import CreateNodesResponse
from tests.helpers import ALICE, LoopTurns

from .conftest import make_mesh


def _note_each_call(
    monkeypatch: pytest.MonkeyPatch, turns: LoopTurns, owner: type, name: str
) -> None:
    """Each call of ``owner.name`` notes the loop turn it was made in."""
    original = getattr(owner, name)

    def noting(self: Any, *args: Any, **kwargs: Any) -> Any:
        turns.note()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, noting)


async def _intents_per_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int) -> int:
    """The most intents one loop turn built while a ``size``-node bulk was answered UNAVAILABLE
    with a journal."""
    mesh, store = make_mesh(ledger=PendingWriteLedger(journal_dir=tmp_path / "journal"))
    await mesh.create(MeshNode(path="s/warm", content={}), access=ALICE)
    store.refuse_writes_as_unreachable()
    async with LoopTurns() as turns:
        _note_each_call(monkeypatch, turns, _pending.PendingWrites, "_intent")
        answer = await first_value(mesh.create_nodes(_bulk(size)), timeout=60)
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE
    assert len(answer.recorded_for_reissue) == size
    assert sum(turns.noted.values()) == size
    return turns.most_in_one_turn()


def _bulk(size: int) -> CreateNodesRequest:
    return CreateNodesRequest(
        nodes=tuple(MeshNode(path=f"s/n{i:05d}", content={"i": i}) for i in range(size)),
        access=ALICE,
    )


async def test_a_10000_node_bulk_builds_its_intents_500_a_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails against 000ebcd: all 10,000 intents were built in one turn."""
    assert await _intents_per_turn(tmp_path, monkeypatch, 10_000) <= 500


async def test_the_turn_count_sees_a_bulk_built_in_one_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control of the measure: with no yield between intents, one turn built them all."""
    monkeypatch.setattr(_pending, "_INTENTS_PER_STEP", 10**9)
    assert await _intents_per_turn(tmp_path, monkeypatch, 10_000) == 10_000


async def _checks_per_turn(monkeypatch: pytest.MonkeyPatch, size: int) -> int:
    """The most nodes one loop turn ran the fail-fast check of, in a ``size``-node bulk."""
    mesh, _ = make_mesh()
    async with LoopTurns() as turns:
        _note_each_call(monkeypatch, turns, _core.MeshCore, "fail_fast")
        answer = await first_value(mesh.create_nodes(_bulk(size)), timeout=60)
    assert answer.success
    assert sum(turns.noted.values()) == size
    return turns.most_in_one_turn()


async def test_a_10000_node_bulk_is_checked_a_step_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fails against 000ebcd: the call to create_nodes checked all 10,000 nodes at once."""
    assert await _checks_per_turn(monkeypatch, 10_000) <= CHECK_STEP


async def test_a_bulk_of_one_step_is_checked_in_the_call_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Negative control of the measure: up to CHECK_STEP nodes are checked in one go."""
    assert await _checks_per_turn(monkeypatch, CHECK_STEP) == CHECK_STEP


def _bulk_with(kind: str, size: int) -> CreateNodesRequest:
    nodes = [MeshNode(path=f"s/n{i:05d}", content={"i": i}) for i in range(size)]
    bad = size - 7
    if kind == "duplicate":
        nodes[bad] = MeshNode(path="s/n00003", content={})
    elif kind == "path":  # past the model's own check: what check_strings exists for
        nodes[bad] = MeshNode.model_construct(path="s//n", content={})
    elif kind == "reserved":
        nodes[bad] = MeshNode(path="s/_owner", content={})
    return CreateNodesRequest.model_construct(
        nodes=tuple(nodes), access=ALICE, request_id="r-bulk", window=1000,
        reissued_after_unavailable=False,
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["duplicate", "path", "reserved"])
async def test_a_large_bulk_is_refused_as_a_small_one_is(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stepwise checks answer what the checks in the call answer (the control: the same
    bulk with every size checked in the call), naming the same first offender."""
    size = 3 * CHECK_STEP
    mesh, store = make_mesh()
    stepwise: CreateNodesResponse = await first_value(
        mesh.create_nodes(_bulk_with(kind, size)), timeout=60
    )
    monkeypatch.setattr(_mesh, "CHECK_STEP", 10**9)  # every bulk checked in the call
    at_once: CreateNodesResponse = await first_value(
        mesh.create_nodes(_bulk_with(kind, size)), timeout=60
    )
    assert not stepwise.success
    assert (stepwise.rejection_reason, stepwise.error) == (at_once.rejection_reason, at_once.error)
    assert store.inner.write_log == []  # refused before any write


async def test_a_bulk_builds_and_admits_its_intents_with_the_collector_held_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: at c1ffe01 a 10,000-node bulk answered UNAVAILABLE built and admitted its
    intents with the collector on, every 700 new objects a young collection over objects that
    stay alive (and through them the middle and full passes: the 47-57 ms full pass of
    bench/loop_steps.py's ``bulk_unavailable``). Now each step runs with it held off, and it is
    back on between steps (the negative control: the check below sees the collector's state)."""
    mesh, store = make_mesh(ledger=PendingWriteLedger(journal_dir=tmp_path / "journal"))
    await mesh.create(MeshNode(path="s/warm", content={}), access=ALICE)
    store.refuse_writes_as_unreachable()
    seen: dict[str, set[bool]] = {"intent": set(), "admit": set(), "between": set()}

    def noting(owner: type, name: str, key: str) -> None:
        original = getattr(owner, name)

        def noted(self: Any, *args: Any, **kwargs: Any) -> Any:
            seen[key].add(gc.isenabled())
            return original(self, *args, **kwargs)

        monkeypatch.setattr(owner, name, noted)

    noting(_pending.PendingWrites, "_intent", "intent")
    noting(LedgerCore, "_admit", "admit")
    sleep = asyncio.sleep

    async def between(delay: float, *args: Any) -> Any:
        seen["between"].add(gc.isenabled())
        return await sleep(delay, *args)

    monkeypatch.setattr(asyncio, "sleep", between)
    answer = await first_value(mesh.create_nodes(_bulk(2000)), timeout=60)
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE
    assert len(answer.recorded_for_reissue) == 2000
    assert seen == {"intent": {False}, "admit": {False}, "between": {True}}
    assert gc.isenabled()


async def _calls_after_the_durable_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """Python-level calls made in the loop step in which a 10,000-node bulk's journal results
    come back (from there the answer is built in that one step), with the answer checked."""
    mesh, store = make_mesh(ledger=PendingWriteLedger(journal_dir=tmp_path / "journal"))
    await mesh.create(MeshNode(path="s/warm", content={}), access=ALICE)
    store.refuse_writes_as_unreachable()
    calls = [0]
    counting = [False]

    def profile(_frame: Any, event: str, _arg: Any) -> None:
        if event == "call" and counting[0]:
            calls[0] += 1

    def stop() -> None:
        counting[0] = False
        sys.setprofile(None)

    original = PendingWriteLedger.record_many_durably

    async def durably(self: PendingWriteLedger, intents: Any) -> Any:
        results = await original(self, intents)
        asyncio.get_running_loop().call_soon(stop)  # the end of this step
        counting[0] = True
        sys.setprofile(profile)
        return results

    monkeypatch.setattr(PendingWriteLedger, "record_many_durably", durably)
    try:
        answer = await first_value(mesh.create_nodes(_bulk(10_000)), timeout=60)
    finally:
        stop()
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE
    assert len(answer.recorded_for_reissue) == 10_000 and answer.not_recorded == ()
    return calls[0]


async def test_a_bulk_answered_unavailable_reads_its_journal_results_back_in_no_call_a_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails against 08c1361: once the journal's durable step returned, the step that turns its
    10,000 results into the answer made a ``Recorded`` per node (10,000 calls; 25 ms of the loop
    in bench/loop_steps.py's ``bulk_unavailable``). Now every recorded node shares one."""
    assert await _calls_after_the_durable_step(tmp_path, monkeypatch) < 1_000


async def test_the_call_count_sees_a_call_made_per_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control of the measure: a ``Recorded`` made per node again is counted."""
    monkeypatch.setattr(_pending, "_RECORDED", _MadePerUse())
    assert await _calls_after_the_durable_step(tmp_path, monkeypatch) >= 10_000


class _MadePerUse:
    """Stands for ``_RECORDED``: each read of it (one per node) makes one more call."""

    @property
    def recorded(self) -> bool:
        return True

    note = ""
    why_not = ""
