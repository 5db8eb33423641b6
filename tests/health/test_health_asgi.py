"""The health and metrics apps under Starlette and FastAPI themselves (httpx's ASGI transport).

Fail at 1d389e8 because ``asgi_app`` returned a plain function, which Starlette's ``Route`` takes
for a request handler (500: ``app() missing 2 required positional arguments``), and a mount at
``/health`` answered ``/health/live`` with every check, the readiness checks included.
"""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from rxmesh.health import HealthCheckResult, HealthRegistry, asgi_app
from rxmesh.instrumentation import prometheus


def registry() -> HealthRegistry:
    """Alive, not ready: the store is down (a readiness check only)."""
    checks = HealthRegistry()
    checks.register("process", lambda: HealthCheckResult.healthy("up"), tags=("live",))
    checks.register("store", lambda: HealthCheckResult.unhealthy("down"), tags=("ready",))
    return checks


async def get(app: object, *paths: str) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://service") as client:
        return [await client.get(path) for path in paths]


def answered(response: httpx.Response) -> tuple[int, set[str]]:
    return response.status_code, set(response.json()["entries"])


LIVE = (200, {"process"})
READY = (503, {"store"})
ALL = (503, {"process", "store"})


def starlette_routes(checks: HealthRegistry) -> Starlette:
    return Starlette(
        routes=[
            Route("/health/live", asgi_app(checks, tags=("live",))),
            Route("/health/ready", asgi_app(checks, tags=("ready",))),
            Route("/health", asgi_app(checks)),
        ]
    )


async def test_starlette_routes_answer_each_probe_with_its_checks() -> None:
    live, ready, every = await get(
        starlette_routes(registry()), "/health/live", "/health/ready", "/health"
    )
    assert (answered(live), answered(ready), answered(every)) == (LIVE, READY, ALL)


async def test_one_mount_serves_live_and_ready_below_it() -> None:
    app = Starlette(routes=[Mount("/health", asgi_app(registry()))])
    live, ready, every = await get(app, "/health/live", "/health/ready/", "/health/")
    assert (answered(live), answered(ready), answered(every)) == (LIVE, READY, ALL)


async def test_the_old_mounts_without_a_slash_now_answer_the_right_probe() -> None:
    """The recipe docs/health.md printed at 1d389e8: ``/health/live`` reached the ``/health``
    mount (a mount without a trailing slash does not match its own path)."""
    checks = registry()
    app = Starlette(
        routes=[
            Mount("/health/live", asgi_app(checks, tags=("live",))),
            Mount("/health/ready", asgi_app(checks, tags=("ready",))),
            Mount("/health", asgi_app(checks)),
        ]
    )
    live, ready = await get(app, "/health/live", "/health/ready")
    assert (answered(live), answered(ready)) == (LIVE, READY)


async def test_fastapi_add_route_and_mount() -> None:
    checks = registry()
    app = FastAPI()
    app.add_route("/health/live", asgi_app(checks, tags=("live",)))
    app.add_route("/health/ready", asgi_app(checks, tags=("ready",)))
    app.mount("/probes", asgi_app(checks))
    live, ready, mounted_live, mounted_ready = await get(
        app, "/health/live", "/health/ready", "/probes/live", "/probes/ready"
    )
    assert [answered(r) for r in (live, ready, mounted_live, mounted_ready)] == [
        LIVE,
        READY,
        LIVE,
        READY,
    ]


async def test_an_app_with_tags_ignores_the_path() -> None:
    """Negative control of the path selection: explicit tags win over the path."""
    app = Starlette(routes=[Mount("/x", asgi_app(registry(), tags=("live",)))])
    (response,) = await get(app, "/x/ready")
    assert answered(response) == LIVE


@pytest.mark.parametrize("route", ["route", "mount"])
async def test_metrics_under_starlette(route: str) -> None:
    metrics = prometheus.PrometheusInstrument(CollectorRegistry())
    metrics.retries.labels("true").inc()
    app_ = prometheus.metrics_app(metrics)
    routes = [Route("/metrics", app_)] if route == "route" else [Mount("/metrics", app_)]
    path = "/metrics" if route == "route" else "/metrics/"
    (response,) = await get(Starlette(routes=routes), path)
    assert response.status_code == 200
    assert 'rxmesh_retries_total{unreachable="true"} 1.0' in response.text
