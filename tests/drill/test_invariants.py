"""The drill's invariants as pure functions: an honest accounting passes every rule, and each
accounting that loses, duplicates or overwrites a write (or breaks any other rule) is judged so."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from pydantic import JsonValue

from rxmesh.drill import DrillAccounting, Invariant, RequestAccount, check_invariants
from rxmesh.drill.invariants import item_of
from rxmesh.health import HealthStatus
from rxmesh.model import MeshNode
from rxmesh.operations import Verdict

ANSWERED = "every request answered exactly once"
JOURNALED = "every UNAVAILABLE create was journaled"
NO_EVIDENCE = "nothing re-issued without evidence"
EVIDENCE = "evidence arrived (a declared gap)"
RE_ISSUED = "every intent re-issued once, and LANDED"
ACCOUNTED = "every request accounted for (a row with its own request id, or a verdict)"
NO_DUPLICATES = "no duplicate rows (one row per item)"
JUDGED = "a judged refusal is not journaled"
JOURNAL_EMPTY = "journal empty"
CENSUS = "census follows the store"
HEALTHY = "health HEALTHY again"
IN_TIME = "every wait ended in time"

ORDER = [
    ANSWERED, JOURNALED, NO_EVIDENCE, EVIDENCE, RE_ISSUED, ACCOUNTED, NO_DUPLICATES, JUDGED,
    JOURNAL_EMPTY, CENSUS, HEALTHY, IN_TIME,
]  # fmt: skip

Mutation = Callable[[DrillAccounting], DrillAccounting]


def _created(path: str, request_id: str) -> RequestAccount:
    return RequestAccount(path, request_id, "before", 1, "created")


def _unavailable(path: str, request_id: str) -> RequestAccount:
    return RequestAccount(path, request_id, "outage", 1, "UNAVAILABLE", True, (Verdict.LANDED,))


def _row(path: str, request_id: str | None, item: str | None = None) -> MeshNode:
    content: JsonValue = None if item is None else {"item": item}
    return MeshNode(path=path, request_id=request_id, content=content)


def honest() -> DrillAccounting:
    """Two creates before the outage, a judged re-create, two journaled outage creates that
    LANDED; one row each (plus the partition root and a reserved record); everything settled."""
    requests = (
        _created("drill/sensors/s1", "b1"),
        _created("drill/sensors/s2", "b2"),
        RequestAccount("drill/sensors/s1", "j1", "judged", 1, "NODE_ALREADY_EXISTS"),
        _unavailable("drill/valves/v1", "o1"),
        _unavailable("drill/valves/v2", "o2"),
    )
    rows = (
        _row("drill", None),
        _row("drill/_owner", None, "owner"),
        _row("drill/sensors/s1", "b1", "sensor:1"),
        _row("drill/sensors/s2", "b2", "sensor:2"),
        _row("drill/valves/v1", "o1", "valve:1"),
        _row("drill/valves/v2", "o2", "valve:2"),
    )
    return DrillAccounting(
        requests=requests,
        rows=rows,
        verdicts=(Verdict.LANDED, Verdict.LANDED),
        gaps=("drill: the store answers again",),
        pending_at_outage=2,
        pending_after_hold=2,
        node_types=1,
        census_records=1,
        census_reopens=1,
        types_baked=1,
        final_health=HealthStatus.HEALTHY,
    )


def _failed(accounting: DrillAccounting) -> set[str]:
    return {inv.name for inv in check_invariants(accounting) if not inv.ok}


def _detail(accounting: DrillAccounting, name: str) -> str:
    return next(inv.detail for inv in check_invariants(accounting) if inv.name == name)


def _replace_request(accounting: DrillAccounting, path: str, **changes: object) -> DrillAccounting:
    requests = tuple(
        dataclasses.replace(r, **changes) if r.path == path and r.phase != "judged" else r  # type: ignore[arg-type]
        for r in accounting.requests
    )
    return dataclasses.replace(accounting, requests=requests)


def _without_row(accounting: DrillAccounting, path: str) -> DrillAccounting:
    return dataclasses.replace(accounting, rows=tuple(r for r in accounting.rows if r.path != path))


def _with_rows(accounting: DrillAccounting, *rows: MeshNode) -> DrillAccounting:
    return dataclasses.replace(accounting, rows=(*accounting.rows, *rows))


def _overwritten(accounting: DrillAccounting) -> DrillAccounting:
    """v1's row was overwritten by another request (it carries another request id)."""
    rows = tuple(
        _row(r.path, "someone-else", "valve:1") if r.path == "drill/valves/v1" else r
        for r in accounting.rows
    )
    return dataclasses.replace(accounting, rows=rows)


def test_an_honest_accounting_passes_every_invariant_in_the_drills_order() -> None:
    found = check_invariants(honest())
    assert [inv.name for inv in found] == ORDER
    assert all(isinstance(inv, Invariant) and inv.ok for inv in found), found
    assert _detail(honest(), ACCOUNTED) == "5 requests, 5 rows (with the partition root)"
    assert _detail(honest(), RE_ISSUED) == "2 verdict(s) for 2 intent(s): LANDED=2"


def test_a_lost_write_is_judged_unaccounted_for() -> None:
    # The create answered UNAVAILABLE, was journaled and re-issued LANDED, yet no row holds it.
    lost = _without_row(honest(), "drill/valves/v1")
    assert _failed(lost) == {ACCOUNTED}
    assert _detail(lost, ACCOUNTED).endswith("unaccounted: drill/valves/v1 (UNAVAILABLE, no row)")


