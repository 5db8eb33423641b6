"""Observability, off by default: one seam of typed events, and adapters for the formats
monitoring already reads (Prometheus: :mod:`rxmesh.instrumentation.prometheus`; OpenTelemetry
traces: :mod:`rxmesh.instrumentation.otel`). See docs/observability.md.

With nothing installed every emit point in the library costs one attribute check and builds
nothing. Install an instrument (anything with ``on_event(event)``) to receive the events::

    >>> from rxmesh import instrumentation
    >>> seen = []
    >>> class Printer:
    ...     def on_event(self, event):
    ...         seen.append(type(event).__name__)
    >>> with instrumentation.install(Printer()):
    ...     instrumentation.emit(instrumentation.LoopStalled(seconds=3.2, gc_seconds=0.4))
    >>> seen
    ['LoopStalled']

An instrument that raises is logged at ERROR and counted (:func:`statistics`); it never changes
an answer of the library.

The layout: ``_events`` the typed events; ``_seam`` the installed instruments, the one fast
check every emit point reads, and operation scopes; ``prometheus`` and ``otel`` the adapters.
"""

from __future__ import annotations

# The events and the types a program receives from this seam are importable from here (for
# ``isinstance``, ``match`` and annotations) and documented, but a program never constructs them
# for the library, so they stay out of ``__all__``.
from rxmesh.instrumentation._events import CacheChainBuilt as CacheChainBuilt
from rxmesh.instrumentation._events import CacheChainEvicted as CacheChainEvicted
from rxmesh.instrumentation._events import ChangeFeedGapDeclared as ChangeFeedGapDeclared
from rxmesh.instrumentation._events import Event as Event
from rxmesh.instrumentation._events import HealthStatusChanged as HealthStatusChanged
from rxmesh.instrumentation._events import IntentRecorded as IntentRecorded
from rxmesh.instrumentation._events import IntentReissued as IntentReissued
from rxmesh.instrumentation._events import IntentSettled as IntentSettled
from rxmesh.instrumentation._events import LoopStalled as LoopStalled
from rxmesh.instrumentation._events import NodeOperationAnswered as NodeOperationAnswered
from rxmesh.instrumentation._events import OperationStarted as OperationStarted
from rxmesh.instrumentation._events import ProbeRoundTrip as ProbeRoundTrip
from rxmesh.instrumentation._events import RetryScheduled as RetryScheduled
from rxmesh.instrumentation._events import WatchReopened as WatchReopened
from rxmesh.instrumentation._events import WatchSurfaced as WatchSurfaced
from rxmesh.instrumentation._seam import Installation as Installation
from rxmesh.instrumentation._seam import Instrument as Instrument
from rxmesh.instrumentation._seam import InstrumentationStatistics as InstrumentationStatistics
from rxmesh.instrumentation._seam import OperationScope as OperationScope
from rxmesh.instrumentation._seam import (
    OperationTrace as OperationTrace,
)
from rxmesh.instrumentation._seam import emit, install, installed, operation, statistics

__all__ = [
    "emit",
    "install",
    "installed",
    "operation",
    "statistics",
]
