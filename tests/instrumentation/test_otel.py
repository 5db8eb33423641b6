"""The OpenTelemetry adapter: the SDK's in-memory exporter holds a span per node operation, its
retries as span events, and a re-issue's span linked to its original request."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from rxmesh import instrumentation
from rxmesh.instrumentation.otel import OpenTelemetryInstrument
from rxmesh.operators._ladder import Ladder
from rxmesh.testing import unreachable_error
from tests.instrumentation._outage import RETRIES_PER_GIVE_UP, run_outage

STALL = "this process's event loop stalled 3.2 s, ending 0.3 s before this fault"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    with instrumentation.install(OpenTelemetryInstrument(provider)):
        yield exported
    provider.shutdown()


def spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def unavailable_create(request_id: str, *, stall: str = "") -> None:
    """What the mesh does for a create the store could not be reached for (the ladder spent)."""

    async def work() -> None:
        raise unreachable_error()

    with instrumentation.operation("create", request_id=request_id, path="acme/b") as op:
        try:
            await Ladder.of((0.0, 0.0)).call(work)
        except Exception:
            op.answered("UNAVAILABLE", stall=stall)


async def test_a_span_holds_the_attempts_the_reason_and_the_stall(
    exporter: InMemorySpanExporter,
) -> None:
    await unavailable_create("r-1", stall=STALL)
    (span,) = spans(exporter, "rxmesh create")
    assert span.attributes is not None
    assert span.attributes["rxmesh.request_id"] == "r-1"
    assert span.attributes["rxmesh.rejection_reason"] == "UNAVAILABLE"
    assert span.attributes["rxmesh.attempts"] == 3
    assert span.attributes["rxmesh.stall_adjacency"] == STALL
    assert "rxmesh.node.path" not in span.attributes  # paths only when asked for
    assert span.status.status_code is StatusCode.ERROR
    retries = [e for e in span.events if e.name == "rxmesh.retry"]
    assert [dict(e.attributes or {}) for e in retries] == [
        {
            "error.type": "StoreError",
            "rxmesh.retry.attempt": n,
            "rxmesh.retry.next_delay_seconds": 0.0,
            "rxmesh.retry.unreachable": True,
        }
        for n in (1, 2)
    ]


async def test_a_success_has_no_reason_no_stall_and_no_error_status(
    exporter: InMemorySpanExporter,
) -> None:
    # Negative control of the test above: nothing is invented for an operation that succeeded.
    with instrumentation.operation("update", request_id="r-2") as op:
        op.answered(None)
    (span,) = spans(exporter, "rxmesh update")
    assert span.attributes is not None
    assert span.attributes["rxmesh.outcome"] == "success"
    assert "rxmesh.rejection_reason" not in span.attributes
    assert "rxmesh.stall_adjacency" not in span.attributes
    assert span.status.status_code is StatusCode.UNSET
    assert span.events == ()


async def test_a_reissue_span_is_linked_to_its_original(exporter: InMemorySpanExporter) -> None:
    await unavailable_create("r-3")
    with instrumentation.operation("create", request_id="r-3", reissue=True) as op:
        op.answered(None)
    (original,) = spans(exporter, "rxmesh create")
    (reissue,) = spans(exporter, "rxmesh reissue create")
    assert reissue.attributes is not None and reissue.attributes["rxmesh.reissue_of"] == "r-3"
    assert [link.context.span_id for link in reissue.links] == [original.context.span_id]


async def test_a_reissue_of_an_unknown_original_has_the_attribute_and_no_link(
    exporter: InMemorySpanExporter,
) -> None:
    # Negative control: no link is made up for an original this process never saw.
    with instrumentation.operation("create", request_id="from-the-journal", reissue=True) as op:
        op.answered(None)
    (reissue,) = spans(exporter, "rxmesh reissue create")
    assert reissue.attributes is not None
    assert reissue.attributes["rxmesh.reissue_of"] == "from-the-journal"
    assert reissue.links == ()


async def test_an_operation_left_by_an_exception_ends_its_span(
    exporter: InMemorySpanExporter,
) -> None:
    with pytest.raises(KeyError), instrumentation.operation("delete", request_id="r-4"):
        raise KeyError("boom")
    (span,) = spans(exporter, "rxmesh delete")
    assert span.attributes is not None and span.attributes["rxmesh.outcome"] == "abandoned"


async def test_a_real_mesh_outage_leaves_the_expected_spans(
    exporter: InMemorySpanExporter,
) -> None:
    _, _, books = await run_outage(seeded=1, during=2)
    creates = spans(exporter, "rxmesh create")
    unavailable = [
        s for s in creates if (s.attributes or {}).get("rxmesh.rejection_reason") == "UNAVAILABLE"
    ]
    assert len(creates) == 3 and len(unavailable) == 2
    for span in unavailable:
        retries = [e for e in span.events if e.name == "rxmesh.retry"]
        assert len(retries) == RETRIES_PER_GIVE_UP
    reissues = spans(exporter, "rxmesh reissue create")
    assert sorted((s.attributes or {})["rxmesh.reissue_of"] for s in reissues) == sorted(
        books.unavailable_ids
    )
    originals = {s.context.span_id for s in unavailable}
    assert {link.context.span_id for s in reissues for link in s.links} == originals
