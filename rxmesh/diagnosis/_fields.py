"""The stable names diagnosis writes into logs and reads back from them, and its defaults.

A serialized loguru record (``serialize=True``) carries these under ``record.extra``. The terminal
arms bind :data:`EVENT_STORE_UNREACHABLE`; the loop-stall monitor binds :data:`EVENT_LOOP_STALL`.
``rxmesh triage`` reads exactly these names, so they are a contract: renaming one breaks every log
already written.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "DEFAULT_ADJACENT_SECONDS",
    "DEFAULT_SHADOW_SECONDS",
    "EVENT_LOOP_STALL",
    "EVENT_STORE_UNREACHABLE",
    "FIELD_EVENT",
    "FIELD_STALL_ENDED_BEFORE_SECONDS",
    "FIELD_STALL_GC_SECONDS",
    "FIELD_STALL_SECONDS",
]

FIELD_EVENT: Final = "event"
"""The ``extra`` key naming what a record is about."""

EVENT_STORE_UNREACHABLE: Final = "store_unreachable"
"""``extra.event`` of every store-unreachable report (the terminal arms' ERROR line)."""

EVENT_LOOP_STALL: Final = "loop_stall"
"""``extra.event`` of the monitor's WARNING; the record's time is the end of the stall."""

FIELD_STALL_SECONDS: Final = "stall_seconds"
"""How long the event loop stalled (on a stall record, and on a report adjacent to one)."""

FIELD_STALL_GC_SECONDS: Final = "stall_gc_seconds"
"""Garbage-collection pause time measured during that stall."""

FIELD_STALL_ENDED_BEFORE_SECONDS: Final = "stall_ended_before_seconds"
"""On a store-unreachable report: how long before the fault the adjacent stall ended."""

DEFAULT_TICK_SECONDS: Final = 1.0
"""The monitor's tick period."""

DEFAULT_LATE_THRESHOLD_SECONDS: Final = 2.0
"""A tick arriving more than this late is a stall."""

DEFAULT_HISTORY: Final = 256
"""How many stalls a monitor remembers (oldest dropped first)."""

DEFAULT_SHADOW_SECONDS: Final = 5.0
"""A fault within this long after a stall ended is reported as adjacent to it."""

DEFAULT_ADJACENT_SECONDS: Final = 0.1
"""Triage's "right after a stall" bound: an event this close after a stall's end."""
