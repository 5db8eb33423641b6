"""Prometheus metrics for rxmesh (``pip install 'rxmesh[prometheus]'``): counters, histograms and
gauges registered on prometheus_client's default ``REGISTRY`` (next to your own metrics), or on a
:class:`prometheus_client.CollectorRegistry` you pass.

Every label is bounded: a verb, a rejection reason, a verdict, a cause, a health status, a store's
configured name. No metric carries a node path, a user or a request id. The metric names and
labels are listed in docs/observability.md; serve them with :func:`metrics_app` next to
:func:`rxmesh.health.asgi_app`.

Example:
    >>> from prometheus_client import CollectorRegistry
    >>> from rxmesh import instrumentation
    >>> from rxmesh.instrumentation.prometheus import PrometheusInstrument
    >>> metrics = PrometheusInstrument(CollectorRegistry())
    >>> with instrumentation.install(metrics):
    ...     instrumentation.emit(instrumentation.LoopStalled(seconds=3.2, gc_seconds=0.4))
    >>> metrics.registry.get_sample_value("rxmesh_loop_stall_seconds_count")
    1.0
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any, Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, make_asgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from rxmesh._util.asgi import serve_lifespan
from rxmesh.instrumentation import _events, _seam

__all__ = ["PrometheusInstrument", "metrics_app"]

ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]

HEALTH_STATUS_VALUES = {"Unhealthy": 0, "Degraded": 1, "Healthy": 2}
"""The value of ``rxmesh_health_status`` for each status (the report's worst entry)."""

_DELAY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 15.0, 30.0, 60.0)
_PROBE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_STALL_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_GAP_BUCKETS = (0.1, 1.0, 5.0, 15.0, 60.0, 300.0, 1800.0)
_ATTEMPT_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 8.0)


class _LedgerLike(Protocol):
    """What the pending-intents collector reads: :class:`rxmesh.ledger.PendingWriteLedger`."""

    def statistics(self) -> Any: ...


class _LedgerCollector(Collector):
    """Reads the watched ledgers' ``statistics()`` at scrape time (summed over the ledgers):
    the state gauges need no event, and no edit of the ledger."""

    def __init__(self, ledgers: list[_LedgerLike]) -> None:
        self._ledgers = ledgers

    def collect(self) -> Iterator[Metric]:
        stats = [ledger.statistics() for ledger in tuple(self._ledgers)]
        yield GaugeMetricFamily(
            "rxmesh_intents_pending",
            "Recorded intents (UNAVAILABLE creates) waiting for evidence to be re-issued.",
            value=sum(s.pending for s in stats),
        )
        yield GaugeMetricFamily(
            "rxmesh_intents_in_flight",
            "Intents re-issued and not settled yet.",
            value=sum(s.in_flight for s in stats),
        )


class _SeamCollector(Collector):
    """The seam's own count of instrument errors (an instrument that raised, logged at ERROR)."""

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "rxmesh_instrument_errors",
            "Times an installed instrument raised (logged at ERROR; the library went on).",
            value=_seam.statistics().instrument_errors,
        )


