"""The Prometheus adapter: the text exposition, parsed back with prometheus_client's own parser,
after a drill-like outage; its counts equal the run's own accounting."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rxmesh import CreateNodeRequest, instrumentation
from rxmesh.aio import first_value
from rxmesh.instrumentation.prometheus import PrometheusInstrument
from tests.helpers import ALICE, doc
from tests.instrumentation._outage import RETRIES_PER_GIVE_UP, Accounting, run_outage
from tests.mesh.conftest import make_mesh

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition: (name, labels) -> value."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def leaked(text: str, secrets: list[str]) -> list[str]:
    """The ``secrets`` (paths, users) that appear anywhere in an exposition."""
    return [s for s in secrets if s in text]


async def outage_exposition() -> tuple[Samples, str, Accounting]:
    metrics = PrometheusInstrument(CollectorRegistry())
    with instrumentation.install(metrics):
        mesh, store, books = await run_outage()
        metrics.watch_ledger(mesh.ledger)
        text = metrics.exposition().decode()
    return parse(text), text, books


async def test_retries_gaps_and_the_pending_gauge_equal_the_runs_accounting() -> None:
    metrics = PrometheusInstrument(CollectorRegistry())
    with instrumentation.install(metrics):
        mesh, store, books = await run_outage(seeded=2, during=3)
        metrics.watch_ledger(mesh.ledger)
        after = parse(metrics.exposition().decode())
    unavailable = books.answers["UNAVAILABLE"]
    assert unavailable == 3 and books.pending_during_outage == 3
    # Every refused attempt but each answer's last one was followed by a scheduled retry.
    assert books.refused_attempts == unavailable * (RETRIES_PER_GIVE_UP + 1)
    retried = books.refused_attempts - unavailable
    assert value(after, "rxmesh_retries_total", unreachable="true") == retried
    assert value(after, "rxmesh_retries_total", unreachable="false") == 0
    assert value(after, "rxmesh_retry_delay_seconds_count") == retried
    assert value(after, "rxmesh_changefeed_gaps_total", store=store.name) == 1
    assert value(after, "rxmesh_intents_pending") == 0  # all settled
    assert value(after, "rxmesh_intents_in_flight") == 0


async def test_the_pending_gauge_reads_the_ledger_at_scrape_time() -> None:
    # Nothing installed: the gauge needs no event, only the ledger's statistics at the scrape.
    mesh, store = make_mesh()
    metrics = PrometheusInstrument(CollectorRegistry(), ledgers=(mesh.ledger,))
    before = value(parse(metrics.exposition().decode()), "rxmesh_intents_pending")
    store.refuse_writes_as_unreachable()
    for i in range(2):
        await first_value(mesh.create_node(CreateNodeRequest(node=doc(f"acme/p{i}"), access=ALICE)))
    after = value(parse(metrics.exposition().decode()), "rxmesh_intents_pending")
    assert (before, after) == (0, 2)  # the control is the figure before: it moved by the run's 2
    assert after == mesh.ledger.statistics().pending


async def test_no_path_and_no_user_appears_in_the_exposition() -> None:
    _, text, books = await outage_exposition()
    assert books.paths  # the run did use paths
    assert leaked(text, [*books.paths, "acme", ALICE.user]) == []


def test_the_leak_check_finds_a_path_label() -> None:
    # Negative control: a metric labelled by path would be caught by the check above.
    registry = CollectorRegistry()
    Counter("bad_total", "labelled by path", ["path"], registry=registry).labels("acme/x").inc()
    assert leaked(generate_latest(registry).decode(), ["acme/x"]) == ["acme/x"]


def test_the_default_registry_is_prometheus_clients_global_one() -> None:
    """Fails at 1d389e8 because the instrument made a registry of its own, which
    ``start_http_server`` and the default ``make_asgi_app`` do not serve."""
    from prometheus_client import REGISTRY

    metrics = PrometheusInstrument()
    try:
        assert metrics.registry is REGISTRY
        metrics.retries.labels("true").inc()
        assert REGISTRY.get_sample_value("rxmesh_retries_total", {"unreachable": "true"}) == 1.0
        # prometheus_client's own rule: one set of these names per registry.
        with pytest.raises(ValueError, match="Duplicated timeseries"):
            PrometheusInstrument()
    finally:
        metrics.unregister()
    assert REGISTRY.get_sample_value("rxmesh_retries_total", {"unreachable": "true"}) is None
    PrometheusInstrument().unregister()  # the names are free again


def test_a_registry_passed_keeps_the_metrics_off_the_global_one() -> None:
    """Negative control: with a registry passed, nothing reaches ``REGISTRY``."""
    from prometheus_client import REGISTRY

    metrics = PrometheusInstrument(CollectorRegistry())
    metrics.retries.labels("true").inc()
    assert metrics.registry.get_sample_value("rxmesh_retries_total", {"unreachable": "true"}) == 1
    assert REGISTRY.get_sample_value("rxmesh_retries_total", {"unreachable": "true"}) is None


async def test_node_operation_answers_equal_the_runs_answers() -> None:
    samples, _, books = await outage_exposition()
    reissued = sum(books.verdicts.values())
    assert (
        value(samples, "rxmesh_node_operations_total", verb="create", outcome="UNAVAILABLE")
        == books.answers["UNAVAILABLE"]
    )
    # The recovery's re-issues are create operations too, and they succeeded.
    assert (
        value(samples, "rxmesh_node_operations_total", verb="create", outcome="success")
        == books.answers["success"] + reissued
    )
    assert value(samples, "rxmesh_node_operation_attempts_count", verb="create") == (
        books.answers["success"] + books.answers["UNAVAILABLE"] + reissued
    )
    assert value(samples, "rxmesh_node_operation_attempts_sum", verb="create") == (
        books.answers["success"] + reissued + books.refused_attempts
    )


async def test_intent_counters_equal_the_runs_verdicts() -> None:
    samples, _, books = await outage_exposition()
    unavailable = books.answers["UNAVAILABLE"]
    assert value(samples, "rxmesh_intents_recorded_total") == unavailable
    assert value(samples, "rxmesh_intents_reissued_total") == unavailable
    for verdict, count in books.verdicts.items():
        assert value(samples, "rxmesh_intents_settled_total", verdict=verdict) == count


def test_the_metrics_app_has_a_name_of_its_own() -> None:
    """``metrics_app`` is the exported name; ``asgi_app`` still imports, as the same function,
    outside ``__all__`` (rxmesh.health.asgi_app is another function). Negative control: any
    other missing name is still an AttributeError."""
    from rxmesh.health import asgi_app as health_app
    from rxmesh.instrumentation import prometheus

    assert "metrics_app" in prometheus.__all__
    assert "asgi_app" not in prometheus.__all__
    assert prometheus.asgi_app is prometheus.metrics_app
    assert prometheus.asgi_app is not health_app
    with pytest.raises(AttributeError):
        _ = prometheus.no_such_app
