"""Triage: do a log's store-unreachable events cluster right after this process's loop stalls?

Reads a JSON-lines log as loguru writes it with ``serialize=True`` (one ``{"text", "record"}``
object a line) and compares where the store-unreachable events fall with how much of the window
the stall shadows cover. Definitions (also in docs/diagnosis.md):

- window: first to last valid record time (``record.time.timestamp``);
- a stall ends at its record's time (it is logged when the late tick arrives);
- adjacent: an event at ``t`` with a stall end ``e`` such that ``0 <= t - e <= adjacent``;
- in the shadow: ``0 <= t - e <= shadow``;
- time coverage: the measure of the union of ``[e, e + shadow]`` clipped to the window, divided by
  the window's length;
- enrichment: shadow share / time coverage (infinite when coverage is 0 and the share is not;
  undefined when both are 0 or the window has no length).
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from rxmesh.diagnosis._fields import (
    DEFAULT_ADJACENT_SECONDS,
    DEFAULT_SHADOW_SECONDS,
    EVENT_LOOP_STALL,
    EVENT_STORE_UNREACHABLE,
    FIELD_EVENT,
    FIELD_STALL_SECONDS,
)

__all__ = [
    "TriageReport",
    "format_triage",
    "triage",
]

SHARE_THRESHOLD = 0.5
"""The "process-side" reading needs at least this share of events inside stall shadows..."""

ENRICHMENT_THRESHOLD = 3.0
"""...and events at least this many times denser in the shadows than time alone explains."""

_MALFORMED_SHOWN = 5


@dataclass(frozen=True, slots=True)
class MalformedLine:
    """A line triage skipped: its 1-based number and why."""

    line: int
    reason: str


@dataclass(frozen=True, slots=True)
class TriageReport:
    """The figures of one triage run. Shares and ratios are ``None`` where undefined."""

    shadow_seconds: float
    adjacent_seconds: float
    records: int
    window_start: float | None
    window_end: float | None
    unreachable: int
    stalls: int
    longest_stall_seconds: float | None
    adjacent_count: int
    shadow_count: int
    time_coverage: float | None
    """Share of the window covered by stall shadows (``None`` for a window of no length)."""
    malformed: tuple[MalformedLine, ...]

    @property
    def window_seconds(self) -> float:
        """The window's length (0 when it has fewer than two distinct times)."""
        if self.window_start is None or self.window_end is None:
            return 0.0
        return self.window_end - self.window_start

    @property
    def adjacent_share(self) -> float | None:
        """Share of unreachable events within ``adjacent`` seconds after a stall."""
        return self.adjacent_count / self.unreachable if self.unreachable else None

    @property
    def shadow_share(self) -> float | None:
        """Share of unreachable events within the shadow after a stall."""
        return self.shadow_count / self.unreachable if self.unreachable else None

    @property
    def enrichment(self) -> float | None:
        """shadow share / time coverage; ``inf`` for a positive share over no coverage."""
        share, coverage = self.shadow_share, self.time_coverage
        if share is None or coverage is None:
            return None
        if coverage == 0:
            return math.inf if share > 0 else None
        return share / coverage

    @property
    def reading(self) -> str:
        """The one-line reading (see :data:`SHARE_THRESHOLD`, :data:`ENRICHMENT_THRESHOLD`)."""
        share, enrichment = self.shadow_share, self.enrichment
        if share is None:
            return "no store-unreachable events in this log; nothing to explain"
        strong = enrichment is not None and enrichment >= ENRICHMENT_THRESHOLD
        if share >= SHARE_THRESHOLD and strong:
            return (
                f"process-side stalls explain {share:.1%} of the timeouts; "
                "the store is probably fine"
            )
        if share >= SHARE_THRESHOLD:
            coverage = self.time_coverage
            covered = "all" if coverage is None else f"{coverage:.1%}"
            return (
                f"inconclusive: stall shadows cover {covered} of the window, too much to tell "
                "the sides apart; fix this process's stalls, then look again"
            )
        if strong:
            return (
                f"process-side stalls explain {share:.1%} of the timeouts; the rest are not "
                "near a stall; look at the store too"
            )
        return "timeouts are spread evenly; look at the store"


def _parse(line: str) -> tuple[float, dict[str, object]] | str:
    """(timestamp, extra) of one serialized loguru line, or why it is malformed."""
    try:
        obj = json.loads(line)
    except ValueError:
        return "not JSON"
    record = obj.get("record") if isinstance(obj, dict) else None
    if not isinstance(record, dict):
        return "no 'record' object"
    stamp = record.get("time")
    stamp = stamp.get("timestamp") if isinstance(stamp, dict) else None
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not math.isfinite(stamp):
        return "no numeric record.time.timestamp"
    extra = record.get("extra", {})
    if not isinstance(extra, dict):
        return "record.extra is not an object"
    return float(stamp), extra


