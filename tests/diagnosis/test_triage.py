"""triage: the figures on generated logs, checked against hand-computed values."""

from __future__ import annotations

import math

import pytest

from rxmesh.diagnosis import format_triage, triage
from rxmesh.diagnosis._triage import MalformedLine
from tests.diagnosis import _logs as logs


def test_timeouts_clustered_after_stalls_read_as_process_side() -> None:
    report = triage(logs.clustered())
    assert report.window_seconds == pytest.approx(1000.0)
    assert report.records == 16
    assert report.unreachable == 10
    assert report.stalls == 4
    assert report.longest_stall_seconds == 4.0
    assert report.adjacent_count == 7  # +0.02 +0.05 +0.08, +0.01 +0.09, +0.03, +0.0
    assert report.shadow_count == 9  # those, and +2.0, +4.0; not the one at 850 s
    assert report.adjacent_share == pytest.approx(0.7)
    assert report.shadow_share == pytest.approx(0.9)
    assert report.time_coverage == pytest.approx(20.0 / 1000.0)  # 4 disjoint 5 s shadows
    assert report.enrichment == pytest.approx(45.0)
    assert report.reading == (
        "process-side stalls explain 90.0% of the timeouts; the store is probably fine"
    )


def test_timeouts_spread_evenly_without_stalls_read_as_look_at_the_store() -> None:
    report = triage(logs.spread_evenly())
    assert (report.unreachable, report.stalls) == (100, 0)
    assert (report.adjacent_count, report.shadow_count) == (0, 0)
    assert report.shadow_share == 0.0
    assert report.time_coverage == 0.0
    assert report.enrichment is None  # 0 / 0: undefined, not 0 and not infinite
    assert report.reading == "timeouts are spread evenly; look at the store"


def test_timeouts_spread_evenly_around_stalls_read_as_look_at_the_store() -> None:
    report = triage(logs.spread_evenly(with_stalls=True))
    assert report.stalls == 4
    assert report.adjacent_count == 0
    assert report.shadow_count == 4  # +105, +305, +505, +705: exactly 5 s after, inclusive
    assert report.time_coverage == pytest.approx(0.02)
    assert report.enrichment == pytest.approx(0.04 / 0.02)
    assert report.reading == "timeouts are spread evenly; look at the store"


def test_the_spec_example_reading_is_worded_with_one_decimal() -> None:
    lines = [logs.line(0.0), logs.stall(10.0, 3.0), logs.line(10_000.0)]
    lines += [logs.unreachable(10.5)] * 318 + [logs.unreachable(5000.0 + i) for i in range(11)]
    assert triage(lines).reading == (
        "process-side stalls explain 96.7% of the timeouts; the store is probably fine"
    )


def test_overlapping_shadows_count_once_and_are_clipped_to_the_window() -> None:
    lines = [logs.line(0.0), logs.stall(10.0, 3.0), logs.stall(12.0, 3.0), logs.stall(98.0, 3.0)]
    lines.append(logs.line(100.0))
    # [10, 17] (two shadows merged) + [98, 100] (clipped) = 9 s of 100 s
    assert triage(lines).time_coverage == pytest.approx(0.09)


def test_only_the_latest_stall_at_or_before_an_event_matters_and_later_ones_do_not() -> None:
    lines = [logs.line(0.0), logs.stall(10.0, 3.0), logs.unreachable(14.0), logs.stall(14.05, 3.0)]
    lines.append(logs.line(100.0))
    report = triage(lines)
    assert report.adjacent_count == 0  # the stall 0.05 s AFTER the event does not count
    assert report.shadow_count == 1


def test_shadow_and_adjacent_are_parameters() -> None:
    report = triage(logs.clustered(), shadow=1.0, adjacent=0.04)
    assert report.adjacent_count == 4  # +0.02, +0.01, +0.03, +0.0
    assert report.shadow_count == 7
    assert report.time_coverage == pytest.approx(4.0 / 1000.0)


