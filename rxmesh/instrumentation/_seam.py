"""The seam itself: installed instruments, the one fast check, emitting, and operation scopes.

Every emit point in the library reads one module attribute first::

    if _seam.enabled:
        _seam.emit(RetryScheduled(...))

so with nothing installed an emit point builds no event and calls nothing. An instrument that
raises is logged at ERROR (with its traceback) and counted; the other instruments still get the
event and the library's answer never changes.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from loguru import logger

from rxmesh.faults import is_store_unreachable
from rxmesh.instrumentation import _events

__all__ = [
    "Installation",
    "Instrument",
    "InstrumentationStatistics",
    "OperationScope",
    "OperationTrace",
    "changefeed_gap_declared",
    "current",
    "emit",
    "install",
    "installed",
    "operation",
    "retry_scheduled",
    "statistics",
    "watch_reopened",
    "watch_surfaced",
]

enabled = False
"""True while at least one instrument is installed: the fast check of every emit point."""

_instruments: tuple[Instrument, ...] = ()
_lock = threading.Lock()
_errors = 0
_emitted = 0
clock: Callable[[], float] = time.perf_counter
"""The time source of operation durations (seconds); tests may replace it."""
_current: contextvars.ContextVar[OperationScope | None] = contextvars.ContextVar(
    "rxmesh_operation", default=None
)


class _Gap(Protocol):
    @property
    def source(self) -> str: ...
    @property
    def lost_at(self) -> datetime: ...
    @property
    def resumed_at(self) -> datetime: ...
    @property
    def reason(self) -> str: ...


@runtime_checkable
class Instrument(Protocol):
    """What :func:`install` accepts: anything with ``on_event(event)``.

    An instrument that also has ``start_operation(started) -> OperationTrace | None`` is asked
    for a trace of every node operation (the OpenTelemetry adapter makes a span there).
    """

    def on_event(self, event: _events.Event) -> None: ...


class OperationTrace(Protocol):
    """One instrument's record of one node operation (a span, say)."""

    def on_retry(self, event: _events.RetryScheduled) -> None: ...

    def on_answered(self, event: _events.NodeOperationAnswered) -> None: ...

    def on_abandoned(self, error_type: str) -> None: ...


@dataclass(frozen=True, slots=True)
class InstrumentationStatistics:
    """A snapshot of the seam: instruments installed, events emitted, instrument errors."""

    instruments: int
    events: int
    instrument_errors: int


class Installation:
    """The handle :func:`install` returns: :meth:`uninstall` it (or use it as a context
    manager) to remove the instrument again. Uninstalling twice is harmless."""

    __slots__ = ("_instrument", "_removed")

    def __init__(self, instrument: Instrument) -> None:
        self._instrument = instrument
        self._removed = False

    @property
    def instrument(self) -> Instrument:
        """The installed instrument."""
        return self._instrument

    def uninstall(self) -> None:
        """Remove the instrument; the last one removed turns the seam back into a no-op."""
        global _instruments, enabled
        with _lock:
            if self._removed:
                return
            self._removed = True
            remaining = list(_instruments)
            remaining.remove(self._instrument)
            _instruments = tuple(remaining)
            enabled = bool(_instruments)

    def __enter__(self) -> Installation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.uninstall()


def install(instrument: Instrument) -> Installation:
    """Install ``instrument``: from now on it receives every event (several may be installed).

    Raises:
        TypeError: ``instrument`` has no callable ``on_event``.
    """
    global _instruments, enabled
    if not callable(getattr(instrument, "on_event", None)):
        raise TypeError(f"an instrument needs an on_event method, got {type(instrument).__name__}")
    with _lock:
        _instruments = (*_instruments, instrument)
        enabled = True
    return Installation(instrument)


def installed() -> tuple[Instrument, ...]:
    """The instruments installed now, in installation order."""
    return _instruments


def statistics() -> InstrumentationStatistics:
    """A frozen snapshot of the seam's counters."""
    return InstrumentationStatistics(len(_instruments), _emitted, _errors)


def _failed(instrument: object, what: str, exc: Exception) -> None:
    global _errors
    _errors += 1
    logger.bind(instrument=type(instrument).__name__, error_type=type(exc).__name__).opt(
        exception=exc
    ).error(
        "instrument {} raised {} on {}: {}; ignored, the library goes on",
        type(instrument).__name__,
        type(exc).__name__,
        what,
        exc,
    )


def emit(event: _events.Event) -> None:
    """Hand ``event`` to every installed instrument; one that raises is logged and counted."""
    global _emitted
    _emitted += 1
    for instrument in _instruments:
        try:
            instrument.on_event(event)
        except Exception as exc:  # noqa: BLE001 - logged at ERROR and counted, never dropped
            _failed(instrument, type(event).__name__, exc)


