"""``rxmesh.http_status``: each answer's HTTP status, headers and body, from real answers of a
mesh (the observable responses and the in-process errors alike).

Fails at 1d389e8 because there was no mapping (``rxmesh.http`` did not exist): every service
wrote its own, and the in-process errors carried neither ``recorded_for_reissue`` nor
``outcome_unknown``. Negative controls: a success carries no Retry-After and no failure status;
an exception that is not a node operation's answer is refused, not mapped to 500.
"""

from __future__ import annotations

import pytest

import rxmesh
from rxmesh import CreateNodeRequest, CreateNodeResponse, MeshNode, RejectionReason
from rxmesh.aio import first_value
from rxmesh.exceptions import NodeOperationError
from rxmesh.http import STATUS_BY_REASON, HttpAnswer, http_status
from rxmesh.operations import NodeOperationResponse
from tests.helpers import ALICE, BOB
from tests.mesh.conftest import make_mesh


def node(path: str = "shop/orders/1") -> MeshNode:
    return MeshNode(path=path, node_type="Order", content={"total": 1})


def test_every_reason_has_a_status() -> None:
    assert set(STATUS_BY_REASON) == set(RejectionReason)
    assert rxmesh.http_status is http_status


async def test_unavailable_is_503_with_retry_after_and_says_it_was_recorded() -> None:
    mesh, store = make_mesh()
    await mesh.create(node("shop/seed"), access=ALICE)
    store.refuse_writes_as_unreachable()
    response = await first_value(
        mesh.create_node(CreateNodeRequest(node=node(), access=ALICE, request_id="k-1")), timeout=5
    )
    answer = http_status(response, retry_after=7)
    assert answer == HttpAnswer(503, {"retry-after": "7"}, answer.body)
    assert answer.body["request_id"] == "k-1"
    assert answer.body["rejection_reason"] == "UNAVAILABLE"
    assert answer.body["recorded_for_reissue"] is True
    assert answer.body["outcome_unknown"] is False
    try:
        await mesh.create(node("shop/orders/2"), access=ALICE, request_id="k-2")
    except NodeOperationError as exc:
        raised = http_status(exc)
    assert raised.status == 503 and raised.headers == {"retry-after": "5"}
    assert raised.body["request_id"] == "k-2" and raised.body["recorded_for_reissue"] is True
    assert set(raised.body) >= {"success", "error", "outcome_unknown", "rejection_reason"}
    mesh.dispose()


async def test_each_judged_refusal_has_its_status() -> None:
    mesh, _store = make_mesh()
    stored = await mesh.create(node(), access=ALICE)
    seen: dict[str, int] = {}
    calls = {
        "NODE_ALREADY_EXISTS": mesh.create(node(), access=ALICE),
        "INVALID_PATH": mesh.create({"path": "shop/bad path"}, access=ALICE),
        "VALIDATION_FAILED": mesh.create({"path": "shop/x", "extra": 1}, access=ALICE),
        "FORBIDDEN": mesh.update(node(), access=BOB),
        "VERSION_CONFLICT": mesh.update(node(), access=ALICE, expected_version=stored.version + 1),
    }
    for reason, call in calls.items():
        try:
            await call
        except NodeOperationError as exc:
            answer = http_status(exc)
            assert answer.body["rejection_reason"] == reason, answer
            assert answer.headers == {}  # Retry-After only for UNAVAILABLE
            seen[reason] = answer.status
    assert seen == {
        "NODE_ALREADY_EXISTS": 409,
        "INVALID_PATH": 422,
        "VALIDATION_FAILED": 422,
        "FORBIDDEN": 403,
        "VERSION_CONFLICT": 409,
    }
    unknown = NodeOperationResponse.fail("r", RejectionReason.UNKNOWN, "Unexpected error: X")
    assert http_status(unknown).status == 500
    assert http_status(NodeOperationError("boom")).status == 500  # raised without an answer
    mesh.dispose()


async def test_negative_control_a_success_is_201_or_200_without_retry_after() -> None:
    mesh, _store = make_mesh()
    response = await first_value(
        mesh.create_node(CreateNodeRequest(node=node(), access=ALICE)), timeout=5
    )
    assert isinstance(response, CreateNodeResponse)
    created = http_status(response)
    assert (created.status, created.headers) == (201, {})
    assert created.body["node"]["path"] == "shop/orders/1"
    deleted = await first_value(mesh.delete_node({"path": "shop/orders/1", "access": ALICE}))
    assert http_status(deleted)[:2] == (200, {})
    mesh.dispose()


def test_negative_control_what_is_not_an_answer_is_refused() -> None:
    with pytest.raises(TypeError, match="ValueError"):
        http_status(ValueError("not an answer"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="retry_after"):
        http_status(NodeOperationError("x"), retry_after=-1)
