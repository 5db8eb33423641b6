"""The drill's ``--json`` events and the Prometheus metrics agree (docs/observability.md has the
mapping), the mesh's and the ledger's emit points included."""

from __future__ import annotations

import io
import itertools
import json
from typing import Any

from prometheus_client import CollectorRegistry

from rxmesh import instrumentation
from rxmesh.drill import run_drill
from rxmesh.instrumentation.prometheus import PrometheusInstrument
from tests.instrumentation.test_prometheus import Samples, parse, value


async def drill_with_metrics() -> tuple[list[dict[str, Any]], Samples]:
    out = io.StringIO()
    metrics = PrometheusInstrument(CollectorRegistry())
    with instrumentation.install(metrics):
        result = await run_drill(out=out, json_lines=True, hold=0.05, timeout=10.0)
    assert result.ok
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    return events, parse(metrics.exposition().decode())


def total(samples: Samples, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


async def test_gaps_reopens_and_health_changes_agree_with_the_drills_events() -> None:
    events, samples = await drill_with_metrics()
    gaps = [e for e in events if e["event"] == "evidence"]
    reopens = [e for e in events if e["event"] == "census" and "re-opening" in e["text"]]
    statuses = [e["status"] for e in events if e["event"] == "health" and "status" in e]
    assert gaps and reopens and len(statuses) >= 3  # the drill did see an outage
    assert total(samples, "rxmesh_changefeed_gaps_total") == len(gaps)
    assert value(samples, "rxmesh_watch_reopens_total") == len(reopens)
    changes = [status for status, _ in itertools.groupby(statuses)]
    for status in set(changes):
        assert value(
            samples, "rxmesh_health_status_changes_total", checks="all", status=status
        ) == changes.count(status), (status, statuses)


async def test_create_answers_agree_with_the_drills_create_events() -> None:
    events, samples = await drill_with_metrics()
    creates = [e for e in events if e["event"] == "create"]
    verdicts = [e for e in events if e["event"] == "verdict"]
    for answer in {e["answer"] for e in creates}:
        outcome = "success" if answer == "created" else answer
        expected = sum(1 for e in creates if e["answer"] == answer)
        if outcome == "success":
            expected += sum(1 for v in verdicts if v["verdict"] == "LANDED")  # re-issues
        assert (
            value(samples, "rxmesh_node_operations_total", verb="create", outcome=outcome)
            == expected
        )


async def test_verdicts_agree_with_the_drills_verdict_events() -> None:
    events, samples = await drill_with_metrics()
    verdicts = [e["verdict"] for e in events if e["event"] == "verdict"]
    journaled = [e for e in events if e["event"] == "create" and e["journaled"]]
    assert value(samples, "rxmesh_intents_recorded_total") == len(journaled)
    for verdict in set(verdicts):
        assert value(samples, "rxmesh_intents_settled_total", verdict=verdict) == verdicts.count(
            verdict
        )


async def test_an_instrument_left_uninstalled_counts_none_of_the_drill() -> None:
    # Negative control: the agreement above comes from the events, not from anything else.
    metrics = PrometheusInstrument(CollectorRegistry())
    result = await run_drill(out=io.StringIO(), json_lines=True, hold=0.05, timeout=10.0)
    assert result.ok
    samples = parse(metrics.exposition().decode())
    assert total(samples, "rxmesh_changefeed_gaps_total") == 0
    assert value(samples, "rxmesh_watch_reopens_total") == 0