def retry_scheduled(error: BaseException, attempt: int, delay: float) -> None:
    """The ladder scheduled retry ``attempt`` after ``error``: emit it, and tell the node
    operation whose scope is current (its trace records the attempt)."""
    scope = _current.get()
    event = _events.RetryScheduled(
        attempt=attempt,
        delay=delay,
        error_type=type(error).__name__,
        unreachable=is_store_unreachable(error),
        verb=None if scope is None else scope.verb,
    )
    emit(event)
    if scope is not None:
        scope.retried(event)


def watch_reopened(fault: BaseException, reopen: int, max_consecutive: int, delay: float) -> None:
    """A standing watch re-opens (``reopen`` of ``max_consecutive``) after ``delay`` seconds."""
    emit(
        _events.WatchReopened(
            reopen=reopen,
            max_consecutive=max_consecutive,
            delay=delay,
            error_type=type(fault).__name__,
        )
    )


def watch_surfaced(cause: str, fault: BaseException, reopens: int) -> None:
    """A standing watch ends with ``fault`` (``cause``: ``not_transient`` or ``budget_spent``)."""
    emit(_events.WatchSurfaced(cause=cause, error_type=type(fault).__name__, reopens=reopens))


def changefeed_gap_declared(gap: _Gap) -> None:
    """A store declared ``gap`` (a :class:`~rxmesh.model.ChangeFeedGap`)."""
    lost = (gap.resumed_at - gap.lost_at).total_seconds()
    emit(_events.ChangeFeedGapDeclared(store=gap.source, lost_seconds=lost, reason=gap.reason))


class OperationScope:
    """One node operation, as instruments see it (see :func:`operation`).

    ``with scope:`` makes it current, so the ladder's retries inside are counted as its attempts;
    :meth:`answered` emits :class:`~rxmesh.instrumentation.NodeOperationAnswered` (once).
    """

    __slots__ = (
        "_answered",
        "_started",
        "_token",
        "_traces",
        "reissue",
        "request_id",
        "retries",
        "verb",
    )

    def __init__(self, started: _events.OperationStarted) -> None:
        self.verb = started.verb
        self.request_id = started.request_id
        self.reissue = started.reissue
        self.retries = 0
        self._answered = False
        self._token: contextvars.Token[OperationScope | None] | None = None
        self._started = clock()
        traces: list[tuple[object, OperationTrace]] = []
        for instrument in _instruments:
            start = getattr(instrument, "start_operation", None)
            if start is None:
                continue
            try:
                trace = start(started)
            except Exception as exc:  # noqa: BLE001 - logged at ERROR and counted
                _failed(instrument, "start_operation", exc)
                continue
            if trace is not None:
                traces.append((instrument, trace))
        self._traces = tuple(traces)

    def __enter__(self) -> OperationScope:
        self._token = _current.set(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: object, tb: object) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
        if kind is not None and not self._answered:
            self._answered = True
            self._each("on_abandoned", kind.__name__)

    def retried(self, event: _events.RetryScheduled) -> None:
        """Count a retry of this operation (the ladder calls it through the current scope)."""
        self.retries += 1
        self._each("on_retry", event)

    def answered(self, reason: str | None = None, *, stall: str = "") -> None:
        """The operation answered: ``reason`` is the rejection reason (``None`` on success),
        ``stall`` the stall-adjacency sentence when there is one. Only the first call counts."""
        if self._answered:
            return
        self._answered = True
        event = _events.NodeOperationAnswered(
            verb=self.verb,
            reason=None if reason is None else str(reason),
            attempts=self.retries + 1,
            duration=clock() - self._started,
            stall=stall,
            request_id=self.request_id,
            reissue=self.reissue,
        )
        self._each("on_answered", event)
        emit(event)

    def _each(self, method: str, argument: Any) -> None:
        for instrument, trace in self._traces:
            try:
                getattr(trace, method)(argument)
            except Exception as exc:  # noqa: BLE001 - logged at ERROR and counted
                _failed(instrument, method, exc)


class _NoOperation:
    """The scope handed out while nothing is installed: every method does nothing."""

    __slots__ = ()
    verb = None
    retries = 0

    def __enter__(self) -> _NoOperation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def retried(self, event: _events.RetryScheduled) -> None:
        return None

    def answered(self, reason: str | None = None, *, stall: str = "") -> None:
        return None


NO_OPERATION = _NoOperation()


def operation(
    verb: str,
    *,
    request_id: str | None = None,
    path: str | None = None,
    reissue: bool = False,
) -> OperationScope | _NoOperation:
    """The scope of one node operation; a shared no-op (nothing built) when nothing is installed.

    Example:
        >>> from rxmesh import instrumentation
        >>> with instrumentation.operation("create", request_id="r-1") as op:
        ...     op.answered(None)
    """
    if not enabled:
        return NO_OPERATION
    started = _events.OperationStarted(verb=verb, request_id=request_id, path=path, reissue=reissue)
    return OperationScope(started)


def current() -> OperationScope | _NoOperation:
    """The node operation whose scope is current (the shared no-op outside any): the terminal
    arm answers it with the stall adjacency it alone knows, before the driver answers it."""
    scope = _current.get()
    return NO_OPERATION if scope is None else scope
