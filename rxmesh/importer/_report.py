"""What an import did (:class:`ImportReport`) and its progress bar (:class:`Progress`).

The exit statuses are those of the ``rxmesh import`` command (see :mod:`rxmesh.importer`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from rxmesh.importer._read import ImportProblem

__all__ = ["EXIT_OK", "EXIT_REFUSED", "EXIT_UNAVAILABLE", "EXIT_USAGE", "ImportReport", "Progress"]

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3


@dataclass
class ImportReport:
    """What an import did. ``exit_status`` follows the module docstring."""

    store: str
    files: int = 0
    items: int = 0
    created: int = 0
    already_present: int = 0
    refused: list[ImportProblem] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    not_attempted: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    journal_dir: str | None = None
    seconds: float = 0.0

    @property
    def exit_status(self) -> int:
        """0 all created or present; 3 store unreachable for some; else 1 if any refused."""
        if self.unavailable or self.not_attempted or self.partial:
            return EXIT_UNAVAILABLE
        return EXIT_REFUSED if self.refused else EXIT_OK

    def format(self) -> str:
        """The report as text for a person."""
        lines = [
            f"rxmesh import: {_count(self.items, 'entry', 'entries')} from "
            f"{_count(self.files, 'file', 'files')} into {self.store} in {_took(self.seconds)}"
            + _rate(self.items, self.seconds),
            f"  created           {self.created}",
            f"  already present   {self.already_present}",
            f"  refused           {len(self.refused)}",
        ]
        lines += [f"    {problem}" for problem in self.refused[:50]]
        if len(self.refused) > 50:
            lines.append(f"    ... and {len(self.refused) - 50} more")
        where = (
            f"journaled for one re-issue in {self.journal_dir}"
            if self.journal_dir
            else "NOT journaled (no --journal-dir): re-run the import"
        )
        lines.append(
            f"  unavailable       {len(self.unavailable)}"
            + (
                f"  (the store could not be reached; nothing written; {where})"
                if self.unavailable
                else ""
            )
        )
        lines.append(
            f"  not attempted     {len(self.not_attempted)}"
            + (
                "  (after the store was unreachable; re-run the import)"
                if self.not_attempted
                else ""
            )
        )
        lines.append(f"  partial landings  {len(self.partial)}")
        lines += [f"    {text}" for text in self.partial]
        verdict = {
            EXIT_OK: "everything is in the store",
            EXIT_REFUSED: "some entries were refused: fix them and re-run (the rest is in)",
            EXIT_UNAVAILABLE: "the store could not be reached for some entries: re-run the import",
        }[self.exit_status]
        lines.append(f"exit status {self.exit_status}: {verdict}")
        return "\n".join(lines)


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _took(seconds: float) -> str:
    if seconds < 0.001:
        return "under 1 ms"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def _rate(items: int, seconds: float) -> str:
    # A rate over less than a second says more about start-up than about the import: a single
    # entry is not "thousands of entries a second".
    if seconds < 1:
        return ""
    return f" ({items / seconds:,.0f} entries/s)"


class Progress:
    """A plain-text progress bar on a stream, redrawn with ``\\r`` (items, rate, ETA).

    Disabled (draws nothing) when ``enabled`` is false; by default it is enabled only when the
    stream is a TTY.
    """

    def __init__(
        self,
        total: int,
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        width: int = 30,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.width = width
        self._start = time.monotonic()
        self._drawn = 0.0
        self.done = 0

    def line(self, done: int) -> str:
        """The bar's text for ``done`` items: as long whatever ``done`` and ``total`` are (a
        total found too small reads as ``done``, never more than a full bar, never a negative
        ETA)."""
        elapsed = max(time.monotonic() - self._start, 1e-9)
        done = max(done, 0)
        total = max(self.total, done)
        rate = done / elapsed
        share = done / total if total else 1.0
        filled = int(self.width * share)
        left = total - done
        eta_text = f"{left / rate:.0f}s" if rate > 0 else ("0s" if not left else "?")
        bar = "#" * filled + "." * (self.width - filled)
        return f"[{bar}] {done}/{total} items  {rate:,.0f}/s  ETA {eta_text}"

    def update(self, done: int) -> None:
        """Record progress; redraws at most ten times a second (and at the end)."""
        self.done = done
        now = time.monotonic()
        if not self.enabled or (now - self._drawn < 0.1 and done < self.total):
            return
        self._drawn = now
        self.stream.write("\r" + self.line(done))
        self.stream.flush()

    def finish(self) -> None:
        """End the bar's line."""
        if self.enabled:
            self.stream.write("\r" + self.line(self.done) + "\n")
            self.stream.flush()