def test_a_lost_write_before_the_outage_is_judged_too() -> None:
    lost = _without_row(honest(), "drill/sensors/s2")
    assert _failed(lost) == {ACCOUNTED}
    assert "drill/sensors/s2 (created, no row)" in _detail(lost, ACCOUNTED)


def test_a_duplicated_write_is_judged_a_duplicate_row() -> None:
    # What a caller that mints a new id per attempt leaves behind: the item under a second path.
    duplicated = _with_rows(honest(), _row("drill/valves/v1-retry", "o1-again", "valve:1"))
    assert _failed(duplicated) == {NO_DUPLICATES}
    assert _detail(duplicated, NO_DUPLICATES).endswith("; duplicated: valve:1")


def test_a_row_read_twice_at_one_path_is_judged_a_duplicate() -> None:
    twice = _with_rows(honest(), _row("drill/valves/v2", "o2", "valve:2"))
    assert _failed(twice) == {NO_DUPLICATES}


def test_an_overwritten_write_is_judged_unaccounted_for() -> None:
    overwritten = _overwritten(honest())
    assert _failed(overwritten) == {ACCOUNTED}
    assert "drill/valves/v1 (row carries another request id)" in _detail(overwritten, ACCOUNTED)


MUTATIONS: dict[str, tuple[Mutation, set[str]]] = {
    "a request answered twice": (
        lambda a: _replace_request(a, "drill/sensors/s2", answers=2),
        {ANSWERED},
    ),
    "a request never answered": (
        lambda a: _replace_request(a, "drill/sensors/s2", answers=0, first="no answer"),
        {ANSWERED},
    ),
    "an UNAVAILABLE create not journaled, never re-issued, no row": (
        lambda a: _without_row(
            _replace_request(a, "drill/valves/v2", journaled=False, verdicts=()),
            "drill/valves/v2",
        ),
        {JOURNALED, ACCOUNTED},
    ),
    "no UNAVAILABLE create at all (the outage was not seen)": (
        lambda a: dataclasses.replace(
            a,
            requests=tuple(
                dataclasses.replace(r, first="created", journaled=False, verdicts=())
                if r.phase == "outage"
                else r
                for r in a.requests
            ),
        ),
        {JOURNALED},
    ),
    "a re-issue without evidence": (
        lambda a: dataclasses.replace(a, pending_after_hold=1),
        {NO_EVIDENCE},
    ),
    "no gap declared": (lambda a: dataclasses.replace(a, gaps=()), {EVIDENCE}),
    "an intent re-issued twice": (
        lambda a: _replace_request(a, "drill/valves/v1", verdicts=(Verdict.LANDED,) * 2),
        {RE_ISSUED},
    ),
    "an intent never re-issued": (
        lambda a: _replace_request(a, "drill/valves/v1", verdicts=()),
        {RE_ISSUED},
    ),
    "an intent re-issued and DROPPED": (
        lambda a: _replace_request(a, "drill/valves/v1", verdicts=(Verdict.DROPPED,)),
        {RE_ISSUED},
    ),
    "the judged re-create created a node": (
        lambda a: dataclasses.replace(
            a,
            requests=tuple(
                dataclasses.replace(r, first="created") if r.phase == "judged" else r
                for r in a.requests
            ),
        ),
        {ACCOUNTED, JUDGED},
    ),
    "the judged refusal was journaled": (
        lambda a: dataclasses.replace(a, judged_recorded=1),
        {JUDGED},
    ),
    "no judged re-create was made": (
        lambda a: dataclasses.replace(
            a, requests=tuple(r for r in a.requests if r.phase != "judged")
        ),
        {JUDGED},
    ),
    "an intent file left behind": (
        lambda a: dataclasses.replace(a, journal_files_at_end=1),
        {JOURNAL_EMPTY},
    ),
    "an intent still pending": (
        lambda a: dataclasses.replace(a, pending_at_end=1),
        {JOURNAL_EMPTY},
    ),
    "an intent still in flight": (
        lambda a: dataclasses.replace(a, in_flight_at_end=1),
        {JOURNAL_EMPTY},
    ),
    "the census missed a record": (
        lambda a: dataclasses.replace(a, node_types=2),
        {CENSUS},
    ),
    "the census never read": (
        lambda a: dataclasses.replace(a, census_records=None),
        {CENSUS},
    ),
    "the census ended": (lambda a: dataclasses.replace(a, census_ended=True), {CENSUS}),
    "health still degraded": (
        lambda a: dataclasses.replace(a, final_health=HealthStatus.DEGRADED),
        {HEALTHY},
    ),
    "a wait timed out": (
        lambda a: dataclasses.replace(a, timed_out=("health HEALTHY again",)),
        {IN_TIME},
    ),
}


@pytest.mark.parametrize("case", list(MUTATIONS))
def test_each_broken_rule_is_judged_broken_and_only_that_one(case: str) -> None:
    mutate, expected = MUTATIONS[case]
    assert _failed(honest()) == set()  # control: the same accounting, unbroken, passes
    assert _failed(mutate(honest())) == expected


def test_the_item_of_a_row_is_its_item_or_its_type_name() -> None:
    assert item_of(_row("p/a", None, "valve:1")) == "valve:1"
    assert item_of(MeshNode(path="p/t", content={"name": "Valve"})) == "type:Valve"
    assert item_of(MeshNode(path="p/x", content={"other": 1})) is None
    assert item_of(MeshNode(path="p/y", content=[1])) is None
