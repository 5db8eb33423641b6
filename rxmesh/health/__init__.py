"""Health checks, their report, and an ASGI app that serves it.

The model follows ASP.NET Core's health checks: each registered check returns a status, a
description and data; the report's status is the worst entry's (``UNHEALTHY < DEGRADED < HEALTHY``);
the JSON uses camelCase keys. Checks are tagged: ``"live"`` (is this process alive?) and
``"ready"`` (can it serve?). Checks that depend on the store are readiness checks only: a store
outage must not make an orchestrator restart a healthy process.

A check that raises is reported Unhealthy with the error's type and text (and logged at ERROR);
it never takes the report down and is never swallowed silently.

The layout: this module holds the registry, the report and the ASGI app; ``_model`` the values
(status, result, report); ``_checks`` the checks rxmesh ships.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from loguru import logger

from rxmesh._util.asgi import Receive, Scope, Send, http_only
from rxmesh.health._checks import (
    ChangeFeedCheck,
    LiveRecordCensusCheck,
    PendingWritesCheck,
)
from rxmesh.health._checks import (
    LiveRecordReading as LiveRecordReading,
)
from rxmesh.health._model import HealthCheck as HealthCheck
from rxmesh.health._model import HealthCheckResult, HealthReport, HealthReportEntry, HealthStatus
from rxmesh.instrumentation import _events
from rxmesh.instrumentation import _seam as _instrumentation

__all__ = [
    "ChangeFeedCheck",
    "HealthCheckResult",
    "HealthRegistry",
    "HealthReport",
    "HealthStatus",
    "LiveRecordCensusCheck",
    "PendingWritesCheck",
    "asgi_app",
]


@dataclass(frozen=True, slots=True)
class _Registration:
    check: HealthCheck
    tags: tuple[str, ...]
    timeout: float | None


class HealthRegistry:
    """Named health checks, run together into a :class:`HealthReport`.

    Example:
        >>> registry = HealthRegistry()
        >>> registry.register("process", lambda: HealthCheckResult.healthy("up"))
        >>> import asyncio
        >>> str(asyncio.run(registry.report()).status)
        'Healthy'
    """

    def __init__(self) -> None:
        self._checks: dict[str, _Registration] = {}
        self._lock = threading.Lock()
        self._last: dict[frozenset[str] | None, HealthStatus] = {}  # per selection of tags

    def register(
        self,
        name: str,
        check: HealthCheck,
        *,
        tags: Iterable[str] = ("live",),
        timeout: float | None = None,
    ) -> None:
        """Add a check under ``name``.

        Args:
            name: the entry's key in the report; unique.
            check: a callable returning a result, or a coroutine function returning one.
            tags: ``("live",)`` for liveness, ``("ready",)`` for readiness; store-dependent checks
                are readiness checks only.
            timeout: for an asynchronous check, seconds after which it is reported Unhealthy
                (a synchronous check cannot be time-boxed and must not block).

        Raises:
            ValueError: ``name`` is empty or already registered, or ``timeout`` is not > 0.
            TypeError: ``check`` is not callable or ``tags`` is a bare string.
        """
        if not name:
            raise ValueError("a health check needs a name")
        if not callable(check):
            raise TypeError(f"check must be callable, got {type(check).__name__}")
        if isinstance(tags, str):
            raise TypeError(f"tags must be an iterable of strings, not the string {tags!r}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        with self._lock:
            if name in self._checks:
                raise ValueError(f"a health check named {name!r} is already registered")
            self._checks[name] = _Registration(check, tuple(tags), timeout)

    def unregister(self, name: str) -> None:
        """Remove the check ``name`` (``KeyError`` if there is none)."""
        with self._lock:
            del self._checks[name]

    async def report(self, tags: Iterable[str] | None = None) -> HealthReport:
        """Run the checks (those sharing a tag with ``tags``; all when ``None``) concurrently.

        An empty selection is Healthy. A check that raises or times out is an Unhealthy entry
        naming the error; ``asyncio.CancelledError`` is never caught.
        """
        wanted = None if tags is None else frozenset([tags] if isinstance(tags, str) else tags)
        with self._lock:
            selected = [
                (name, reg)
                for name, reg in self._checks.items()
                if wanted is None or wanted.intersection(reg.tags)
            ]
        started = time.perf_counter()
        results = await asyncio.gather(*(self._run(name, reg) for name, reg in selected))
        total = time.perf_counter() - started
        entries = {name: entry for (name, _), entry in zip(selected, results, strict=True)}
        status = min((e.status for e in entries.values()), default=HealthStatus.HEALTHY)
        with self._lock:
            previous = self._last.get(wanted)
            self._last[wanted] = status
        if _instrumentation.enabled and previous is not status:
            checks = "all" if wanted is None else ",".join(sorted(wanted))
            _instrumentation.emit(
                _events.HealthStatusChanged(
                    previous=None if previous is None else str(previous),
                    status=str(status),
                    checks=checks,
                )
            )
        return HealthReport(status=status, total_duration=total, entries=entries)

    @staticmethod
    async def _run(name: str, reg: _Registration) -> HealthReportEntry:
        started = time.perf_counter()
        deadline: asyncio.Timeout | None = None
        try:
            outcome = reg.check()
            if inspect.isawaitable(outcome):
                async with asyncio.timeout(reg.timeout) as deadline:
                    outcome = await outcome
            if not isinstance(outcome, HealthCheckResult):
                raise TypeError(  # reported like any failing check
                    f"health check {name!r} returned {type(outcome).__name__}, "
                    "not a HealthCheckResult"
                )
            result = outcome
        except TimeoutError as exc:
            if deadline is None or not deadline.expired():
                result = _raised(name, exc)
            else:
                result = HealthCheckResult.unhealthy(
                    f"health check {name!r} gave no answer within {reg.timeout:g}s",
                    {"exception": "TimeoutError"},
                )
                logger.bind(check=name, timeout=reg.timeout).error(
                    "health check {!r} gave no answer within {}s", name, reg.timeout
                )
        except Exception as exc:  # noqa: BLE001 - reported as this entry's Unhealthy text
            result = _raised(name, exc)
        return HealthReportEntry(
            status=result.status,
            description=result.description,
            duration=time.perf_counter() - started,
            data=result.data,
            tags=reg.tags,
        )


def _raised(name: str, exc: Exception) -> HealthCheckResult:
    """The Unhealthy result of a check that raised, logged at ERROR with its traceback."""
    logger.bind(check=name, error_type=type(exc).__name__).opt(exception=exc).error(
        "health check {!r} raised {}: {}", name, type(exc).__name__, exc
    )
    return HealthCheckResult.unhealthy(
        f"health check {name!r} raised {type(exc).__name__}: {exc}",
        {"exception": type(exc).__name__},
    )


# -- the ASGI app ---------------------------------------------------------------------------------


class HealthApp:
    """An ASGI 3 application serving a registry's report as JSON (built by :func:`asgi_app`).

    A class instance with ``async __call__(scope, receive, send)``, so Starlette and FastAPI take
    it for an ASGI app under ``Route`` as under ``Mount`` (a plain function would be taken for a
    request handler there).
    """

    __slots__ = ("_registry", "_tags")

    def __init__(self, registry: HealthRegistry, tags: tuple[str, ...] | None) -> None:
        self._registry = registry
        self._tags = tags

    @property
    def tags(self) -> tuple[str, ...] | None:
        """The tags this app selects (``None``: chosen per request by the path)."""
        return self._tags

    def selection(self, scope: Scope) -> tuple[str, ...] | None:
        """The tags a request selects: this app's own, else ``live``/``ready`` when the path
        (below where the app is mounted) ends in that segment, else every check."""
        if self._tags is not None:
            return self._tags
        path = str(scope.get("path", "/"))
        root = str(scope.get("root_path", ""))
        if root and path.startswith(root):
            path = path[len(root) :]
        last = path.rstrip("/").rpartition("/")[2]
        return (last,) if last in _PROBE_SEGMENTS else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not await http_only(scope, receive, send, "health app"):
            return
        method = scope.get("method", "GET")
        if method not in {"GET", "HEAD"}:
            await _respond(send, 405, b'{"error":"method not allowed"}', allow=True)
            return
        report = await self._registry.report(self.selection(scope))
        code = 503 if report.status is HealthStatus.UNHEALTHY else 200
        body = report.to_json().encode()
        await _respond(send, code, body, head=method == "HEAD")


_PROBE_SEGMENTS = frozenset({"live", "ready"})


def asgi_app(registry: HealthRegistry, *, tags: Iterable[str] | None = None) -> HealthApp:
    """An ASGI 3 app serving ``registry``'s report as JSON; no web framework needed.

    ``GET``/``HEAD`` answer 200 for Healthy or Degraded and 503 for Unhealthy, with
    ``content-type: application/json`` and ``cache-control: no-store``; other methods get 405.
    Without ``tags``, a path ending in ``/live`` selects the liveness checks, ``/ready`` the
    readiness checks, anything else every check: ``Mount("/health", asgi_app(registry))`` serves
    ``/health/live`` and ``/health/ready``. It answers the lifespan protocol too, so any ASGI
    server runs it on its own. docs/health.md has the Starlette and FastAPI recipes.

    Args:
        registry: the checks to run on each request.
        tags: only the checks sharing one of these tags (e.g. ``("ready",)``), whatever the path.
    """
    selected = None if tags is None else tuple([tags] if isinstance(tags, str) else tags)
    return HealthApp(registry, selected)


async def _respond(
    send: Send, code: int, body: bytes, *, head: bool = False, allow: bool = False
) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"cache-control", b"no-store"),
        (b"content-length", str(len(body)).encode()),
    ]
    if allow:
        headers.append((b"allow", b"GET, HEAD"))
    await send({"type": "http.response.start", "status": code, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})
