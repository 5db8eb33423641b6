"""The instrumentation events: small frozen records of what the library already knows.

Each event says one thing that happened, with bounded facts only (a verb, a reason, a verdict, a
count, a duration). Identifiers that are not bounded (a request id, a store's name) are carried
for traces and logs; an adapter that makes metric labels must not use them as labels, and no
event carries a node path or a user.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "SUCCESS",
    "CacheChainBuilt",
    "CacheChainEvicted",
    "ChangeFeedGapDeclared",
    "Event",
    "HealthStatusChanged",
    "IntentRecorded",
    "IntentReissued",
    "IntentSettled",
    "LoopStalled",
    "NodeOperationAnswered",
    "OperationStarted",
    "ProbeRoundTrip",
    "RetryScheduled",
    "WatchReopened",
    "WatchSurfaced",
]

SUCCESS = "success"
"""The ``outcome`` of a node operation that succeeded (a failure's outcome is its reason)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """The base of every instrumentation event (an instrument may dispatch on the type)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationStarted(Event):
    """A node operation began (handed to :meth:`Instrument.start_operation`, not to ``on_event``).

    Attributes:
        verb: ``"create"``, ``"create_nodes"``, ``"update"``, ``"delete"``, ``"move"``, ...
        request_id: the request's id (for traces; never a metric label).
        path: the node path concerned, for traces that opt in; never a metric label.
        reissue: whether this is the ledger's re-issue of an earlier UNAVAILABLE create (then
            ``request_id`` is the original request's id).
    """

    verb: str
    request_id: str | None = None
    path: str | None = None
    reissue: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeOperationAnswered(Event):
    """A node operation answered.

    Attributes:
        verb: as in :class:`OperationStarted`.
        reason: the rejection reason's value (``"UNAVAILABLE"``, ...), ``None`` on success.
        attempts: store attempts made (1 + the retries the ladder scheduled).
        duration: seconds from the start of the operation's scope to the answer.
        stall: the stall-adjacency sentence when this process's loop stalled just before a
            store-unreachable fault, else ``""``.
        request_id: the request's id (for traces; never a metric label).
        reissue: whether it answered the ledger's re-issue.
    """

    verb: str
    reason: str | None
    attempts: int = 1
    duration: float = 0.0
    stall: str = ""
    request_id: str | None = None
    reissue: bool = False

    @property
    def outcome(self) -> str:
        """``"success"`` or the rejection reason's value."""
        return SUCCESS if self.reason is None else self.reason

    @property
    def stalled(self) -> bool:
        """Whether the answer carries a stall adjacency."""
        return bool(self.stall)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryScheduled(Event):
    """The retry ladder (either driver) scheduled a retry.

    Attributes:
        attempt: the retry about to be made, counted from 1.
        delay: seconds waited before it.
        error_type: the failed attempt's exception type name.
        unreachable: whether the one rule (:func:`rxmesh.faults.is_store_unreachable`)
            classifies that error as "the store could not be reached".
        verb: the node operation it belongs to, when it runs inside one's scope.
    """

    attempt: int
    delay: float
    error_type: str
    unreachable: bool
    verb: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchReopened(Event):
    """A standing watch is re-opening after a transient fault (``reopen`` of ``max_consecutive``
    in a row, after ``delay`` seconds)."""

    reopen: int
    max_consecutive: int
    delay: float
    error_type: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchSurfaced(Event):
    """A standing watch ended with its fault: ``cause`` is ``"not_transient"`` (never re-opened)
    or ``"budget_spent"`` (``reopens`` re-opens in a row read nothing)."""

    cause: str
    error_type: str
    reopens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheChainBuilt(Event):
    """The synced-query cache opened a fresh upstream chain for a query."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheChainEvicted(Event):
    """The synced-query cache evicted a chain: ``cause`` is ``"fault"``, ``"completed"`` or
    ``"silent_provider"``; ``unreachable`` whether a fault was the store being away."""

    cause: str
    unreachable: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class IntentRecorded(Event):
    """An UNAVAILABLE create was recorded in the pending-write ledger."""

    request_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class IntentReissued(Event):
    """The recovery re-issued a recorded intent (once, on evidence)."""

    request_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class IntentSettled(Event):
    """A recorded intent settled with ``verdict`` (``"LANDED"``, ``"ALREADY_PRESENT"``,
    ``"DROPPED"``); ``reason`` is the refusal's reason of a DROPPED one."""

    request_id: str
    verdict: str
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangeFeedGapDeclared(Event):
    """A store declared a change-feed gap after ``lost_seconds`` without a whole feed."""

    store: str
    lost_seconds: float
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeRoundTrip(Event):
    """A delivery probe of a store's change feed arrived ``seconds`` after it was sent."""

    store: str
    seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopStalled(Event):
    """A :class:`~rxmesh.diagnosis.LoopStallMonitor` saw the event loop stall."""

    seconds: float
    gc_seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthStatusChanged(Event):
    """A health registry's report changed status (``previous`` is ``None`` on its first report).

    ``checks`` names the selection: ``"all"``, or the tags asked for joined by ``","``.
    """

    previous: str | None
    status: str
    checks: str
