"""``rxmesh._util.trusted``: a model built without validation is what ``model_construct`` makes.

The builder sets BaseModel's four slots through their descriptors, fetched once; these tests
pin that the descriptors are the ones attribute assignment resolves for every model rxmesh
builds this way (a pydantic release that moved a slot would fail here, not corrupt nodes), and
that what it builds compares, dumps, hashes and copies as a constructed model does.
"""

from __future__ import annotations

import inspect
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

from rxmesh._util import trusted as _trusted
from rxmesh._util.trusted import fields_of, trusted
from rxmesh.model import CommitAnnounced, MeshNode, NodeChange

_SLOTS = {
    "__dict__": _trusted.set_dict,
    "__pydantic_fields_set__": _trusted.set_fields_set,
    "__pydantic_extra__": _trusted.set_extra,
    "__pydantic_private__": _trusted.set_private,
}


@pytest.mark.parametrize("model", [MeshNode, NodeChange, CommitAnnounced])
@pytest.mark.parametrize("slot", sorted(_SLOTS))
def test_the_setters_are_the_descriptors_assignment_resolves(
    model: type[BaseModel], slot: str
) -> None:
    descriptor = inspect.getattr_static(model, slot)
    assert descriptor is BaseModel.__dict__[slot]
    assert _SLOTS[slot] == descriptor.__set__


def test_a_trusted_node_is_the_constructed_node() -> None:
    values = {
        "path": "p/a",
        "node_type": "Doc",
        "content": {"k": [1, 2.5, "x"]},
        "created_by": "u",
        "created_at": datetime(2026, 12, 1, tzinfo=UTC),
        "version": 3,
        "request_id": "r-1",
    }
    built = trusted(MeshNode, dict(values), fields_of(MeshNode))
    constructed = MeshNode.model_construct(**values)
    validated = MeshNode(**values)
    assert type(built) is MeshNode
    assert built == constructed == validated
    assert built.__dict__ == validated.__dict__
    assert built.model_fields_set == validated.model_fields_set
    assert built.__pydantic_extra__ is None and built.__pydantic_private__ is None
    assert built.model_dump() == validated.model_dump()
    scalar = {**values, "content": "x"}
    assert hash(trusted(MeshNode, scalar, fields_of(MeshNode))) == hash(MeshNode(**scalar))
    assert built.model_copy(update={"version": 4}).version == 4
    assert built.version == 3  # the copy did not change the original
    assert repr(built) == repr(validated)


def test_a_shared_fields_set_is_not_changed_by_a_copy() -> None:
    """Negative control for sharing one fields set between nodes: ``model_copy`` must copy it."""
    shared = fields_of(MeshNode)
    before = set(shared)
    one = trusted(MeshNode, {**MeshNode(path="p/a").__dict__}, shared)
    one.model_copy(update={"content": 1})
    assert shared == before
