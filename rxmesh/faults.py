"""The one classification of faults, and the wording of "not attempted".

Every layer of rxmesh (the query fan-in retry, the node-operation terminal arms, the standing-watch
classifier, the stream cache, the health text, the messaging handshake) calls these functions. A
second copy of any rule here is a defect even if it is identical today: copies drift silently.

A *DB frame* is any exception with a ``sqlstate`` attribute (a string, or ``None`` where the driver
knows none): asyncpg's ``PostgresError`` family, psycopg's errors, and rxmesh's own
:class:`~rxmesh.exceptions.StoreError`. Typing on the attribute keeps this module free of driver
imports; it imports without asyncpg installed.

Exception groups: :func:`is_transient_connect_fault` and :func:`is_standing_watch_transient`
judge a group transient only if every branch is (a defect next to a blip is still a defect);
:func:`is_no_answer_in_time` matches if any branch is a timeout (one hop timing out is enough).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator, Sequence

from rxmesh.exceptions import (
    DeliveryErrorType,
    DeliveryFailure,
    MeshDisposedError,
    QueryProviderStalledError,
    RxMeshError,
)

__all__ = [
    "TRANSIENT_CONNECT_SQLSTATES",
    "describe_may_have_partially_landed",
    "describe_not_attempted",
    "is_cooperative_cancellation",
    "is_coordination_unreachable",
    "is_no_answer_in_time",
    "is_standing_watch_transient",
    "is_transient_connect_fault",
]

TRANSIENT_CONNECT_SQLSTATES: frozenset[str] = frozenset(
    {
        # connection_exception family
        "08000",
        "08001",
        "08003",
        "08004",
        "08006",
        # admin shutdown, crash shutdown, cannot connect now
        "57P01",
        "57P02",
        "57P03",
        # too many connections, configuration limit exceeded
        "53300",
        "53400",
    }
)
"""SQLSTATEs that mean "the store could not be reached". 40001 and 40P01 are deliberately absent:
they are in-query races owned by whoever runs the statement."""

MAX_CHAIN_FRAMES = 256
"""The chain walk stops after this many frames (a guard against pathological chains)."""

NO_ANSWER_IN_TIME_PHRASES: tuple[str, ...] = (
    "response did not arrive on time",
    "placement operation timed out",
)
"""The transport's own two timeout phrases, as a forwarding hop flattens them into a FAILED NACK."""


def _next_frame(exc: BaseException) -> BaseException | None:
    if exc.__cause__ is not None:
        return exc.__cause__
    if exc.__suppress_context__:
        return None
    return exc.__context__


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """Yield ``exc`` and its causes outer -> inner (``__cause__``, else ``__context__``).

    Stops on a revisit or after :data:`MAX_CHAIN_FRAMES` frames. Branches of an exception group
    are not entered; callers that care about groups handle them.
    """
    seen: set[int] = set()
    current = exc
    while current is not None and len(seen) < MAX_CHAIN_FRAMES and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = _next_frame(current)


def is_db_frame(exc: BaseException) -> bool:
    """True for an exception that carries a ``sqlstate`` attribute (a string or ``None``)."""
    if not hasattr(exc, "sqlstate"):
        return False
    sqlstate = exc.sqlstate
    return sqlstate is None or isinstance(sqlstate, str)


def _is_network_frame(exc: BaseException) -> bool:
    # TimeoutError, ConnectionError and socket errors are all OSError subclasses in Python 3.
    # rxmesh's own verdicts are never network frames, even those with an OSError co-base
    # (NodeAccessDeniedError is a PermissionError so that ``except PermissionError`` catches it).
    return isinstance(exc, OSError) and not isinstance(exc, RxMeshError)


_MAX_TOTAL_FRAMES = MAX_CHAIN_FRAMES * MAX_CHAIN_FRAMES
"""Frames one classification may visit in all (a guard for groups that share branches)."""


