"""The drill's invariants as pure functions: the drill's accounting in, verdicts out.

:func:`check_invariants` reads a :class:`DrillAccounting` (every create the drill asked for and what
became of it, the rows the store holds at the end, the evidence and the counters) and returns one
:class:`Invariant` a rule. Nothing here touches a store, a mesh or a clock, so each rule can be
proven on hand-made accountings: one that loses a write, duplicates one or overwrites one.

Example:
    A write that was journaled and re-issued LANDED, but has no row, is judged lost:

    >>> from rxmesh.operations import Verdict
    >>> lost = RequestAccount("p/a", "r1", "outage", 1, "UNAVAILABLE", True, (Verdict.LANDED,))
    >>> found = check_invariants(DrillAccounting(requests=(lost,), rows=()))
    >>> [inv.detail for inv in found if not inv.ok and "accounted for" in inv.name]
    ['1 requests, 0 rows (with the partition root); unaccounted: p/a (UNAVAILABLE, no row)']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from rxmesh.health import HealthStatus
from rxmesh.model import MeshNode, is_reserved_path
from rxmesh.operations import RejectionReason, Verdict

__all__: list[str] = []


@dataclass(frozen=True, slots=True)
class Invariant:
    """One checked invariant: its name, whether it holds, and what was found."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class RequestAccount:
    """One create the drill asked for, and what became of it.

    Attributes:
        path: the node's path.
        request_id: the request's id (the row it creates carries it).
        phase: ``"before"``, ``"judged"`` (a re-create that must be refused), ``"outage"`` or
            ``"sabotage"``.
        answers: how many answers the request got (exactly one is the rule).
        first: the first answer: ``"created"``, a rejection reason, or ``"no answer"``.
        journaled: whether its intent was in the pending-write journal after the answer.
        verdicts: the verdicts of its intent's re-issues, in order.
    """

    path: str
    request_id: str
    phase: str
    answers: int
    first: str
    journaled: bool = False
    verdicts: tuple[Verdict, ...] = ()

    @property
    def unavailable(self) -> bool:
        """Whether the first answer was UNAVAILABLE."""
        return self.first == RejectionReason.UNAVAILABLE.value


@dataclass(frozen=True, slots=True)
class DrillAccounting:
    """What the drill recorded: its requests, the rows at the end, the evidence, the counters.

    Attributes:
        requests: every create the drill asked for, in order.
        rows: every row of the drill's partition at the end, read behind every fault.
        verdicts: every re-issue verdict the ledger published, in order.
        gaps: the reasons of the change-feed gaps declared while the store came back.
        judged_recorded: intents recorded by the judged re-create (a refusal records none).
        pending_at_outage: intents pending once the outage creates had answered.
        pending_after_hold: intents pending after the store stayed away a while longer.
        pending_at_end: intents still pending at the end.
        in_flight_at_end: intents still being re-issued at the end.
        journal_files_at_end: intents left in the journal directory (in either format).
        node_types: NodeType records the census should watch at the end.
        census_records: NodeType records the census watched at the end (``None``: no reading).
        census_reopens: how often the census re-opened its watch.
        census_ended: whether the census's watch ended for good.
        types_baked: node types the registry held at the end.
        final_health: the health status at the end.
        timed_out: the waits that gave up.
    """

    requests: tuple[RequestAccount, ...]
    rows: tuple[MeshNode, ...]
    verdicts: tuple[Verdict, ...] = ()
    gaps: tuple[str, ...] = ()
    judged_recorded: int = 0
    pending_at_outage: int = 0
    pending_after_hold: int = 0
    pending_at_end: int = 0
    in_flight_at_end: int = 0
    journal_files_at_end: int = 0
    node_types: int = 0
    census_records: int | None = None
    census_reopens: int = 0
    census_ended: bool = False
    types_baked: int = 0
    final_health: HealthStatus = HealthStatus.HEALTHY
    timed_out: tuple[str, ...] = ()


def item_of(node: MeshNode) -> str | None:
    """The logical item a drill row stands for (a NodeType record's is ``type:<name>``)."""
    content = node.content
    if not isinstance(content, dict):
        return None
    if "item" in content:
        return str(content["item"])
    return f"type:{content['name']}" if "name" in content else None


def _listed(label: str, names: Sequence[str]) -> str:
    return f"; {label}: {', '.join(names)}" if names else ""