def _union_length(starts: list[float], shadow: float, lo: float, hi: float) -> float:
    total = 0.0
    cur_lo = cur_hi = None
    for start in starts:  # sorted
        a, b = max(start, lo), min(start + shadow, hi)
        if b <= a:
            continue
        if cur_hi is None or a > cur_hi:
            if cur_lo is not None and cur_hi is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = a, b
        else:
            cur_hi = max(cur_hi, b)
    if cur_lo is not None and cur_hi is not None:
        total += cur_hi - cur_lo
    return total


def triage(
    lines: Iterable[str],
    *,
    shadow: float = DEFAULT_SHADOW_SECONDS,
    adjacent: float = DEFAULT_ADJACENT_SECONDS,
) -> TriageReport:
    """Compute the triage figures of a serialized loguru log.

    Blank lines are ignored; any other line that is not a serialized record, or a stall record
    without a numeric ``stall_seconds``, is counted in ``malformed`` and skipped.
    """
    if shadow < 0 or adjacent < 0:
        raise ValueError("shadow and adjacent must not be negative")
    times: list[float] = []
    events: list[float] = []
    stall_ends: list[float] = []
    stall_lengths: list[float] = []
    malformed: list[MalformedLine] = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        parsed = _parse(raw)
        if isinstance(parsed, str):
            malformed.append(MalformedLine(number, parsed))
            continue
        stamp, extra = parsed
        event = extra.get(FIELD_EVENT)
        if event == EVENT_LOOP_STALL:
            length = extra.get(FIELD_STALL_SECONDS)
            if (
                isinstance(length, bool)
                or not isinstance(length, int | float)
                or not math.isfinite(length)
            ):
                malformed.append(MalformedLine(number, "loop_stall without numeric stall_seconds"))
                continue
            stall_ends.append(stamp)
            stall_lengths.append(float(length))
        elif event == EVENT_STORE_UNREACHABLE:
            events.append(stamp)
        times.append(stamp)

    stall_ends.sort()
    adjacent_count = shadow_count = 0
    for t in events:
        i = bisect.bisect_right(stall_ends, t)
        if i == 0:
            continue
        gap = t - stall_ends[i - 1]  # the latest stall end at or before t
        adjacent_count += gap <= adjacent
        shadow_count += gap <= shadow

    start = min(times) if times else None
    end = max(times) if times else None
    coverage: float | None = None
    if start is not None and end is not None and end > start:
        coverage = _union_length(stall_ends, shadow, start, end) / (end - start)
    return TriageReport(
        shadow_seconds=shadow,
        adjacent_seconds=adjacent,
        records=len(times),
        window_start=start,
        window_end=end,
        unreachable=len(events),
        stalls=len(stall_ends),
        longest_stall_seconds=max(stall_lengths) if stall_lengths else None,
        adjacent_count=adjacent_count,
        shadow_count=shadow_count,
        malformed=tuple(malformed),
        time_coverage=coverage,
    )


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="milliseconds")


def _share(count: int, total: int) -> str:
    return f"{count} of {total} ({count / total:.1%})" if total else f"{count} of 0 (undefined)"


def _seconds(value: float) -> str:
    return f"{value:g} s"


def format_triage(report: TriageReport) -> str:
    """The report as printed by ``rxmesh triage``: one figure a line, the reading last."""
    r = report
    lines = [
        f"window: {_when(r.window_start)} .. {_when(r.window_end)} ({r.window_seconds:.1f} s, "
        f"{r.records} records)",
    ]
    if r.malformed:
        shown = "; ".join(f"line {m.line}: {m.reason}" for m in r.malformed[:_MALFORMED_SHOWN])
        hidden = len(r.malformed) - _MALFORMED_SHOWN
        more = f"; {hidden} more" if hidden > 0 else ""
        lines.append(f"note: skipped {len(r.malformed)} malformed lines ({shown}{more})")
    longest = ""
    if r.longest_stall_seconds is not None:
        longest = f" (longest {r.longest_stall_seconds:.1f} s)"
    lines += [
        f"store-unreachable events: {r.unreachable}",
        f"loop stalls: {r.stalls}{longest}",
        f"within {_seconds(r.adjacent_seconds)} after a stall: "
        f"{_share(r.adjacent_count, r.unreachable)}",
        f"within a {_seconds(r.shadow_seconds)} shadow of a stall: "
        f"{_share(r.shadow_count, r.unreachable)}",
    ]
    coverage = "undefined (the window has no length)"
    if r.time_coverage is not None:
        coverage = f"{r.time_coverage:.1%} of the window"
    lines.append(f"time covered by {_seconds(r.shadow_seconds)} shadows: {coverage}")
    enrichment = r.enrichment
    if enrichment is None:
        shown_enrichment = "undefined (no events, or no shadow and no event in one)"
    elif math.isinf(enrichment):
        shown_enrichment = "infinite (events in shadows that cover no time)"
    else:
        shown_enrichment = f"{enrichment:.1f}x"
    lines += [f"enrichment: {shown_enrichment}", f"reading: {r.reading}"]
    return "\n".join(lines)
