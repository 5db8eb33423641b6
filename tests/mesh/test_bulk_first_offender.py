"""A bulk refused by its store-free checks names the FIRST entry, in entry order, that fails any
of them (docs/answers.md: "an invalid entry fails the batch naming the first offender").

Issue 31, item 11: at 1d389e8 each check ran over every entry before the next check began
(the paths, then the strings, then the repeated paths, then the content), so a later entry
failing an earlier check was named instead of the first offender.
"""

from __future__ import annotations

from typing import Any

import pytest

from rxmesh import MeshNode
from rxmesh.operations import CreateNodesRequest, RejectionReason
from tests.helpers import ALICE, answers
from tests.mesh.conftest import make_mesh

CHECK_STEP = 1000


def ok(path: str) -> MeshNode:
    return MeshNode(path=path, node_type="Doc", content={"t": "x"})


def no_type(path: str) -> MeshNode:
    """Neither a node_type nor content: refused by the content checks."""
    return MeshNode(path=path)


def bad_type(path: str) -> MeshNode:
    """A node_type that is no name, let through by a construction that skips validation."""
    return MeshNode.model_construct(path=path, node_type="1 bad", content={})


def nul(path: str) -> MeshNode:
    return MeshNode(path=path, node_type="Doc", content={"t": "a\x00b"})


async def refusal(nodes: list[MeshNode], **request: Any) -> Any:
    mesh, store = make_mesh()
    try:
        got = await answers(
            mesh.create_nodes(
                CreateNodesRequest.model_construct(
                    nodes=tuple(nodes), **{"access": ALICE, "request_id": "bulk-1", **request}
                )
            ),
            timeout=10.0,
            settle=0.01,
        )
    finally:
        mesh.dispose()
    assert len(got) == 1 and not isinstance(got[0], BaseException), got
    assert not got[0].success, got[0]
    assert store.statistics().operations == 0  # refused before any store call
    return got[0]


# Each: the entries, the reason and the text naming the first offender. Every one FAILS at
# 1d389e8, which named the later entry.
FIRST_FAILS_A_LATER_CHECK = {
    # The case: the content check (entry 1) ran after the path check (entry 2).
    "issue-31": (
        [ok("acme/ok"), no_type("acme/first-bad"), ok("acme/_second_bad")],
        RejectionReason.VALIDATION_FAILED,
        "first invalid entry 'acme/first-bad': node 'acme/first-bad' has neither",
    ),
    "node-type-before-path": (
        [ok("acme/ok"), bad_type("acme/t"), ok("acme/_x")],
        RejectionReason.VALIDATION_FAILED,
        "nodes.1.node_type: ",
    ),
    "content-before-repeat": (
        [ok("acme/ok"), nul("acme/nul"), ok("acme/ok")],
        RejectionReason.VALIDATION_FAILED,
        "first invalid entry 'acme/nul': node 'acme/nul': content.t contains a NUL",
    ),
    "repeat-before-path": (
        [ok("acme/ok"), ok("acme/ok"), ok("acme/_x")],
        RejectionReason.INVALID_PATH,
        "path 'acme/ok' appears more than once in the batch",
    ),
    "content-before-created-by": (
        [
            ok("acme/ok"),
            no_type("acme/first-bad"),
            MeshNode.model_construct(path="acme/c", node_type="Doc", created_by="a\x00"),
        ],
        RejectionReason.VALIDATION_FAILED,
        "first invalid entry 'acme/first-bad'",
    ),
}


@pytest.mark.parametrize("case", list(FIRST_FAILS_A_LATER_CHECK))
async def test_the_first_offender_is_named_whatever_check_it_fails(case: str) -> None:
    """Fails at 1d389e8: the later entry failing an earlier check was named."""
    nodes, reason, text = FIRST_FAILS_A_LATER_CHECK[case]
    answer = await refusal(nodes)
    assert answer.rejection_reason is reason, answer.error
    assert answer.error.startswith(text), answer.error


async def test_a_large_bulk_checked_stepwise_names_the_first_offender_too() -> None:
    """Fails at 1d389e8. The offenders sit past the first step of checks (a bulk of more than
    CHECK_STEP entries is checked in the attempt, a step at a time)."""
    nodes = [ok(f"acme/n{i}") for i in range(CHECK_STEP + 500)]
    nodes[CHECK_STEP + 100] = no_type("acme/first-bad")
    nodes[CHECK_STEP + 200] = ok("acme/_second_bad")
    answer = await refusal(nodes)
    assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED, answer.error
    assert answer.error.startswith("first invalid entry 'acme/first-bad'"), answer.error


# -- negative controls -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "reason", "text"),
    [
        ([ok("acme/ok"), ok("acme/_x")], RejectionReason.INVALID_PATH, "nodes.1.path: "),
        (
            [ok("acme/ok"), no_type("acme/first-bad")],
            RejectionReason.VALIDATION_FAILED,
            "first invalid entry 'acme/first-bad'",
        ),
        (
            [ok("acme/a"), ok("acme/b"), ok("acme/a")],
            RejectionReason.INVALID_PATH,
            "path 'acme/a' appears more than once in the batch",
        ),
        (
            [ok("acme/a"), nul("acme/n1"), nul("acme/n2")],
            RejectionReason.VALIDATION_FAILED,
            "first invalid entry 'acme/n1'",
        ),
        (
            [ok("acme/_x"), no_type("acme/first-bad")],
            RejectionReason.INVALID_PATH,
            "nodes.0.path: ",
        ),
    ],
    ids=["path-only", "content-only", "repeat-only", "two-of-one-check", "path-first"],
)
async def test_an_offender_that_is_already_first_is_named_as_before(
    nodes: list[MeshNode], reason: RejectionReason, text: str
) -> None:
    answer = await refusal(nodes)
    assert answer.rejection_reason is reason, answer.error
    assert answer.error.startswith(text), answer.error


async def test_the_request_s_own_fields_come_before_any_entry() -> None:
    answer = await refusal([ok("acme/ok"), no_type("acme/first-bad")], request_id="r\x00")
    assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED, answer.error
    assert answer.error.startswith("request_id: "), answer.error


async def test_a_valid_bulk_is_created() -> None:
    mesh, _ = make_mesh()
    try:
        got = await answers(
            mesh.create_nodes(CreateNodesRequest(nodes=[ok("acme/a"), ok("acme/b")], access=ALICE)),
            timeout=10.0,
        )
    finally:
        mesh.dispose()
    assert got[0].success, got[0]
    assert [n.path for n in got[0].created] == ["acme/a", "acme/b"]
