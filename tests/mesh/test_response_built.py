"""``NodeResponse.fail`` / ``CreateNodeResponse.created`` build answers without pydantic's
``model_construct`` (issue 15: an UNAVAILABLE answer is the hot path of an outage). What they
build must be indistinguishable from what ``model_construct`` builds: fields, field set,
equality, serialisation and copying."""

from __future__ import annotations

from typing import Any

import pytest

from rxmesh.model import MeshNode
from rxmesh.operations import (
    CreateNodeResponse,
    CreateNodesResponse,
    NodeOperationResponse,
    NodeResponse,
    RejectionReason,
)

NODE = MeshNode(path="p/a", node_type="T", content={"k": [1, 2]}, version=1)

CASES: list[tuple[type[NodeResponse], dict[str, Any]]] = [
    (CreateNodeResponse, {}),
    (CreateNodeResponse, {"outcome_unknown": True, "recorded_for_reissue": True}),
    (CreateNodesResponse, {"not_created": (NODE,), "recorded_for_reissue": ("p/a",)}),
    (CreateNodesResponse, {"created": (NODE,), "already_present": ("p/b",)}),
    (NodeOperationResponse, {"node": NODE, "already_absent": True}),
    (NodeOperationResponse, {}),
]


def _same(a: NodeResponse, b: NodeResponse) -> None:
    assert type(a) is type(b)
    assert a == b
    assert a.__dict__ == b.__dict__
    assert list(a.__dict__) == list(b.__dict__)  # field order, hence the JSON's
    assert a.model_fields_set == b.model_fields_set
    assert a.model_dump_json() == b.model_dump_json()
    assert a.model_dump(exclude_unset=True) == b.model_dump(exclude_unset=True)
    assert repr(a) == repr(b)
    assert a.model_copy(update={"error": "x"}) == b.model_copy(update={"error": "x"})


@pytest.mark.parametrize(("kind", "fields"), CASES)
def test_fail_builds_what_model_construct_builds(
    kind: type[NodeResponse], fields: dict[str, Any]
) -> None:
    built = kind.fail("r1", RejectionReason.UNAVAILABLE, "text", **fields)
    expected = kind.model_construct(
        request_id="r1",
        success=False,
        rejection_reason=RejectionReason.UNAVAILABLE,
        error="text",
        **fields,
    )
    _same(built, expected)
    assert kind.model_validate_json(built.model_dump_json()) == built  # round-trips validated


def test_created_builds_what_model_construct_builds() -> None:
    _same(
        CreateNodeResponse.created("r2", NODE),
        CreateNodeResponse.model_construct(request_id="r2", success=True, node=NODE),
    )


def test_negative_control_the_check_sees_a_different_field_set() -> None:
    """The comparison can fail: an answer whose field set differs (pydantic's field set decides
    ``exclude_unset``) is told apart even when its values are equal."""
    built = CreateNodeResponse.fail("r3", RejectionReason.UNAVAILABLE, "t")
    widened = CreateNodeResponse.model_construct(
        request_id="r3",
        success=False,
        rejection_reason=RejectionReason.UNAVAILABLE,
        error="t",
        outcome_unknown=False,
    )
    with pytest.raises(AssertionError):
        _same(built, widened)


def test_each_answer_has_its_own_field_values() -> None:
    """Defaults are copied, never shared: two answers do not share one ``__dict__``."""
    a = CreateNodeResponse.fail("a", RejectionReason.UNKNOWN, "t")
    b = CreateNodeResponse.fail("b", RejectionReason.UNKNOWN, "t")
    assert a.__dict__ is not b.__dict__
    assert (a.request_id, b.request_id) == ("a", "b")


def test_a_new_request_id_is_a_uuid4_in_hex() -> None:
    """``new_request_id`` (made from 16 random bytes, not a ``UUID`` object) is exactly what
    ``uuid.uuid4().hex`` gives: 32 hex digits that parse as a version-4, RFC 4122 UUID."""
    import uuid

    from rxmesh.operations import new_request_id

    ids = {new_request_id() for _ in range(2000)}
    assert len(ids) == 2000
    for text in ids:
        parsed = uuid.UUID(hex=text)
        assert (parsed.version, parsed.variant, parsed.hex) == (4, uuid.RFC_4122, text)
    # The negative control: random hex of the same length is (almost always) not one.
    assert uuid.UUID(hex="f" * 32).version != 4


@pytest.mark.parametrize("kind", [CreateNodeResponse, CreateNodesResponse, NodeOperationResponse])
def test_the_answers_are_built_without_model_construct(
    kind: type[NodeResponse], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one-step build is the one taken: with ``model_construct`` made to fail, ``fail`` (and
    ``created``) still answer. Against the first version of ``_built``, which took required
    fields (no default) for non-constant defaults and fell back every time, this fails."""

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("model_construct was called")

    monkeypatch.setattr(kind, "model_construct", classmethod(refuse))
    answer = kind.fail("r", RejectionReason.UNAVAILABLE, "text")
    assert (answer.request_id, answer.success, answer.error) == ("r", False, "text")
    if kind is CreateNodeResponse:
        assert CreateNodeResponse.created("r", NODE).node == NODE


def test_a_required_field_missing_falls_back_to_model_construct() -> None:
    """The negative control of the fast path's guard: a build that leaves a required field out
    is model_construct's (which leaves it unset), not a response with a placeholder in it."""
    built = CreateNodeResponse._built({"request_id": "r"})
    assert "success" not in built.__dict__