def _answered_and_journaled(a: DrillAccounting) -> list[Invariant]:
    tracked = a.requests
    not_once = [t.path for t in tracked if t.answers != 1]
    unavailable = [t for t in tracked if t.unavailable]
    unjournaled = [t.path for t in unavailable if not t.journaled]
    return [
        Invariant(
            "every request answered exactly once",
            not not_once,
            f"{len(tracked)} requests, {sum(t.answers for t in tracked)} answers"
            + _listed("not once", not_once),
        ),
        Invariant(
            "every UNAVAILABLE create was journaled",
            bool(unavailable) and not unjournaled,
            f"{len(unavailable)} UNAVAILABLE, {len(unavailable) - len(unjournaled)} journaled"
            + _listed("NOT journaled", unjournaled),
        ),
        Invariant(
            "nothing re-issued without evidence",
            a.pending_after_hold == a.pending_at_outage,
            f"{a.pending_at_outage} pending when the creates answered, {a.pending_after_hold} "
            "after the hold",
        ),
        Invariant(
            "evidence arrived (a declared gap)",
            bool(a.gaps),
            f"{len(a.gaps)} gap(s): {'; '.join(a.gaps)}" if a.gaps else "no gap was declared",
        ),
    ]


def _re_issued(a: DrillAccounting) -> Invariant:
    intents = [t for t in a.requests if t.unavailable and t.journaled]
    not_once = [t.path for t in intents if len(t.verdicts) != 1]
    not_landed = [t.path for t in intents if t.verdicts and t.verdicts[0] is not Verdict.LANDED]
    counted = Counter(verdict.value for verdict in a.verdicts)
    return Invariant(
        "every intent re-issued once, and LANDED",
        not not_once and not not_landed,
        f"{sum(len(t.verdicts) for t in a.requests if t.unavailable)} verdict(s) for "
        f"{len(intents)} intent(s): "
        + ", ".join(f"{v}={n}" for v, n in counted.items())
        + _listed("not once", not_once)
        + _listed("not LANDED", not_landed),
    )


def _rows(a: DrillAccounting) -> list[Invariant]:
    by_path = {row.path: row for row in a.rows if not is_reserved_path(row.path)}
    missing: list[str] = []
    for t in a.requests:
        if t.phase == "judged":
            if t.first != RejectionReason.NODE_ALREADY_EXISTS.value:
                missing.append(f"{t.path} (judged request answered {t.first})")
            continue
        row = by_path.get(t.path)
        if row is None:
            missing.append(f"{t.path} ({t.first}, no row)")
        elif row.request_id != t.request_id:
            missing.append(f"{t.path} (row carries another request id)")
    items = Counter(item for item in (item_of(row) for row in by_path.values()) if item is not None)
    duplicates = sorted(item for item, n in items.items() if n > 1)
    return [
        Invariant(
            "every request accounted for (a row with its own request id, or a verdict)",
            not missing,
            f"{len(a.requests)} requests, {len(by_path)} rows (with the partition root)"
            + _listed("unaccounted", missing),
        ),
        Invariant(
            "no duplicate rows (one row per item)",
            not duplicates and len(a.rows) == len({row.path for row in a.rows}),
            f"{sum(items.values())} item rows, {len(items)} distinct items"
            + _listed("duplicated", duplicates),
        ),
    ]


def _judged(a: DrillAccounting) -> Invariant:
    name = "a judged refusal is not journaled"
    judged = next((t for t in a.requests if t.phase == "judged"), None)
    if judged is None:
        return Invariant(name, False, "no judged re-create was made")
    return Invariant(
        name,
        judged.first == RejectionReason.NODE_ALREADY_EXISTS.value and a.judged_recorded == 0,
        f"re-create of {judged.path} answered {judged.first}; {a.judged_recorded} intent(s) "
        "recorded",
    )


def _the_end(a: DrillAccounting) -> list[Invariant]:
    return [
        Invariant(
            "journal empty",
            not a.journal_files_at_end and a.pending_at_end == 0 and a.in_flight_at_end == 0,
            f"{a.journal_files_at_end} file(s), {a.pending_at_end} pending, {a.in_flight_at_end} "
            "in flight",
        ),
        Invariant(
            "census follows the store",
            a.census_records == a.node_types and not a.census_ended,
            f"{a.census_records} NodeType record(s) watched, {a.node_types} expected; "
            f"{a.census_reopens} re-open(s); {a.types_baked} type(s) baked",
        ),
        Invariant(
            "health HEALTHY again",
            a.final_health is HealthStatus.HEALTHY,
            str(a.final_health),
        ),
        Invariant(
            "every wait ended in time",
            not a.timed_out,
            "all did" if not a.timed_out else "timed out: " + "; ".join(a.timed_out),
        ),
    ]


def check_invariants(accounting: DrillAccounting) -> tuple[Invariant, ...]:
    """Judge the drill's ``accounting``: one :class:`Invariant` per rule, in the drill's order.

    The rules: every request answered exactly once; every UNAVAILABLE create journaled; nothing
    re-issued without evidence; evidence arrived; every intent re-issued once and LANDED; every
    request accounted for by a row carrying its own request id (a lost write has no row, an
    overwritten one carries another id); no duplicate rows; a judged refusal not journaled; the
    journal empty at the end; the census following the store; health HEALTHY again; every wait in
    time.
    """
    return (
        *_answered_and_journaled(accounting),
        _re_issued(accounting),
        *_rows(accounting),
        _judged(accounting),
        *_the_end(accounting),
    )
