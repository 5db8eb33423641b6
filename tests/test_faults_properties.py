"""Properties of the one rule over random chains (SPEC §1), both sides."""

from __future__ import annotations

from dataclasses import dataclass

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
