"""fan_in with one provider forwards its ordered Initial as it came (no merge built, no re-sort);
anything else still goes through the merge, which orders and de-duplicates (issue 16, item 3)."""

from __future__ import annotations

from typing import Any

from reactivex.subject import Subject
from reactivex.testing import TestScheduler

from rxmesh.model import FrameKind, MeshNode, QueryFrame
from rxmesh.operators import fan_in


def _merged(*frames: QueryFrame, providers: int = 1) -> list[QueryFrame]:
    subjects: list[Subject[QueryFrame]] = [Subject() for _ in range(providers)]
    got: list[Any] = []
    fan_in({f"s{i}": s for i, s in enumerate(subjects)}, scheduler=TestScheduler()).subscribe(
        got.append
    )
    for frame in frames:
        subjects[0].on_next(frame)
    for subject in subjects[1:]:
        subject.on_next(QueryFrame.initial([]))
    return got


def test_a_lone_providers_ordered_initial_is_forwarded_without_a_rebuild() -> None:
    initial = QueryFrame.initial([MeshNode(path=f"p/{i:04d}") for i in range(1000)])
    (merged,) = _merged(initial)
    assert merged.kind is FrameKind.INITIAL
    assert merged.nodes is initial.nodes  # the very tuple: nothing was rebuilt
    assert merged.provider is None and merged.silent_providers == ()


def test_an_unordered_or_duplicated_initial_still_goes_through_the_merge() -> None:
    """The negative control: the shortcut is taken only for a strictly ordered Initial."""
    unordered = QueryFrame(
        kind=FrameKind.INITIAL,
        nodes=(MeshNode(path="p/b"), MeshNode(path="p/a", version=1), MeshNode(path="p/a")),
    )
    (merged,) = _merged(unordered)
    assert [n.path for n in merged.nodes] == ["p/a", "p/b"]  # ordered, one row a path


def test_a_delta_before_the_gate_opens_is_folded_into_the_kept_initial() -> None:
    initial = QueryFrame.initial([MeshNode(path="p/a"), MeshNode(path="p/b")])
    delta = QueryFrame.delta([MeshNode(path="p/c")], removed=["p/a"])
    (merged,) = _merged(initial, delta, providers=2)  # the gate waits for the second provider
    assert [n.path for n in merged.nodes] == ["p/b", "p/c"]
