"""The import summary's first line counts in words a person reads: "1 entry from 1 file", and a
rate only when the import took long enough for one to mean something.

Fails at 1d389e8 because the line read "1 entries from 1 file(s) ... in 0.00s (1,987/s)".
Negative control: a long import still reports its rate, with its unit.
"""

from __future__ import annotations

from rxmesh.importer._report import ImportReport


def first_line(**fields: object) -> str:
    return ImportReport("memory", **fields).format().splitlines()[0]  # type: ignore[arg-type]


def test_one_entry_is_singular_and_a_short_import_has_no_rate() -> None:
    line = first_line(files=1, items=1, seconds=0.000503)
    assert line == "rxmesh import: 1 entry from 1 file into memory in under 1 ms"
    assert first_line(files=2, items=40, seconds=0.25) == (
        "rxmesh import: 40 entries from 2 files into memory in 250 ms"
    )
    assert first_line(files=0, items=0, seconds=0.0).startswith(
        "rxmesh import: 0 entries from 0 files"
    )


def test_negative_control_a_long_import_reports_its_rate() -> None:
    assert first_line(files=3, items=12_000, seconds=4.0) == (
        "rxmesh import: 12,000 entries from 3 files into memory in 4.00 s (3,000 entries/s)"
    )