class _Walk:
    """The seen-set of one path through a chain, and the frame budget of the whole classification.

    A group's branch is walked with a :meth:`fork`: it remembers its own path's frames (a branch
    leading back to its group stops), not its siblings' (two branches sharing a cause are each
    judged). The 256-frame cap is per path; a total budget bounds a pathological tree of groups.
    """

    def __init__(
        self,
        seen: frozenset[int] = frozenset(),
        budget: list[int] | None = None,
        groups: frozenset[int] = frozenset(),
    ) -> None:
        self.seen: set[int] = set(seen)
        self._budget = budget if budget is not None else [_MAX_TOTAL_FRAMES]
        self._groups = groups

    def fork(self) -> _Walk:
        """A walk for one branch: this path's frames so far, the same total budget."""
        return _Walk(frozenset(self.seen), self._budget, self._groups)

    def within(self, group: BaseException) -> _Walk:
        """A walk for a branch of ``group`` judged on its own: it remembers only the groups it
        is nested in (so a branch leading back to one of them stops), not the frames outside."""
        groups = self._groups | {id(group)}
        return _Walk(groups, self._budget, groups)

    def frames(self, exc: BaseException | None) -> Iterator[BaseException]:
        current = exc
        while (
            current is not None
            and len(self.seen) < MAX_CHAIN_FRAMES
            and id(current) not in self.seen
            and self._budget[0] > 0
        ):
            self.seen.add(id(current))
            self._budget[0] -= 1
            yield current
            current = _next_frame(current)


def _unreachable(exc: BaseException | None, walk: _Walk, db_seen: bool) -> bool:
    for frame in walk.frames(exc):
        if isinstance(frame, BaseExceptionGroup):
            branches = frame.exceptions
            return bool(branches) and all(
                _unreachable(b, walk.fork(), db_seen) for b in branches
            )
        if is_db_frame(frame):
            if getattr(frame, "sqlstate", None) in TRANSIENT_CONNECT_SQLSTATES:
                return True
            db_seen = True
            continue
        if _is_network_frame(frame) and db_seen:
            return True
    return False


def is_transient_connect_fault(exc: BaseException | None) -> bool:
    """Whether ``exc`` means "the store could not be reached" (the operation was not evaluated).

    The walk goes outer -> inner, remembering whether a DB frame has been seen:

    - a DB frame whose sqlstate is in :data:`TRANSIENT_CONNECT_SQLSTATES` -> True;
    - any other DB frame -> remember it and go on inward;
    - a network frame (``TimeoutError``, ``ConnectionError``, other ``OSError``) -> True only if a
      DB frame was seen outside it (drivers wrap the socket fault; the DB frame is outer);
    - end of chain, or ``None`` -> False.

    A bare ``TimeoutError`` is refused: a request timeout has its own policy and is not evidence
    of a storage outage. An exception group is unreachable only if every branch is.

    Example:
        >>> from rxmesh.exceptions import StoreError
        >>> try:
        ...     try:
        ...         raise ConnectionResetError(104, "Connection reset by peer")
        ...     except OSError as exc:
        ...         raise StoreError("lost connection", sqlstate=None) from exc
        ... except StoreError as err:
        ...     is_transient_connect_fault(err)
        True
    """
    seen: set[int] = set()  # <= 8 frames, no group, no revisit (by id): judged in this loop
    db_seen, current = False, exc
    while current is not None:
        if len(seen) == 8 or isinstance(current, BaseExceptionGroup) or id(current) in seen:
            return _unreachable(exc, _Walk(), db_seen=False)
        seen.add(id(current))
        if is_db_frame(current):
            if getattr(current, "sqlstate", None) in TRANSIENT_CONNECT_SQLSTATES:
                return True
            db_seen = True
        elif db_seen and _is_network_frame(current):
            return True
        current = _next_frame(current)
    return False


is_store_unreachable = is_transient_connect_fault
"""The same object as :func:`is_transient_connect_fault`, named for the node-operation layer."""


def _anywhere(
    exc: BaseException, walk: _Walk, matches: Callable[[BaseException], bool]
) -> bool:
    """Whether a frame of ``exc``'s chain, or of any branch of a group in it, ``matches``.

    The one walk of the "anywhere" classifiers (a timeout in a cancellation, a disposed mesh, no
    answer in time, nobody answering): outer -> inner, each group branch on its own path.
    """
    for frame in walk.frames(exc):
        if matches(frame):
            return True
        if isinstance(frame, BaseExceptionGroup):
            return any(_anywhere(b, walk.fork(), matches) for b in frame.exceptions)
    return False


def _is_timeout(frame: BaseException) -> bool:
    return isinstance(frame, TimeoutError)


