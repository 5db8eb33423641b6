"""A terminal arm that itself fails (a defect) still answers, once, UNKNOWN — through the
observable, through first_value's direct path and in-process. FAILS against 60cf28a: the arm's
exception escaped the answer's task, so the observable never answered (the test's bounded wait
timed out) and Mesh.create raised the defect itself."""

from __future__ import annotations

import pytest
from reactivex import operators as ops

from rxmesh import Mesh, MeshNode
from rxmesh.aio import first_value
from rxmesh.exceptions import NodeOperationError
from rxmesh.mesh._arms import TerminalArm
from rxmesh.operations import CreateNodeRequest, CreateNodesRequest, RejectionReason
from rxmesh.testing import FaultInjectingStore
from tests.helpers import ALICE

from .conftest import make_mesh


def _break_the_arm(monkeypatch: pytest.MonkeyPatch) -> None:
    async def answer(self: TerminalArm, *args: object, **kwargs: object) -> object:
        raise RuntimeError("a defect in the terminal arm")

    monkeypatch.setattr(TerminalArm, "answer", answer)


async def _outage() -> tuple[Mesh, FaultInjectingStore]:
    mesh, store = make_mesh()
    await mesh.create(MeshNode(path="p/seed", content={}), access=ALICE)
    store.refuse_writes_as_unreachable()
    return mesh, store


async def test_a_failing_arm_answers_unknown_once_through_the_observable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mesh, _ = await _outage()
    _break_the_arm(monkeypatch)
    request = CreateNodeRequest(node=MeshNode(path="p/x", content={}), access=ALICE)
    answers = await first_value(mesh.create_node(request).pipe(ops.to_list()), timeout=5)
    assert len(answers) == 1
    assert answers[0].rejection_reason is RejectionReason.UNKNOWN


async def test_a_failing_arm_answers_unknown_when_awaited(monkeypatch: pytest.MonkeyPatch) -> None:
    mesh, _ = await _outage()
    _break_the_arm(monkeypatch)
    request = CreateNodeRequest(node=MeshNode(path="p/x", content={}), access=ALICE)
    answer = await first_value(mesh.create_node(request), timeout=5)
    assert answer.rejection_reason is RejectionReason.UNKNOWN
    with pytest.raises(NodeOperationError) as raised:
        await mesh.create(MeshNode(path="p/y", content={}), access=ALICE)
    assert type(raised.value) is NodeOperationError  # UNKNOWN's own type, not the defect


async def test_negative_control_a_working_arm_answers_unavailable() -> None:
    mesh, _ = await _outage()
    request = CreateNodeRequest(node=MeshNode(path="p/x", content={}), access=ALICE)
    answer = await first_value(mesh.create_node(request), timeout=5)
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE


async def test_a_failing_arm_is_entered_once_for_a_bulk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The terminal arm never retries, itself included: a bulk whose arm fails is answered by
    the backstop, the arm entered once. FAILS against 41e90aa: the bulk answered its own faults
    inside its run, so the arm's failure reached the run's fault path and the arm again."""
    mesh, store = await _outage()
    entered: list[object] = []

    async def answer(self: TerminalArm, *args: object, **kwargs: object) -> object:
        entered.append(args)
        raise RuntimeError("a defect in the terminal arm")

    monkeypatch.setattr(TerminalArm, "answer", answer)
    nodes = (MeshNode(path="p/a", content={}), MeshNode(path="p/b", content={}))
    request = CreateNodesRequest(nodes=nodes, access=ALICE)
    answers = await first_value(mesh.create_nodes(request).pipe(ops.to_list()), timeout=5)
    assert [answer.rejection_reason for answer in answers] == [RejectionReason.UNKNOWN]
    assert len(entered) == 1


async def test_negative_control_a_working_arm_answers_a_bulk_unavailable() -> None:
    mesh, _ = await _outage()
    nodes = (MeshNode(path="p/a", content={}), MeshNode(path="p/b", content={}))
    answer = await first_value(mesh.create_nodes(CreateNodesRequest(nodes=nodes, access=ALICE)))
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE
