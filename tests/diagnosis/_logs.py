"""Generated serialized loguru logs with chosen times, for triage tests."""

from __future__ import annotations

import copy
import io
import json
from typing import Any

from loguru import logger

T0 = 1_700_000_000.0
"""The generated logs' origin (2023-11-14T22:13:20Z); offsets are added to it."""


def _template() -> dict[str, Any]:
    """One record exactly as loguru's serialize=True writes it (produced, not hand-written)."""
    stream = io.StringIO()
    sink = logger.add(stream, serialize=True, level="DEBUG", filter=lambda r: "tpl" in r["extra"])
    try:
        logger.bind(tpl=True).info("template")
    finally:
        logger.remove(sink)
    template: dict[str, Any] = json.loads(stream.getvalue())
    return template


_TEMPLATE = _template()


def line(offset: float, message: str = "something happened", **extra: Any) -> str:
    """A serialized record at ``T0 + offset`` with ``extra`` bound."""
    obj = copy.deepcopy(_TEMPLATE)
    obj["record"]["time"]["timestamp"] = T0 + offset
    obj["record"]["message"] = message
    obj["record"]["extra"] = extra
    return json.dumps(obj)


def stall(offset: float, seconds: float) -> str:
    return line(
        offset,
        f"event loop stalled for {seconds:.1f} s (gc 0.0 s)",
        event="loop_stall",
        stall_seconds=seconds,
        stall_gc_seconds=0.0,
    )


def unreachable(offset: float) -> str:
    return line(offset, "store 'postgres@db:5432' unreachable", event="store_unreachable")


def clustered() -> list[str]:
    """1000 s; 4 stalls; 10 events: 7 within 0.1 s after a stall, 9 within 5 s, 1 far away."""
    return [
        line(0.0, "service started"),
        stall(100.0, 3.0),
        unreachable(100.02),
        unreachable(100.05),
        unreachable(100.08),
        unreachable(102.0),
        stall(300.0, 3.5),
        unreachable(300.01),
        unreachable(300.09),
        unreachable(304.0),
        stall(500.0, 2.5),
        unreachable(500.03),
        stall(700.0, 4.0),
        unreachable(700.0),
        unreachable(850.0),
        line(1000.0, "service stopping"),
    ]


def spread_evenly(with_stalls: bool = False) -> list[str]:
    """1000 s; 100 events every 10 s from +5 s; optionally the same 4 stalls as `clustered`."""
    lines = [line(0.0, "service started")]
    lines += [unreachable(5.0 + 10.0 * i) for i in range(100)]
    if with_stalls:
        lines += [stall(at, 3.0) for at in (100.0, 300.0, 500.0, 700.0)]
    lines.append(line(1000.0, "service stopping"))
    return lines
