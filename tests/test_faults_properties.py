"""Properties of the one rule over random chains, both sides."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rxmesh.exceptions import MeshDisposedError, NodeOperationError, QueryProviderStalledError
from rxmesh.faults import (
    MAX_CHAIN_FRAMES,
    TRANSIENT_CONNECT_SQLSTATES,
    is_standing_watch_transient,
    is_transient_connect_fault,
)


class FakeDbError(Exception):
    """A DB frame from no driver: only the ``sqlstate`` attribute makes it one."""

    def __init__(self, sqlstate: str | None) -> None:
        super().__init__(f"sqlstate {sqlstate}")
        self.sqlstate = sqlstate


NON_DB_NON_OS: list[type[BaseException]] = [
    RuntimeError,
    ValueError,
    KeyError,
    TypeError,
    LookupError,
    ArithmeticError,
    AssertionError,
    NodeOperationError,
    MeshDisposedError,
]


@dataclass(frozen=True)
class Link:
    """How a frame points at the next inner one."""

    kind: str  # "cause", "context" or "suppressed-context"


links = st.sampled_from([Link("cause"), Link("context"), Link("suppressed-context")])
reachable_links = st.sampled_from([Link("cause"), Link("context")])


def link(frames: list[BaseException], how: list[Link]) -> BaseException:
    for outer, inner, way in zip(frames, frames[1:], how, strict=False):
        if way.kind == "cause":
            outer.__cause__ = inner
            outer.__suppress_context__ = True
        else:
            outer.__context__ = inner
            outer.__suppress_context__ = way.kind == "suppressed-context"
    return frames[0]


def non_db_frame(cls: type[BaseException], text: str) -> BaseException:
    if cls is NodeOperationError:
        return NodeOperationError(text)
    return cls(text)


non_db_frames = st.builds(non_db_frame, st.sampled_from(NON_DB_NON_OS), st.text(max_size=10))

NON_TRANSIENT_SQLSTATES = ["42P01", "23505", "42601", "42501", "40001", "40P01", "57014", None]

any_frames = st.one_of(
    non_db_frames,
    st.builds(FakeDbError, st.sampled_from(NON_TRANSIENT_SQLSTATES)),
    st.sampled_from([TimeoutError, ConnectionResetError, BrokenPipeError, OSError]).map(
        lambda cls: cls()
    ),
)


@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(min_value=1, max_value=40))
def test_a_chain_of_non_db_non_os_frames_is_never_unreachable(data: st.DataObject, n: int) -> None:
    frames = data.draw(st.lists(non_db_frames, min_size=n, max_size=n))
    how = data.draw(st.lists(links, min_size=n - 1, max_size=n - 1))
    exc = link(frames, how)
    assert is_transient_connect_fault(exc) is False
    assert is_standing_watch_transient(exc) is False


@settings(max_examples=200, deadline=None)
@given(
    st.data(),
    st.integers(min_value=1, max_value=40),
    st.sampled_from(sorted(TRANSIENT_CONNECT_SQLSTATES)),
)
def test_a_reachable_db_frame_with_a_transient_sqlstate_makes_the_chain_unreachable(
    data: st.DataObject, n: int, sqlstate: str
) -> None:
    frames = data.draw(st.lists(any_frames, min_size=n, max_size=n))
    position = data.draw(st.integers(min_value=0, max_value=n))
    frames.insert(position, FakeDbError(sqlstate))
    how = data.draw(st.lists(reachable_links, min_size=n, max_size=n))
    exc = link(frames, how)
    assert len(frames) <= MAX_CHAIN_FRAMES
    assert is_transient_connect_fault(exc) is True


@settings(max_examples=100, deadline=None)
@given(st.data(), st.integers(min_value=1, max_value=8))
def test_a_group_is_unreachable_exactly_when_every_branch_is(data: st.DataObject, n: int) -> None:
    transient = st.sampled_from(sorted(TRANSIENT_CONNECT_SQLSTATES)).map(FakeDbError)
    refused = st.one_of(
        non_db_frames, st.builds(FakeDbError, st.sampled_from(NON_TRANSIENT_SQLSTATES))
    )
    branches = data.draw(st.lists(st.one_of(transient, refused), min_size=n, max_size=n))
    expected = all(is_transient_connect_fault(b) for b in branches)
    group = BaseExceptionGroup("g", branches)
    assert is_transient_connect_fault(group) is expected
    assert is_transient_connect_fault(BaseExceptionGroup("g", list(reversed(branches)))) is expected


@settings(max_examples=100, deadline=None)
@given(st.data(), st.integers(min_value=1, max_value=20))
def test_a_stalled_query_anywhere_reachable_is_standing_watch_transient(
    data: st.DataObject, n: int
) -> None:
    frames = data.draw(st.lists(non_db_frames, min_size=n, max_size=n))
    frames = [f for f in frames if not isinstance(f, MeshDisposedError)]
    position = data.draw(st.integers(min_value=0, max_value=len(frames)))
    frames.insert(position, QueryProviderStalledError(["p"], 15.0))
    how = data.draw(st.lists(reachable_links, min_size=len(frames), max_size=len(frames)))
    assert is_standing_watch_transient(link(frames, how)) is True


def _full_walk(exc: BaseException) -> bool:
    """The rule as the full walk applies it (what the short-chain loop must agree with)."""
    from rxmesh.faults import _unreachable, _Walk

    return _unreachable(exc, _Walk(), db_seen=False)


every_frame = st.one_of(
    any_frames,
    st.builds(FakeDbError, st.sampled_from(sorted(TRANSIENT_CONNECT_SQLSTATES))),
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(every_frame, min_size=1, max_size=12),
    st.lists(links, max_size=12),
    st.one_of(st.none(), st.integers(min_value=0, max_value=11)),
)
def test_the_short_chain_loop_agrees_with_the_full_walk(
    frames: list[BaseException], how: list[Link], back_to: int | None
) -> None:
    """``is_transient_connect_fault`` judges a short plain chain in a loop of its own and hands
    every other shape (a group, a revisit, more than 8 frames) to the full walk: over chains of
    up to 12 frames, some leading back to an earlier frame, both answer alike."""
    head = link(frames, how)
    if back_to is not None and back_to < len(frames):
        frames[-1].__cause__ = frames[back_to]  # a chain that leads back (a revisit)
    assert is_transient_connect_fault(head) == _full_walk(head)


def test_negative_control_a_revisit_is_not_judged_twice() -> None:
    """The case the revisit check exists for: network frame -> non-transient DB frame -> back
    to the network frame. The walk stops at the revisit (False); judging the network frame a
    second time, now with a DB frame seen, would answer True."""
    network = ConnectionResetError(104, "reset")
    db = FakeDbError("42P01")
    network.__cause__ = db
    db.__cause__ = network
    assert is_transient_connect_fault(network) is False
    assert _full_walk(network) is False
    grouped = ExceptionGroup("g", [FakeDbError("08006")])
    assert is_transient_connect_fault(grouped) is True  # a group goes to the full walk


def test_a_short_plain_chain_is_judged_without_the_full_walk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop is the one taken for the usual chain (a DB frame over a socket fault): with the
    full walk made to fail, it still answers; a group still goes to the walk (the control)."""
    import rxmesh.faults as faults

    def refuse(*_: object, **__: object) -> bool:
        raise AssertionError("the full walk was taken")

    monkeypatch.setattr(faults, "_unreachable", refuse)
    outer = FakeDbError(None)
    outer.__cause__ = ConnectionResetError(104, "reset")
    assert is_transient_connect_fault(outer) is True
    assert is_transient_connect_fault(FakeDbError("42P01")) is False
    with pytest.raises(AssertionError, match="full walk"):
        is_transient_connect_fault(ExceptionGroup("g", [FakeDbError("08006")]))


def test_a_frame_whose_equality_raises_is_still_judged() -> None:
    """Revisits are told by identity: an exception type whose ``__eq__`` raises (anything a
    driver or a caller may raise) is walked like any other frame, in the loop and in the walk;
    the control is the same chain judged by the full walk."""

    class Touchy(Exception):
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("compared")

        __hash__ = Exception.__hash__

    outer = FakeDbError(None)
    middle = Touchy("x")
    outer.__cause__ = middle
    middle.__cause__ = ConnectionResetError(104, "reset")
    assert is_transient_connect_fault(outer) is True
    assert _full_walk(outer) is True
