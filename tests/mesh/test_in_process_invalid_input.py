"""Every invalid input to an in-process verb is caught by one ``except NodeOperationError``:
the verbs take a node as a mapping of its fields and build every request inside the mesh, so
the model's refusal is raised as the refusal's own error (INVALID_PATH, VALIDATION_FAILED),
naming the field, before any write.

Fails at 1d389e8 because ``mesh.create`` took only a ``MeshNode`` (a mapping raised
AttributeError) and ``mesh.delete("shop/bad path/1")`` / ``mesh.move`` built their request
outside the mesh, so pydantic's ``ValidationError`` escaped ``except NodeOperationError``.
Negative control: a ``MeshNode`` built by the caller still raises pydantic's ValidationError in
the caller's own code (the mesh never sees it) — the reason the mapping form exists.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from rxmesh import MeshNode, RejectionReason
from rxmesh.exceptions import InvalidPathError, NodeOperationError, NodeValidationError
from tests.helpers import ALICE

from .conftest import make_mesh


@pytest.mark.parametrize(
    ("call", "kind", "reason"),
    [
        (
            lambda mesh: mesh.create({"path": "shop/bad path/1", "content": {}}, access=ALICE),
            InvalidPathError,
            RejectionReason.INVALID_PATH,
        ),
        (
            lambda mesh: mesh.create({"path": "shop/a", "content": {}, "x": 1}, access=ALICE),
            NodeValidationError,
            RejectionReason.VALIDATION_FAILED,
        ),
        (
            lambda mesh: mesh.update({"path": "shop/bad path/1", "content": {}}, access=ALICE),
            InvalidPathError,
            RejectionReason.INVALID_PATH,
        ),
        (
            lambda mesh: mesh.delete("shop/bad path/1", access=ALICE),
            InvalidPathError,
            RejectionReason.INVALID_PATH,
        ),
        (
            lambda mesh: mesh.move("shop/a", "shop/bad path/1", access=ALICE),
            InvalidPathError,
            RejectionReason.INVALID_PATH,
        ),
        (
            lambda mesh: mesh.delete("shop/a", access=ALICE, expected_version=0),
            NodeValidationError,
            RejectionReason.VALIDATION_FAILED,
        ),
    ],
)
async def test_one_except_clause_catches_every_invalid_input(
    call: Any, kind: type[NodeOperationError], reason: RejectionReason
) -> None:
    mesh, store = make_mesh()
    try:
        await call(mesh)
    except NodeOperationError as exc:  # the one clause a service needs
        caught: NodeOperationError = exc
    else:
        pytest.fail("the invalid input was accepted")
    assert isinstance(caught, kind), repr(caught)
    assert caught.reason == reason
    assert isinstance(caught, ValueError)  # every input refusal is also a ValueError
    assert not store.inner.nodes("shop")  # refused before any write
    mesh.dispose()


async def test_a_valid_mapping_is_created() -> None:
    mesh, _store = make_mesh()
    stored = await mesh.create(
        {"path": "shop/a", "node_type": "Order", "content": {}}, access=ALICE
    )
    assert stored.path == "shop/a" and stored.node_type == "Order"
    mesh.dispose()


def test_negative_control_a_model_built_by_the_caller_refuses_in_the_callers_code() -> None:
    with pytest.raises(ValidationError) as raised:
        MeshNode(path="shop/bad path/1")
    assert not isinstance(raised.value, NodeOperationError)
    assert isinstance(raised.value, ValueError)  # so `except ValueError` catches both forms
