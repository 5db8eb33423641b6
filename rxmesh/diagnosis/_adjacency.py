"""Stall adjacency: "did this process stall just before this fault?", asked by every report.

The terminal arms call :func:`report_store_unreachable` (or :func:`stall_adjacency` and
:func:`with_stall_adjacency` when they compose their own text, e.g. the health check), so every
store-unreachable log line and health text names a stall that ended within the shadow before it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from loguru import logger

from rxmesh.diagnosis._fields import (
    DEFAULT_SHADOW_SECONDS,
    EVENT_STORE_UNREACHABLE,
    FIELD_EVENT,
    FIELD_STALL_ENDED_BEFORE_SECONDS,
    FIELD_STALL_GC_SECONDS,
    FIELD_STALL_SECONDS,
)
from rxmesh.diagnosis._monitor import LoopStallMonitor, active_monitors

__all__ = [
    "StallAdjacency",
    "StoreUnreachableReport",
    "report_store_unreachable",
    "stall_adjacency",
    "with_stall_adjacency",
]


@dataclass(frozen=True, slots=True)
class StallAdjacency:
    """A loop stall that ended shortly before a fault.

    Attributes:
        duration: how long the loop stalled, in seconds.
        ended_before: how long before the fault the stall ended, in seconds (>= 0).
        gc_seconds: garbage-collection pause time measured during the stall.
    """

    duration: float
    ended_before: float
    gc_seconds: float

    def describe(self) -> str:
        """The sentence every store-unreachable report carries.

        Example:
            >>> StallAdjacency(3.2, 0.3, 0.4).describe()
            "this process's event loop stalled 3.2 s, ending 0.3 s before this fault — check this process before the database"
        """  # noqa: E501
        return (
            f"this process's event loop stalled {self.duration:.1f} s, ending "
            f"{self.ended_before:.1f} s before this fault — check this process before the database"
        )

    def as_log_fields(self) -> dict[str, float]:
        """The structured fields to bind on the report's log record."""
        return {
            FIELD_STALL_SECONDS: self.duration,
            FIELD_STALL_ENDED_BEFORE_SECONDS: self.ended_before,
            FIELD_STALL_GC_SECONDS: self.gc_seconds,
        }


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # no loop runs in this thread: consult every monitor
        return None


def _candidates() -> tuple[LoopStallMonitor, ...]:
    monitors = active_monitors()
    if not monitors:  # the usual case of an answer: nothing to consult, no loop to look up
        return monitors
    loop = _running_loop()
    if loop is not None:
        own = tuple(m for m in monitors if m.loop is loop)
        if own:
            return own
    return monitors


def stall_adjacency(
    at: float | None = None, shadow: float = DEFAULT_SHADOW_SECONDS
) -> StallAdjacency | None:
    """The stall that ended within ``shadow`` seconds before ``at``, if this process had one.

    Reads the running monitors: those watching the running loop if any do, else all of them. A
    tick already overdue beyond the threshold is recorded first (the fault handler may run before
    the late tick). When several stalls qualify, the one that ended closest to ``at`` is chosen.

    Args:
        at: the fault's time on the monitors' clock (default: each monitor's ``clock()`` now).
        shadow: how far back a stall still counts, in seconds.

    Returns:
        The adjacency, or ``None`` when no stall ended in ``[at - shadow, at]`` or no monitor runs.
    """
    best: StallAdjacency | None = None
    for monitor in _candidates():
        monitor.check()
        now = monitor.clock() if at is None else at
        stall = monitor.last_stall_before(now, shadow)
        if stall is None:
            continue
        found = StallAdjacency(
            duration=stall.duration,
            ended_before=now - stall.ended_at,
            gc_seconds=stall.gc_seconds,
        )
        if best is None or found.ended_before < best.ended_before:
            best = found
    return best


def with_stall_adjacency(text: str, adjacency: StallAdjacency | None) -> str:
    """``text`` followed by ``"; " + adjacency.describe()``, or ``text`` unchanged when ``None``."""
    if adjacency is None:
        return text
    return f"{text}; {adjacency.describe()}"


@dataclass(frozen=True, slots=True)
class StoreUnreachableReport:
    """What :func:`report_store_unreachable` logged: the full text and the adjacency (or None)."""

    text: str
    adjacency: StallAdjacency | None


def report_store_unreachable(
    message: str,
    *,
    shadow: float = DEFAULT_SHADOW_SECONDS,
    **fields: Any,
) -> StoreUnreachableReport:
    """Log a store-unreachable fault at ERROR, with the stall adjacency when there is one.

    The record binds ``event="store_unreachable"``, the caller's ``fields`` (e.g. ``store``,
    ``operation``, ``path``) and, when a stall ended within ``shadow`` seconds before now,
    ``stall_seconds``, ``stall_ended_before_seconds`` and ``stall_gc_seconds``. The message is
    worded by the caller about the store ("store 'postgres@db:5432' unreachable while creating
    'a/b'"); the adjacency sentence is appended to it.

    Returns:
        The text as logged (for the answer or the health text) and the adjacency.
    """
    adjacency = stall_adjacency(shadow=shadow)
    text = with_stall_adjacency(message, adjacency)
    bound: dict[str, Any] = dict(fields)
    bound[FIELD_EVENT] = EVENT_STORE_UNREACHABLE
    if adjacency is not None:
        bound.update(adjacency.as_log_fields())
    logger.bind(**bound).error("{}", text)
    return StoreUnreachableReport(text=text, adjacency=adjacency)