def is_cooperative_cancellation(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a cooperative cancellation (someone asked this work to stop).

    True for an ``asyncio.CancelledError`` (or a one-branch exception group of one) with no
    ``TimeoutError`` anywhere in its chain. A cancellation carrying a timeout is a fault wearing a
    cancellation's type; it is not matched.
    """
    if exc is None:
        return False
    target: BaseException = exc
    if isinstance(target, BaseExceptionGroup):
        if len(target.exceptions) != 1:
            return False
        target = target.exceptions[0]
    if not isinstance(target, asyncio.CancelledError):
        return False
    return not _anywhere(exc, _Walk(), _is_timeout)


def _infrastructure_frame(frame: BaseException) -> bool:
    if isinstance(frame, TimeoutError):
        return False  # a time-box, not a blip
    if isinstance(frame, ConnectionError | socket.gaierror):
        return True
    return is_db_frame(frame) and getattr(frame, "transient", False) is True


def _watch_transient(exc: BaseException, walk: _Walk) -> bool:
    for frame in walk.frames(exc):
        if isinstance(frame, MeshDisposedError):
            return False
        if isinstance(frame, BaseExceptionGroup):
            branches = frame.exceptions
            return bool(branches) and all(
                _watch_transient_branch(b, walk.fork()) for b in branches
            )
        if isinstance(frame, QueryProviderStalledError) or _infrastructure_frame(frame):
            return True
    return False


def _is_disposed(frame: BaseException) -> bool:
    return isinstance(frame, MeshDisposedError)


def _first_group(exc: BaseException, walk: _Walk) -> BaseExceptionGroup[BaseException] | None:
    for frame in walk.frames(exc):
        if isinstance(frame, BaseExceptionGroup):
            return frame
    return None


def _watch_transient_branch(exc: BaseException, walk: _Walk) -> bool:
    # A disposed mesh anywhere (in the chain or in any group branch) ends the watch: a group with
    # a disposed branch is not transient in every branch, whatever the one rule says of the rest.
    if _anywhere(exc, walk.fork(), _is_disposed):
        return False
    # A group anywhere in the chain decides: transient only if every branch is, even
    # when a frame outside it (a network error raised from it, say) would pass on its own.
    search = walk.fork()  # remembers the frames down to the group, so a cycle back stops
    group = _first_group(exc, search)
    if group is not None:
        branches = group.exceptions
        return bool(branches) and all(
            _watch_transient_branch(b, search.within(group)) for b in branches
        )
    return _unreachable(exc, walk.fork(), db_seen=False) or _watch_transient(exc, walk.fork())


def is_standing_watch_transient(exc: BaseException | None) -> bool:
    """Whether a standing watch should re-open after ``exc`` (rather than end).

    True for a transient connect fault (the one rule), an infrastructure fault (a DB frame its
    driver marked transient, ``ConnectionError`` and subclasses, ``socket.gaierror``; never a bare
    ``TimeoutError``), or a :class:`~rxmesh.exceptions.QueryProviderStalledError` anywhere in the
    chain. An exception group anywhere in the chain is transient only if every flattened branch
    is. A disposed mesh, a query/schema error, a deserialization error or a plain defect is not.
    """
    if exc is None:
        return False
    return _watch_transient_branch(exc, _Walk())


def _names_no_answer(frame: BaseException) -> bool:
    if isinstance(frame, TimeoutError):
        return True
    if isinstance(frame, DeliveryFailure) and frame.error_type is DeliveryErrorType.FAILED:
        text = frame.message.casefold()
        return any(phrase in text for phrase in NO_ANSWER_IN_TIME_PHRASES)
    return False


def is_no_answer_in_time(exc: BaseException | None) -> bool:
    """Whether ``exc`` says "no answer arrived in time", in either of its two shapes.

    (a) a ``TimeoutError`` (the bound fired in this process), or (b) a
    :class:`~rxmesh.exceptions.DeliveryFailure` with ``error_type == FAILED`` whose text contains
    "Response did not arrive on time" or "Placement operation timed out" (case-insensitive).
    Any frame of the chain and any branch of an exception group counts. A NACK that carries a
    verdict (FORBIDDEN, NOT_FOUND, UNAVAILABLE, ...) never matches, whatever its text quotes.
    """
    if exc is None:
        return False
    return _anywhere(exc, _Walk(), _names_no_answer)


NOT_SENT_SQLSTATES: frozenset[str] = frozenset({"08001", "08004", "57P03", "53300", "53400"})
"""Unreachable SQLSTATEs that prove no statement left: the connection was never established."""


def _proves_not_sent(frame: BaseException) -> bool:
    if not is_db_frame(frame):
        return False
    if getattr(frame, "may_have_run", None) is False:
        return True
    return getattr(frame, "sqlstate", None) in NOT_SENT_SQLSTATES


def is_write_outcome_unknown(exc: BaseException | None) -> bool:
    """Whether a write that failed with ``exc`` may nevertheless have been applied.

    True only for a store-unreachable fault (the one rule) whose chain does not prove the
    statement never left this process: a connection lost during a call (08003/08006, 57P01, a
    stall after the statement was sent) leaves the outcome unknown — the COMMIT may have landed.
    A connect-phase refusal (:data:`NOT_SENT_SQLSTATES`), or a DB frame saying
    ``may_have_run=False`` (pool exhaustion, a connection known dead before the call), proves
    nothing was sent. A fault the store answered (a verdict) is not unknown: it was refused.
    """
    if not is_transient_connect_fault(exc):
        return False
    return not any(_proves_not_sent(frame) for frame in exception_chain(exc))


def describe_not_attempted(operation: str, *, written: Sequence[str] = ()) -> str:
    """The answer text for an operation the store could not evaluate.

    ``written`` names the system records the attempt did write before the store went away (a
    partition heal: its ownership record, root or grant). Then the text says so instead of
    "Nothing was written", which would be false; the node the caller asked for was not written
    either way, and retrying the same request stays meaningful (the records are idempotent).

    Example:
        >>> describe_not_attempted("Node creation at 'a/b'").startswith("Node creation at 'a/b'")
        True
        >>> "Nothing was written" in describe_not_attempted("x", written=["a/_owner"])
        False
    """
    if written:
        shown = ", ".join(f"'{path}'" for path in written)
        return (
            f"{operation} could not be completed: the data store was unreachable. The node(s) "
            f"it asked for were not written, but the partition records {shown} were, before the "
            "store went away (a partition heal; they are idempotent). This is an availability "
            "failure, not a refusal; retrying the same request (with the same node id) is "
            "meaningful."
        )
    return (
        f"{operation} could not be attempted: the data store was unreachable. Nothing was "
        "written. This is an availability failure, not a refusal; retrying the same request "
        "(with the same node id) is meaningful."
    )


def describe_may_have_partially_landed(operation: str) -> str:
    """The answer text for a failure after a write had started: part of it may be durable."""
    return (
        f"{operation} failed after writing had started: the data store became unreachable. An "
        "unknown subset of the request may already be durable. Read the current state before "
        "retrying; re-issuing the same request (with the same node ids) is safe only for what "
        "is not there."
    )


def is_coordination_unreachable(exc: BaseException | None) -> bool:
    """Whether ``exc`` says the other side could not be reached: no answer in time, or nobody
    there to answer.

    True when :func:`is_no_answer_in_time` is (its two timeout shapes, unchanged), or when a
    :class:`~rxmesh.exceptions.DeliveryFailure` whose ``error_type`` is ``NO_RESPONDERS`` is in
    the chain or in any branch of an exception group (the same walk as
    :func:`is_no_answer_in_time`: a seen-set and the 256-frame cap). NO_RESPONDERS is NATS's "no
    responders": it cannot tell "nobody ever serves this address" from "the process is down or
    has not re-subscribed yet", so it is an availability failure, not a verdict. It is judged by
    ``error_type`` alone, never by text. Everything else is refused: NOT_FOUND, FORBIDDEN,
    UNAVAILABLE and SHUTTING_DOWN NACKs (verdicts, whatever their text quotes), a FAILED NACK
    without the timeout phrases (also one quoting "no responders"), any other exception, ``None``.

    Example:
        >>> from rxmesh.exceptions import DeliveryErrorType, DeliveryFailure
        >>> is_coordination_unreachable(DeliveryFailure(DeliveryErrorType.NO_RESPONDERS, "x"))
        True
        >>> is_coordination_unreachable(DeliveryFailure(DeliveryErrorType.NOT_FOUND, "x"))
        False
    """
    if exc is None:
        return False
    if is_no_answer_in_time(exc):
        return True
    return _anywhere(exc, _Walk(), _nobody_answering)


def _nobody_answering(frame: BaseException) -> bool:
    return (
        isinstance(frame, DeliveryFailure) and frame.error_type is DeliveryErrorType.NO_RESPONDERS
    )