class PrometheusInstrument:
    """An instrument that keeps rxmesh's metrics on ``registry`` (default: prometheus_client's
    ``REGISTRY``, which ``start_http_server`` and ``make_asgi_app`` serve). Install it with
    :func:`rxmesh.instrumentation.install`; pass ledgers to export the pending-intents gauge.
    One instrument per registry: a second one on the same registry is refused by
    prometheus_client (duplicated timeseries) until :meth:`unregister`.

    Args:
        registry: where the metrics are registered (default ``prometheus_client.REGISTRY``).
        ledgers: :class:`~rxmesh.ledger.PendingWriteLedger` objects read at scrape time (more
            with :meth:`watch_ledger`).
    """

    def __init__(
        self, registry: CollectorRegistry | None = None, *, ledgers: tuple[_LedgerLike, ...] = ()
    ) -> None:
        self.registry = registry if registry is not None else REGISTRY
        r = self.registry
        self.node_operations = Counter(
            "rxmesh_node_operations",
            "Node operations answered, by verb and outcome (success or the rejection reason).",
            ["verb", "outcome"],
            registry=r,
        )
        self.operation_seconds = Histogram(
            "rxmesh_node_operation_duration_seconds",
            "Seconds from a node operation's start to its answer.",
            ["verb"],
            registry=r,
        )
        self.operation_attempts = Histogram(
            "rxmesh_node_operation_attempts",
            "Store attempts per answered node operation (1 + the ladder's retries).",
            ["verb"],
            buckets=_ATTEMPT_BUCKETS,
            registry=r,
        )
        self.unavailable_after_stall = Counter(
            "rxmesh_unavailable_after_loop_stall",
            "UNAVAILABLE answers that followed a stall of this process's event loop.",
            ["verb"],
            registry=r,
        )
        self.retries = Counter(
            "rxmesh_retries",
            "Retries the ladder scheduled; unreachable says whether the one rule called the "
            "error 'the store could not be reached'.",
            ["unreachable"],
            registry=r,
        )
        self.retry_delay = Histogram(
            "rxmesh_retry_delay_seconds",
            "Seconds waited before each scheduled retry.",
            buckets=_DELAY_BUCKETS,
            registry=r,
        )
        self.watch_reopens = Counter(
            "rxmesh_watch_reopens", "Standing-watch re-opens after a transient fault.", registry=r
        )
        self.watch_surfaced = Counter(
            "rxmesh_watch_surfaced",
            "Standing watches that ended with their fault (not_transient or budget_spent).",
            ["cause"],
            registry=r,
        )
        self.chains_built = Counter(
            "rxmesh_cache_chains_built",
            "Upstream chains the synced-query cache opened.",
            registry=r,
        )
        self.chains_evicted = Counter(
            "rxmesh_cache_chains_evicted",
            "Chains the synced-query cache evicted (fault, completed, silent_provider).",
            ["cause"],
            registry=r,
        )
        self.gaps = Counter(
            "rxmesh_changefeed_gaps",
            "Change-feed gaps declared, by store name.",
            ["store"],
            registry=r,
        )
        self.gap_seconds = Histogram(
            "rxmesh_changefeed_gap_seconds",
            "Seconds the change feed was lost before each declared gap.",
            ["store"],
            buckets=_GAP_BUCKETS,
            registry=r,
        )
        self.probe_seconds = Histogram(
            "rxmesh_changefeed_probe_round_trip_seconds",
            "Round trip of the change feed's delivery probe (pool -> server -> listener).",
            ["store"],
            buckets=_PROBE_BUCKETS,
            registry=r,
        )
        self.loop_stalls = Histogram(
            "rxmesh_loop_stall_seconds",
            "Event-loop stalls a LoopStallMonitor saw, by duration.",
            buckets=_STALL_BUCKETS,
            registry=r,
        )
        self.health_changes = Counter(
            "rxmesh_health_status_changes",
            "Health report status changes, by the status changed to and the checks reported.",
            ["checks", "status"],
            registry=r,
        )
        self.health_status = Gauge(
            "rxmesh_health_status",
            "The latest health report's status: 0 Unhealthy, 1 Degraded, 2 Healthy.",
            ["checks"],
            registry=r,
        )
        self.intents_recorded = Counter(
            "rxmesh_intents_recorded",
            "UNAVAILABLE creates recorded in a pending-write ledger.",
            registry=r,
        )
        self.intents_reissued = Counter(
            "rxmesh_intents_reissued",
            "Recorded intents the recovery re-issued (once each, on evidence).",
            registry=r,
        )
        self.intents_settled = Counter(
            "rxmesh_intents_settled",
            "Recorded intents settled, by verdict (LANDED, ALREADY_PRESENT, DROPPED).",
            ["verdict"],
            registry=r,
        )
        self._ledgers: list[_LedgerLike] = list(ledgers)
        self._own: list[Collector] = [
            value for value in vars(self).values() if isinstance(value, (Counter, Gauge, Histogram))
        ]
        self._own += [_LedgerCollector(self._ledgers), _SeamCollector()]
        for collector in self._own[-2:]:
            r.register(collector)
        self._handlers: dict[type[_events.Event], Callable[[Any], None]] = {
            _events.NodeOperationAnswered: self._answered,
            _events.RetryScheduled: self._retry,
            _events.WatchReopened: lambda e: self.watch_reopens.inc(),
            _events.WatchSurfaced: lambda e: self.watch_surfaced.labels(e.cause).inc(),
            _events.CacheChainBuilt: lambda e: self.chains_built.inc(),
            _events.CacheChainEvicted: lambda e: self.chains_evicted.labels(e.cause).inc(),
            _events.ChangeFeedGapDeclared: self._gap,
            _events.ProbeRoundTrip: lambda e: self.probe_seconds.labels(e.store).observe(e.seconds),
            _events.LoopStalled: lambda e: self.loop_stalls.observe(e.seconds),
            _events.HealthStatusChanged: self._health,
            _events.IntentRecorded: lambda e: self.intents_recorded.inc(),
            _events.IntentReissued: lambda e: self.intents_reissued.inc(),
            _events.IntentSettled: lambda e: self.intents_settled.labels(e.verdict).inc(),
        }

    def unregister(self) -> None:
        """Remove this instrument's metrics from its registry (idempotent): a test, or a reload
        that builds a new instrument on the same registry."""
        own, self._own = self._own, []
        for collector in own:
            self.registry.unregister(collector)

    def watch_ledger(self, ledger: _LedgerLike) -> None:
        """Export ``ledger``'s intents too (read at scrape time; no event needed)."""
        self._ledgers.append(ledger)

    def on_event(self, event: _events.Event) -> None:
        """Count or observe ``event`` (an event type it does not know is ignored)."""
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format (what a scrape reads)."""
        return generate_latest(self.registry)

    def _answered(self, event: _events.NodeOperationAnswered) -> None:
        self.node_operations.labels(event.verb, event.outcome).inc()
        self.operation_seconds.labels(event.verb).observe(event.duration)
        self.operation_attempts.labels(event.verb).observe(event.attempts)
        if event.stalled and event.reason == "UNAVAILABLE":
            self.unavailable_after_stall.labels(event.verb).inc()

    def _retry(self, event: _events.RetryScheduled) -> None:
        self.retries.labels("true" if event.unreachable else "false").inc()
        self.retry_delay.observe(event.delay)

    def _gap(self, event: _events.ChangeFeedGapDeclared) -> None:
        self.gaps.labels(event.store).inc()
        self.gap_seconds.labels(event.store).observe(event.lost_seconds)

    def _health(self, event: _events.HealthStatusChanged) -> None:
        self.health_changes.labels(event.checks, event.status).inc()
        self.health_status.labels(event.checks).set(HEALTH_STATUS_VALUES.get(event.status, 0))


class MetricsApp:
    """An ASGI 3 application serving a registry in Prometheus' text format (built by
    :func:`metrics_app`): prometheus_client's own app, wrapped in a class so Starlette and FastAPI
    take it for an ASGI app under ``Route`` as under ``Mount``. It answers the lifespan protocol.
    """

    __slots__ = ("_app", "registry")

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._app: ASGIApp = make_asgi_app(registry)

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        await self._app(scope, receive, send)


def metrics_app(instrument: PrometheusInstrument | None = None) -> MetricsApp:
    """The metrics of ``instrument``'s registry (default: prometheus_client's ``REGISTRY``) as
    an ASGI app; ``Route("/metrics", metrics_app(metrics))`` in Starlette, ``app.add_route`` in
    FastAPI (docs/observability.md)."""
    return MetricsApp(REGISTRY if instrument is None else instrument.registry)


def __getattr__(name: str) -> Callable[[PrometheusInstrument | None], MetricsApp]:
    # ``asgi_app`` still imports, as :func:`metrics_app`, for code that names it; it stays out of
    # __all__ so that one public name does not mean two functions (rxmesh.health.asgi_app).
    if name == "asgi_app":
        return metrics_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
