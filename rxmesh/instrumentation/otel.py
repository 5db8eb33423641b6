"""OpenTelemetry traces for rxmesh (``pip install 'rxmesh[otel]'``: the API only; configure the
SDK, an exporter and a tracer provider in your application as usual).

- One span per node operation, named ``rxmesh <verb>`` (``rxmesh create``), a child of the
  caller's current span. Each retry the ladder scheduled is a span event ``rxmesh.retry`` with
  ``error.type``, ``rxmesh.retry.attempt``, ``rxmesh.retry.next_delay_seconds`` and
  ``rxmesh.retry.unreachable`` (the one rule's verdict). The answer sets ``rxmesh.outcome``,
  ``rxmesh.rejection_reason``, ``rxmesh.attempts`` and, when this process's loop stalled just
  before, ``rxmesh.stall_adjacency`` (the sentence); UNAVAILABLE and UNKNOWN set an error status.
- A re-issue of a recorded intent is its own span ``rxmesh reissue <verb>`` with the original
  request's id in ``rxmesh.reissue_of``, and a span link to the original span when this process
  still remembers it (the last ``remember`` UNAVAILABLE answers are remembered).
- Loop stalls and declared change-feed gaps become span events on the current span, if any.

Paths are not recorded unless ``record_paths=True`` (a path may name a user).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, Tracer

from rxmesh.instrumentation import _events

__all__ = ["OpenTelemetryInstrument"]

DEFAULT_REMEMBER = 10_000
"""UNAVAILABLE answers whose span context is kept for the link of their re-issue."""

_ERRORS = frozenset({"UNAVAILABLE", "UNKNOWN"})


class _SpanTrace:
    """One node operation's span (an :class:`~rxmesh.instrumentation.OperationTrace`)."""

    __slots__ = ("_owner", "_span")

    def __init__(self, owner: OpenTelemetryInstrument, span: Span) -> None:
        self._owner = owner
        self._span = span

    def on_retry(self, event: _events.RetryScheduled) -> None:
        self._span.add_event(
            "rxmesh.retry",
            {
                "error.type": event.error_type,
                "rxmesh.retry.attempt": event.attempt,
                "rxmesh.retry.next_delay_seconds": event.delay,
                "rxmesh.retry.unreachable": event.unreachable,
            },
        )

    def on_answered(self, event: _events.NodeOperationAnswered) -> None:
        span = self._span
        span.set_attribute("rxmesh.outcome", event.outcome)
        span.set_attribute("rxmesh.attempts", event.attempts)
        if event.reason is not None:
            span.set_attribute("rxmesh.rejection_reason", event.reason)
        if event.stall:
            span.set_attribute("rxmesh.stall_adjacency", event.stall)
        if event.reason in _ERRORS:
            span.set_status(Status(StatusCode.ERROR, event.reason))
        span.end()
        if event.reason == "UNAVAILABLE" and not event.reissue and event.request_id:
            self._owner.remember(event.request_id, span.get_span_context())

    def on_abandoned(self, error_type: str) -> None:
        self._span.set_attribute("rxmesh.outcome", "abandoned")
        self._span.set_attribute("error.type", error_type)
        self._span.end()


class OpenTelemetryInstrument:
    """An instrument that makes OpenTelemetry spans of rxmesh's node operations.

    Args:
        tracer_provider: where the spans go (default: the global tracer provider).
        record_paths: record the node path as ``rxmesh.node.path`` (off: a path may name a user).
        remember: how many UNAVAILABLE answers' span contexts are kept for re-issue links.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        *,
        record_paths: bool = False,
        remember: int = DEFAULT_REMEMBER,
    ) -> None:
        if remember < 0:
            raise ValueError(f"remember must be >= 0, got {remember}")
        self._tracer: Tracer = trace.get_tracer("rxmesh", tracer_provider=tracer_provider)
        self._record_paths = record_paths
        self._remember = remember
        self._originals: OrderedDict[str, SpanContext] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, request_id: str, context: SpanContext) -> None:
        """Keep ``context`` as the original span of ``request_id`` (oldest forgotten first)."""
        if not self._remember:
            return
        with self._lock:
            self._originals[request_id] = context
            self._originals.move_to_end(request_id)
            while len(self._originals) > self._remember:
                self._originals.popitem(last=False)

    def start_operation(self, started: _events.OperationStarted) -> _SpanTrace:
        """The span of one node operation (a re-issue's span is linked to its original)."""
        attributes: dict[str, str | bool] = {"rxmesh.verb": started.verb}
        if started.request_id is not None:
            attributes["rxmesh.request_id"] = started.request_id
        if self._record_paths and started.path is not None:
            attributes["rxmesh.node.path"] = started.path
        links: list[Link] = []
        name = f"rxmesh {started.verb}"
        if started.reissue:
            name = f"rxmesh reissue {started.verb}"
            attributes["rxmesh.reissue"] = True
            if started.request_id is not None:
                attributes["rxmesh.reissue_of"] = started.request_id
                with self._lock:
                    original = self._originals.pop(started.request_id, None)
                if original is not None:
                    links.append(Link(original, {"rxmesh.link": "original request"}))
        span = self._tracer.start_span(
            name, kind=SpanKind.INTERNAL, attributes=attributes, links=links
        )
        return _SpanTrace(self, span)

    def on_event(self, event: _events.Event) -> None:
        """Stalls and gaps become events of the current span (when one is recording)."""
        span = trace.get_current_span()
        if not span.is_recording():
            return
        if isinstance(event, _events.LoopStalled):
            span.add_event(
                "rxmesh.loop_stall",
                {"rxmesh.stall_seconds": event.seconds, "rxmesh.gc_seconds": event.gc_seconds},
            )
        elif isinstance(event, _events.ChangeFeedGapDeclared):
            span.add_event(
                "rxmesh.changefeed_gap",
                {"rxmesh.store": event.store, "rxmesh.lost_seconds": event.lost_seconds},
            )
