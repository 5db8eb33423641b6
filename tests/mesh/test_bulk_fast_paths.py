"""The bulk create's shortcuts answer as the long way did: the duplicate check (one set, then
the loop naming the first path met again), the content rules (skipped only when there are
none), the partitions of a window (one ``startswith`` a node while they share one), and
``mesh.created`` (not called per node when nobody watches it; every landed node when
someone does)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rxmesh import CreateNodesRequest, CreateNodesResponse, Mesh, MeshNode, RejectionReason
from rxmesh.aio import first_value
from rxmesh.exceptions import NodeValidationError
from rxmesh.mesh._bulk import _partitions
from tests.helpers import ALICE

from .conftest import make_mesh


async def _ask(mesh: Mesh, request: CreateNodesRequest) -> CreateNodesResponse:
    return await first_value(mesh.create_nodes(request), timeout=10)


def _nodes(*names: str) -> tuple[MeshNode, ...]:
    return tuple(MeshNode(path=f"acme/{n}", node_type="Doc", content={"n": n}) for n in names)


async def test_the_first_path_met_again_is_named() -> None:
    mesh, store = make_mesh()
    for names, named in ((("a", "b", "b", "a"), "b"), (("a", "b", "c", "a", "c"), "a")):
        response = await _ask(mesh, CreateNodesRequest(nodes=_nodes(*names), access=ALICE))
        assert response.rejection_reason is RejectionReason.INVALID_PATH
        assert response.error == f"path 'acme/{named}' appears more than once in the batch"
    assert store.writes_attempted() == []
    assert (await _ask(mesh, CreateNodesRequest(nodes=_nodes("a", "b"), access=ALICE))).success


async def test_every_new_node_meets_the_node_types_and_validators() -> None:
    seen: list[str] = []

    class Types:
        def validate(self, node: MeshNode) -> None:
            seen.append(f"type:{node.path}")

    def rule(node: MeshNode, _access: object) -> None:
        seen.append(f"rule:{node.path}")
        if node.path.endswith("/bad"):
            raise NodeValidationError("no bad nodes")

    mesh, _ = make_mesh(validators=[rule], node_types=Types())
    assert (await _ask(mesh, CreateNodesRequest(nodes=_nodes("a", "b"), access=ALICE))).success
    assert seen == ["rule:acme/a", "type:acme/a", "rule:acme/b", "type:acme/b"]
    refused = await _ask(mesh, CreateNodesRequest(nodes=_nodes("c", "bad"), access=ALICE))
    assert refused.rejection_reason is RejectionReason.VALIDATION_FAILED
    assert "no bad nodes" in (refused.error or "")


async def test_negative_control_without_rules_nothing_is_judged_and_all_land() -> None:
    mesh, _ = make_mesh()
    response = await _ask(mesh, CreateNodesRequest(nodes=_nodes("c", "bad"), access=ALICE))
    assert response.success and len(response.created) == 2


async def test_a_watcher_of_created_sees_every_landed_node_and_only_those() -> None:
    mesh, _ = make_mesh()
    assert (await _ask(mesh, CreateNodesRequest(nodes=_nodes("old"), access=ALICE))).success
    seen: list[MeshNode] = []
    watching = mesh.created.subscribe(seen.append)
    response = await _ask(mesh, CreateNodesRequest(nodes=_nodes("old", "x", "y"), access=ALICE))
    assert response.already_present == ("acme/old",)
    assert seen == list(response.created) and [n.path for n in seen] == ["acme/x", "acme/y"]
    watching.dispose()
    assert (await _ask(mesh, CreateNodesRequest(nodes=_nodes("z"), access=ALICE))).success
    assert [n.path for n in seen] == ["acme/x", "acme/y"]  # the negative control: not watched


_SEGMENT = st.sampled_from(["a", "ab", "b", "a-b", "x1"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_SEGMENT, min_size=1, max_size=3).map("/".join), max_size=6))
def test_the_partitions_of_a_window_are_the_sorted_set(paths: list[str]) -> None:
    batch = [MeshNode.model_construct(path=path, node_type="Doc") for path in paths]
    assert _partitions(batch) == sorted({node.partition for node in batch})


def test_negative_control_a_prefix_is_not_a_partition() -> None:
    batch = [MeshNode(path=p, node_type="Doc") for p in ("a/x", "ab/y", "a")]
    assert _partitions(batch) == ["a", "ab"]
