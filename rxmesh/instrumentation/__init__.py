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

from rxmesh.instrumentation._events import (
    CacheChainBuilt,
    CacheChainEvicted,
    ChangeFeedGapDeclared,
    Event,
    HealthStatusChanged,
    IntentRecorded,
    IntentReissued,
    IntentSettled,
    LoopStalled,
    NodeOperationAnswered,
    OperationStarted,
    ProbeRoundTrip,
    RetryScheduled,
    WatchReopened,
    WatchSurfaced,
)
from rxmesh.instrumentation._seam import (
    Installation,
    Instrument,
    InstrumentationStatistics,
    OperationScope,
    emit,
    install,
    installed,
    operation,
    statistics,
)
from rxmesh.instrumentation._seam import (
    OperationTrace as OperationTrace,
)

__all__ = [
    "CacheChainBuilt",
    "CacheChainEvicted",
    "ChangeFeedGapDeclared",
    "Event",
    "HealthStatusChanged",
    "Installation",
    "Instrument",
    "InstrumentationStatistics",
    "IntentRecorded",
    "IntentReissued",
    "IntentSettled",
    "LoopStalled",
    "NodeOperationAnswered",
    "OperationScope",
    "OperationStarted",
    "ProbeRoundTrip",
    "RetryScheduled",
    "WatchReopened",
    "WatchSurfaced",
    "emit",
    "install",
    "installed",
    "operation",
    "statistics",
]
