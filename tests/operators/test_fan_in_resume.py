"""fan_in carries resume tokens: one provider's position is the merge's (its Initial's token and
reset kept, a resumed Delta opening the gate as is); several providers have no single position,
so the merge's frames carry none."""

from __future__ import annotations

from typing import Any

from reactivex.subject import Subject
from reactivex.testing import TestScheduler

from rxmesh.model import FrameKind, MeshNode, NodeQuery, QueryFrame
from rxmesh.operators import fan_in
from rxmesh.providers import InMemoryStore
from tests.helpers import done


def merged(providers: int, *frames: tuple[int, QueryFrame]) -> list[QueryFrame]:
    subjects: list[Subject[QueryFrame]] = [Subject() for _ in range(providers)]
    got: list[Any] = []
    fan_in({f"s{i}": s for i, s in enumerate(subjects)}, scheduler=TestScheduler()).subscribe(
        got.append, lambda e: got.append(e)
    )
    for index, frame in frames:
        subjects[index].on_next(frame)
    return got


def initial(token: str, *paths: str, reset: bool = False) -> QueryFrame:
    frame = QueryFrame.initial([MeshNode(path=p) for p in paths])
    return frame.model_copy(update={"resume_token": token, "reset": reset})


def delta(token: str, *paths: str, resumed: bool = False) -> QueryFrame:
    frame = QueryFrame.delta([MeshNode(path=p) for p in paths])
    return frame.model_copy(update={"resume_token": token, "resumed": resumed})


def test_one_provider_keeps_its_initials_token_and_reset() -> None:
    first, following = merged(1, (0, initial("t1", "p/a", reset=True)), (0, delta("t2", "p/b")))
    assert first.kind is FrameKind.INITIAL and first.resume_token == "t1" and first.reset
    assert following.resume_token == "t2" and following.provider == "s0"


def test_one_providers_resumed_delta_opens_the_gate_and_is_forwarded_as_is() -> None:
    got = merged(1, (0, delta("t5", "p/a", resumed=True)), (0, delta("t6", "p/b")))
    assert [(f.kind, f.resumed, f.resume_token) for f in got] == [
        (FrameKind.DELTA, True, "t5"),
        (FrameKind.DELTA, False, "t6"),
    ]
    assert got[0].silent_providers == () and got[0].provider == "s0"


def test_negative_control_a_plain_delta_first_is_still_a_contract_violation() -> None:
    (first,) = merged(1, (0, delta("t5", "p/a")))
    assert first.kind is FrameKind.INITIAL and first.silent_providers == ("s0",)
    assert first.resume_token is None  # no Initial gave a position


def test_several_providers_carry_no_token() -> None:
    got = merged(
        2,
        (0, initial("a1", "p/a")),
        (1, initial("b1", "q/a")),
        (0, delta("a2", "p/b")),
        (1, delta("b2", "q/b")),
    )
    assert [f.kind for f in got] == [FrameKind.INITIAL, FrameKind.DELTA, FrameKind.DELTA]
    assert [f.resume_token for f in got] == [None, None, None]
    assert [f.provider for f in got[1:]] == ["s0", "s1"]


def test_a_real_store_resumed_through_fan_in() -> None:
    store = InMemoryStore()
    done(store.write(MeshNode(path="p/a")))
    got: list[QueryFrame] = []
    fan_in({"m": store.query(_query())}, scheduler=TestScheduler()).subscribe(got.append).dispose()
    token = got[0].resume_token
    assert token is not None
    done(store.delete("p/a"))
    resumed: list[QueryFrame] = []
    fan_in({"m": store.query(_query(), token)}, scheduler=TestScheduler()).subscribe(
        resumed.append
    ).dispose()
    assert resumed[0].resumed and resumed[0].removed == ("p/a",)


def _query() -> NodeQuery:
    return NodeQuery(partition="p")