def test_a_shadow_of_no_length_gives_an_infinite_enrichment_not_a_crash() -> None:
    lines = [logs.line(0.0), logs.stall(10.0, 3.0), logs.unreachable(10.0), logs.line(100.0)]
    report = triage(lines, shadow=0.0)
    assert report.time_coverage == 0.0
    assert report.enrichment == math.inf
    assert "infinite" in format_triage(report)


def test_shadows_covering_much_of_the_window_read_as_inconclusive() -> None:
    lines = [logs.line(0.0)]
    for start in range(0, 100, 10):  # a stall every 10 s: shadows cover half the window
        lines += [logs.stall(float(start), 3.0), logs.unreachable(start + 1.0)]
    lines.append(logs.line(100.0))
    report = triage(lines)
    assert report.shadow_share == 1.0
    assert report.time_coverage == pytest.approx(0.5)
    assert report.reading.startswith("inconclusive: stall shadows cover 50.0% of the window")


def test_a_minority_clustered_after_stalls_points_at_both_sides() -> None:
    lines = [logs.line(0.0), logs.stall(100.0, 3.0), logs.line(1000.0)]
    lines += [logs.unreachable(100.01)] * 3 + [logs.unreachable(200.0 + 100 * i) for i in range(7)]
    report = triage(lines)
    assert report.shadow_share == pytest.approx(0.3)
    assert report.enrichment == pytest.approx(0.3 / 0.005)
    assert report.reading == (
        "process-side stalls explain 30.0% of the timeouts; the rest are not near a stall; "
        "look at the store too"
    )


def test_a_log_without_store_unreachable_events_says_so() -> None:
    report = triage([logs.line(0.0), logs.stall(5.0, 2.5), logs.line(10.0)])
    assert report.shadow_share is None
    assert report.enrichment is None
    assert report.reading == "no store-unreachable events in this log; nothing to explain"


def test_malformed_lines_are_counted_and_skipped_never_a_crash() -> None:
    good = logs.clustered()
    bad = [
        "this is not json",
        "[1, 2, 3]",
        '{"record": {"time": {}}}',
        '{"record": {"time": {"timestamp": "yesterday"}}}',
        '{"record": {"time": {"timestamp": 1700000001.0}, "extra": []}}',
        logs.line(1.0, event="loop_stall"),  # a stall without stall_seconds
        logs.line(1.0, event="loop_stall", stall_seconds=float("nan")),
        good[3][: len(good[3]) // 2],  # a truncated line
    ]
    lines = [good[0], bad[0], "", "   ", *bad[1:], *good[1:]]
    report = triage(lines)
    assert [m.line for m in report.malformed] == [2, 5, 6, 7, 8, 9, 10, 11]
    assert report.malformed[0] == MalformedLine(2, "not JSON")
    assert report.malformed[5].reason == "loop_stall without numeric stall_seconds"
    # the well-formed lines are read exactly as without the noise
    clean = triage(good)
    assert (report.unreachable, report.stalls, report.shadow_count) == (
        clean.unreachable,
        clean.stalls,
        clean.shadow_count,
    )
    text = format_triage(report)
    assert "note: skipped 8 malformed lines (line 2: not JSON; line 5: no 'record' object;" in text
    assert "; 3 more)" in text


def test_an_empty_log_is_reported_not_a_crash() -> None:
    report = triage([])
    assert report.records == 0
    assert report.time_coverage is None
    assert "window: - .. - (0.0 s, 0 records)" in format_triage(report)


def test_negative_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        triage([], shadow=-1.0)


def test_the_printed_report_for_the_clustered_log() -> None:
    assert format_triage(triage(logs.clustered())) == "\n".join(
        [
            "window: 2023-11-14T22:13:20.000+00:00 .. 2023-11-14T22:30:00.000+00:00 "
            "(1000.0 s, 16 records)",
            "store-unreachable events: 10",
            "loop stalls: 4 (longest 4.0 s)",
            "within 0.1 s after a stall: 7 of 10 (70.0%)",
            "within a 5 s shadow of a stall: 9 of 10 (90.0%)",
            "time covered by 5 s shadows: 2.0% of the window",
            "enrichment: 45.0x",
            "reading: process-side stalls explain 90.0% of the timeouts; "
            "the store is probably fine",
        ]
    )
