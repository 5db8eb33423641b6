"""The drill's results and its timeline: events written as text (a timeline, tables) or JSON."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from rxmesh.drill.invariants import Invariant

__all__ = ["DrillEvent", "DrillResult", "Timeline"]


@dataclass(frozen=True, slots=True)
class DrillEvent:
    """One line of the drill's timeline: seconds since the start, a kind, a sentence, data."""

    t: float
    kind: str
    text: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DrillResult:
    """What a drill run found: its timeline and its invariants (``ok`` if all hold)."""

    events: tuple[DrillEvent, ...]
    invariants: tuple[Invariant, ...]

    @property
    def ok(self) -> bool:
        """Whether every invariant holds (and there is at least one)."""
        return bool(self.invariants) and all(inv.ok for inv in self.invariants)

    @property
    def exit_status(self) -> int:
        """0 if every invariant holds, else 1."""
        return 0 if self.ok else 1


class Timeline:
    """Collects events and writes them as text (a timeline and tables) or JSON lines."""

    def __init__(self, out: TextIO | None, json_lines: bool) -> None:
        self._out = out
        self._json = json_lines
        self._start = time.monotonic()
        self.events: list[DrillEvent] = []

    def event(self, kind: str, text: str, *, tabled: bool = False, **data: Any) -> None:
        """Record one event; write it (a JSON line, or a timeline line unless ``tabled``)."""
        moment = time.monotonic() - self._start
        item = DrillEvent(round(moment, 3), kind, text, data)
        self.events.append(item)
        if self._out is None:
            return
        if self._json:
            line = {"t": item.t, "event": kind, "text": text, **data}
            self._out.write(json.dumps(line, default=str) + "\n")
        elif not tabled:
            stamp = f"+{moment:.3f}s"
            self._out.write(f"  {stamp:>8}  {kind:<9} {text}\n")
        self._out.flush()

    def text(self, line: str = "") -> None:
        """Write one line of text (not in JSON mode)."""
        if self._out is not None and not self._json:
            self._out.write(line + "\n")

    def table(self, title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        """Write a titled table with columns as wide as their widest cell (not in JSON mode)."""
        if self._out is None or self._json:
            return
        widths = [len(h) for h in headers]
        for row in rows:
            widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
        self.text()
        self.text(title)
        head = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
        self.text(("  " + head).rstrip())
        self.text("  " + "  ".join("-" * w for w in widths))
        for row in rows:
            cells = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
            self.text(("  " + cells).rstrip())
