"""The hypothesis state machine over :class:`~tests.machine._driver.Driver`, and its profiles."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from rxmesh.model import partition_of
from rxmesh.providers import Store
from tests.helpers import machine_settings

from ._driver import Batch, Driver, Op, Toggle
from ._harness import PARTITIONS, PATHS, perms_choices

RIGHTFUL = ("system", "alice", "bob")  # carol never creates, so she never owns a partition
ANYONE = ("system", "alice", "bob", "carol")
GRANTEES = ("alice", "bob")  # carol holds no grant anywhere
TIMES = (1, 2, 4)  # 4 outlasts the three retries of the ladder
TOGGLES = (
    "refuse_writes",
    "refuse_reads",
    "restore",
    "restore+gap",
    *(f"fault:{p}:{n}" for p in PARTITIONS for n in TIMES),
)


FOCUS = st.shared(st.sampled_from(PATHS), key="rxmesh-model-focus")
"""One path per example (shared by all its batches), so that requests collide on it."""
SECOND = st.shared(st.sampled_from(PATHS), key="rxmesh-model-second")


@functools.cache
def _ops(focus: str, second: str) -> st.SearchStrategy[Op]:
    path = st.sampled_from((focus, focus, second, second, *PATHS))

    def pair() -> st.SearchStrategy[tuple[str, str]]:
        between = [(a, b) for a, b in ((focus, second), (second, focus)) if a != b]
        anywhere = st.tuples(path, path).filter(lambda p: p[0] != p[1])
        return st.one_of(st.sampled_from(between), anywhere) if between else anywhere

    create = st.builds(lambda u, p: Op("create", u, (p,)), st.sampled_from(RIGHTFUL), path)
    bulk = st.builds(
        lambda u, ps: Op("bulk", u, tuple(ps)),
        st.sampled_from(RIGHTFUL),
        st.lists(path, min_size=1, max_size=3, unique=True),
    )
    resend = st.builds(lambda back: Op("resend", back=back), st.sampled_from((0, 0, 1, 2, 3)))
    retry = st.just(Op("retry"))
    again = st.builds(lambda back: Op("again", back=back), st.sampled_from((0, 0, 1, 2)))
    undo = st.builds(
        lambda back, which: Op("undo", back=back, which=which),
        st.sampled_from((0, 0, 1, 2)),
        st.integers(0, 2),
    )
    steal = st.builds(lambda back: Op("steal", "carol", back=back), st.sampled_from((0, 0, 1)))
    reuse = st.builds(lambda back: Op("reuse", back=back), st.sampled_from((0, 0, 1)))
    versioned = st.sampled_from((0, 0, 1))  # 1: expected_version=1, no request id
    return st.one_of(
        create,
        create,
        bulk,
        bulk,
        st.builds(
            lambda u, p, w: Op("update", u, (p,), which=w), st.sampled_from(ANYONE), path, versioned
        ),
        st.builds(
            lambda u, p, w: Op("delete", u, (p,), which=w), st.sampled_from(ANYONE), path, versioned
        ),
        st.builds(lambda u, p: Op("delete", u, (p,)), st.sampled_from(ANYONE), path),
        st.builds(
            lambda u, p, w: Op("move", u, p, which=w), st.sampled_from(ANYONE), pair(), versioned
        ),
        st.builds(
            lambda part, who, perms: Op("grant", "system", (part,), who, perms),
            st.sampled_from(PARTITIONS),
            st.sampled_from(GRANTEES),
            st.sampled_from(perms_choices()),
        ),
        st.builds(
            lambda part, who: Op("revoke", "system", (part,), who),
            st.sampled_from(PARTITIONS),
            st.sampled_from(GRANTEES),
        ),
        resend,
        again,
        retry,
        retry,
        undo,
        undo,
        steal,
        reuse,
    )


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    """1-3 requests, most of them about the example's focus path (so that they collide), a
    toggle (none; a fault on a partition's facts armed just before the batch; any toggle just
    before it; any toggle after the batch's k-th store call), and whether results are delivered
    a loop turn late (interleaving at every store call) or at once (interleaving at retries
    only)."""
    focus, second = draw(FOCUS), draw(SECOND)
    ops = _ops(focus, second)
    count = draw(COUNTS)
    return Batch(tuple(draw(ops) for _ in range(count)), draw(_toggles(focus)), draw(st.booleans()))


COUNTS = st.sampled_from((1, 2, 2, 3))


@functools.cache
def _toggles(focus: str) -> st.SearchStrategy[Toggle | None]:
    before = st.builds(
        lambda p, n: Toggle(f"fault:{p}:{n}", 0),
        st.sampled_from((partition_of(focus), partition_of(focus), *PARTITIONS)),
        st.sampled_from(TIMES),
    )
    return st.one_of(
        st.none(),
        before,
        st.builds(Toggle, st.sampled_from((*TOGGLES, "restore", "restore")), st.just(0)),
        st.builds(Toggle, st.sampled_from(TOGGLES), st.sampled_from((1, 2, 3, 5))),
    )


class MeshMachine(RuleBasedStateMachine):
    """Three users and the system, two partitions, every verb, concurrent batches, faults.

    Every step is judged by the oracle (see ``tests/machine/test_machine.py`` for the invariants);
    teardown drains the ledger (a final restore and a gap) and judges that too.
    """

    only: ClassVar[frozenset[str] | None] = None
    inner: ClassVar[Callable[[], Awaitable[Store]] | None] = None
    close_inner: ClassVar[Callable[[Store], Awaitable[None]] | None] = None
    twice: ClassVar[Callable[[Store], Awaitable[list[str]]] | None] = None
    real_time: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        cls = type(self)
        self.driver = Driver(
            only=cls.only,
            inner=cls.inner,
            close=cls.close_inner,
            twice=cls.twice,
            real_time=cls.real_time,
        )
        self._drained = False

    @rule(batch=batches())
    def send(self, batch: Batch) -> None:
        self.driver.batch(batch)

    @rule(batch=batches())
    def send_more(self, batch: Batch) -> None:  # a second rule: batches are most steps
        self.driver.batch(batch)

    @rule(action=st.sampled_from(TOGGLES))
    def toggle(self, action: str) -> None:
        self.driver.knob(action)

    @rule()
    def drain(self) -> None:
        self.driver.drain()

    def teardown(self) -> None:
        try:
            if not self.driver.oracle.failed:  # a failed step is the finding; do not add to it
                self.driver.drain()
        finally:
            self.driver.close()


def profile(examples: int, steps: int, *, shrink: bool = True) -> settings:
    """The machine's settings (:func:`tests.helpers.machine_settings`); the environment variable
    ``RXMESH_MODEL_EXAMPLES`` scales the number of examples (a long local run)."""
    return machine_settings(
        examples, steps, scale_variable="RXMESH_MODEL_EXAMPLES", shrink=shrink
    )


EMBEDDED = profile(examples=800, steps=24)
"""The CI profile on the embedded store (measured in the module docstring of test_machine)."""


def machine(**attributes: Any) -> type[MeshMachine]:
    """A subclass of :class:`MeshMachine` with class attributes set (``only``, ``inner``...)."""
    return type("MeshMachine", (MeshMachine,), attributes)


def run(machine_class: type[MeshMachine], config: settings) -> None:
    run_state_machine_as_test(machine_class, settings=config)
