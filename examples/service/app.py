"""A small real service on rxmesh: FastAPI over a PostgreSQL store.

- ``POST /nodes`` creates a node; the ``Idempotency-Key`` header is the request id, so a client
  that got ``503`` (the store could not be reached) re-sends the SAME request with the same key
  and gets the first answer it would have had (``201`` when its own row is there).
- ``GET /live?partition=shop`` streams the partition as Server-Sent Events (``rxmesh.web``) over
  ``mesh.watch``, which re-opens after a transient fault.
- ``GET /`` is a page whose ``EventSource`` lists the partition's nodes as they are created.
- ``/health/live``, ``/health/ready``, ``/health`` and ``/metrics`` for the orchestrator and
  Prometheus; rxmesh's logs go to ``logging`` (uvicorn's).

Run it (from the repository's root):
``RXMESH_DSN=postgresql://postgres@127.0.0.1/postgres uvicorn examples.service.app:app``.
Settings (environment): ``RXMESH_DSN`` (required), ``RXMESH_SCHEMA_PREFIX``,
``RXMESH_APPLICATION_NAME`` (the ``application_name`` of its connections, ``rxmesh-example``),
``RXMESH_HEARTBEAT`` (seconds between SSE heartbeats, 15).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

from fastapi import FastAPI, Header, Request
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, ValidationError

from rxmesh import AccessContext, Mesh, http_status
from rxmesh.exceptions import NodeOperationError
from rxmesh.health import ChangeFeedCheck, HealthCheckResult, HealthRegistry, asgi_app
from rxmesh.instrumentation import install
from rxmesh.instrumentation.prometheus import PrometheusInstrument
from rxmesh.instrumentation.prometheus import asgi_app as metrics_app
from rxmesh.logs import route_to_stdlib
from rxmesh.model import NodeQuery
from rxmesh.providers import PostgresStore
from rxmesh.web import EventStream


def with_application_name(dsn: str, name: str) -> str:
    """``dsn`` with ``application_name`` set: the service's connections say whose they are."""
    parsed = urlparse(dsn)
    query = dict(parse_qsl(parsed.query))
    query.setdefault("application_name", name)
    return urlunparse(parsed._replace(query=urlencode(query)))


class NodeIn(BaseModel):
    path: str
    node_type: str
    content: dict[str, Any] = {}


health = HealthRegistry()
health.register("process", lambda: HealthCheckResult.healthy("event loop running"))
state: dict[str, Any] = {}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    route = route_to_stdlib("INFO")
    metrics = PrometheusInstrument()
    installed = install(metrics)
    dsn = with_application_name(
        os.environ["RXMESH_DSN"], os.environ.get("RXMESH_APPLICATION_NAME", "rxmesh-example")
    )
    options: dict[str, Any] = {}
    if "RXMESH_SCHEMA_PREFIX" in os.environ:
        options["schema_prefix"] = os.environ["RXMESH_SCHEMA_PREFIX"]
    async with PostgresStore(dsn, **options) as store:
        health.register("change-feed", ChangeFeedCheck(store), tags=("ready",))
        mesh = Mesh(store)
        state["mesh"] = mesh
        try:
            yield
        finally:
            mesh.dispose()
            health.unregister("change-feed")
            installed.uninstall()
            metrics.unregister()
            route.stop()


app = FastAPI(lifespan=lifespan)
app.add_route("/health/live", asgi_app(health, tags=("live",)))
app.add_route("/health/ready", asgi_app(health, tags=("ready",)))
app.add_route("/health", asgi_app(health))
app.add_route("/metrics", metrics_app())


@app.post("/nodes")
async def create(
    body: NodeIn,
    idempotency_key: str = Header(),
    x_user: str = Header(default="alice"),
) -> JSONResponse:
    mesh: Mesh = state["mesh"]
    try:
        access = AccessContext(user=x_user)
    except ValidationError as invalid:
        errors = invalid.errors(include_url=False, include_context=False, include_input=False)
        return JSONResponse({"rejection_reason": "VALIDATION_FAILED", "errors": errors}, 422)
    try:
        node = await mesh.create(body.model_dump(), access=access, request_id=idempotency_key)
    except NodeOperationError as refused:  # every answer but success, bad input included
        answer = http_status(refused, retry_after=1)
        return JSONResponse(answer.body, answer.status, answer.headers)
    return JSONResponse({"path": node.path, "request_id": idempotency_key}, status_code=201)


async def live(request: Request) -> EventStream:
    """A Starlette endpoint (FastAPI would serialise what a path operation returns): the
    EventStream it returns is called as the response."""
    mesh: Mesh = state["mesh"]
    query = NodeQuery(partition=request.query_params.get("partition", "shop"))
    heartbeat = float(os.environ.get("RXMESH_HEARTBEAT", "15"))
    return EventStream.live(mesh, query, heartbeat=heartbeat)


app.add_route("/live", live, methods=["GET"])


PAGE = """<!doctype html>
<html lang="en">
<meta charset="utf-8">
<title>rxmesh live</title>
<p id="status">connecting</p>
<ul id="nodes"></ul>
<script>
const list = document.getElementById("nodes");
const status = document.getElementById("status");
const partition = new URLSearchParams(location.search).get("partition") || "shop";
const source = new EventSource("/live?partition=" + encodeURIComponent(partition));
function add(path) {
  if (list.querySelector(`li[data-path="${CSS.escape(path)}"]`)) return;
  const item = document.createElement("li");
  item.dataset.path = path;
  item.textContent = path;
  list.append(item);
}
function remove(path) {
  list.querySelector(`li[data-path="${CSS.escape(path)}"]`)?.remove();
}
source.addEventListener("INITIAL", (event) => {
  const frame = JSON.parse(event.data);
  const paths = new Set(frame.nodes.map((node) => node.path));
  for (const item of [...list.children]) if (!paths.has(item.dataset.path)) item.remove();
  for (const path of paths) add(path);
  status.textContent = "live";
});
source.addEventListener("DELTA", (event) => {
  const frame = JSON.parse(event.data);
  for (const node of frame.nodes) add(node.path);
  for (const path of frame.removed) remove(path);
});
source.addEventListener("error", (event) => {
  status.textContent = event.data ? "ended: " + event.data : "reconnecting";
});
</script>
</html>
"""


@app.get("/", response_class=HTMLResponse)
async def page() -> str:
    return PAGE
