"""Health's values: a status, a check's result, the report and its camelCase JSON.

Public from :mod:`rxmesh.health`; kept apart so that the checks (:mod:`rxmesh.health._checks`)
and the registry can both build on them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

__all__ = [
    "HealthCheck",
    "HealthCheckResult",
    "HealthReport",
    "HealthReportEntry",
    "HealthStatus",
    "JsonData",
]

JsonData = Mapping[str, Any]


class HealthStatus(IntEnum):
    """Ordered so that ``min()`` is the worst: ``UNHEALTHY < DEGRADED < HEALTHY``.

    Serialised as ``"Unhealthy"``, ``"Degraded"``, ``"Healthy"`` (``str(status)``).
    """

    UNHEALTHY = 0
    DEGRADED = 1
    HEALTHY = 2

    def __str__(self) -> str:
        return self.name.capitalize()


@dataclass(frozen=True, slots=True)
class HealthCheckResult:
    """What one check says: a status, a sentence, and structured data."""

    status: HealthStatus
    description: str = ""
    data: JsonData = field(default_factory=dict)

    @classmethod
    def healthy(cls, description: str = "", data: JsonData | None = None) -> HealthCheckResult:
        """A HEALTHY result."""
        return cls(HealthStatus.HEALTHY, description, dict(data or {}))

    @classmethod
    def degraded(cls, description: str = "", data: JsonData | None = None) -> HealthCheckResult:
        """A DEGRADED result."""
        return cls(HealthStatus.DEGRADED, description, dict(data or {}))

    @classmethod
    def unhealthy(cls, description: str = "", data: JsonData | None = None) -> HealthCheckResult:
        """An UNHEALTHY result."""
        return cls(HealthStatus.UNHEALTHY, description, dict(data or {}))


HealthCheck = Callable[[], HealthCheckResult | Awaitable[HealthCheckResult]]
"""A check: a callable returning a :class:`HealthCheckResult`, or an awaitable of one."""


@dataclass(frozen=True, slots=True)
class HealthReportEntry:
    """One check's result in a report; ``duration`` in seconds."""

    status: HealthStatus
    description: str
    duration: float
    data: JsonData
    tags: tuple[str, ...]


def _timespan(seconds: float) -> str:
    """ASP.NET's TimeSpan text (``"00:00:00.0012345"``), which health dashboards already read."""
    ticks = round(seconds * 10_000_000)
    whole, fraction = divmod(ticks, 10_000_000)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}.{fraction:07d}"


@dataclass(frozen=True, slots=True)
class HealthReport:
    """The result of running the checks: the worst status, how long it took, every entry."""

    status: HealthStatus
    total_duration: float
    entries: Mapping[str, HealthReportEntry]

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape, camelCase keys; durations as ASP.NET TimeSpan text."""
        return {
            "status": str(self.status),
            "totalDuration": _timespan(self.total_duration),
            "entries": {
                name: {
                    "status": str(entry.status),
                    "description": entry.description,
                    "duration": _timespan(entry.duration),
                    "data": dict(entry.data),
                    "tags": list(entry.tags),
                }
                for name, entry in self.entries.items()
            },
        }

    def to_json(self) -> str:
        """The report as JSON text (values that JSON cannot hold are written with ``str``)."""
        return json.dumps(self.to_dict(), default=str)
