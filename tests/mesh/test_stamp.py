"""The mesh's stamp builds what ``model_copy(update=...)`` builds, without its copies."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from rxmesh import MeshNode
from rxmesh.mesh._core import stamp

AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
NODES = [
    MeshNode(path="p/a", content={"x": [1, {"y": None}]}),
    MeshNode(path="p/b", node_type="Doc", version=7, created_by="old", request_id="r0"),
    MeshNode(path="p", node_type="Partition", content={}),
]


@pytest.mark.parametrize("node", NODES, ids=lambda n: n.path)
def test_a_stamp_equals_the_model_copy_it_replaces(node: MeshNode) -> None:
    expected = node.model_copy(
        update={
            "created_by": "alice",
            "created_at": AT,
            "version": max(1, node.version),
            "request_id": "r1",
        }
    )
    stamped = stamp(node, "alice", AT, "r1")
    assert stamped == expected
    assert stamped.model_dump_json() == expected.model_dump_json()
    assert node.created_by != "alice" and node.request_id != "r1"  # the original is untouched
    with pytest.raises(ValidationError):
        stamped.version = 3  # type: ignore[misc]  # frozen, as a model_copy is


def test_negative_control_another_stamp_is_another_node() -> None:
    assert stamp(NODES[0], "alice", AT, "r1") != stamp(NODES[0], "bob", AT, "r1")
