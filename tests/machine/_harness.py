"""The harness of the model-based check: a virtual clock, a recording store, a traced mesh and
the oracle that judges every answer against the states the store passed through.

Nothing here changes the product. The recording store forwards every call to the
``FaultInjectingStore`` unchanged (optionally delivering results one loop turn later, so that
concurrent requests interleave at every store call as they do over a network), and the traced
mesh is a subclass that only tags each request's subscription (a context variable) so that each
store call is attributed to the request, or to the ledger's re-issue, that made it.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any, NamedTuple, TypeVar

from reactivex import Observable, abc, typing
from reactivex.disposable import CompositeDisposable, Disposable
from reactivex.scheduler.scheduler import Scheduler

from rxmesh import AccessContext, Mesh, MeshNode
from rxmesh.faults import is_store_unreachable
from rxmesh.ledger import PendingWriteOutcome
from rxmesh.mesh._access import VERBS, grant_path, owner_path
from rxmesh.model import SYSTEM_USER, partition_of
from rxmesh.operations import (
    CreateNodeRequest,
    CreateNodeResponse,
    CreateNodesRequest,
    CreateNodesResponse,
    DeleteNodeRequest,
    MoveNodeRequest,
    NodeOperationResponse,
    RejectionReason,
    UpdateNodeRequest,
    Verdict,
)
from rxmesh.testing import FaultInjectingStore

_T = TypeVar("_T")

USERS = ("system", "alice", "bob", "carol")
"""The system may do anything; alice and bob own what they open and grant each other verbs;
carol holds no grant anywhere (she never creates, so she never opens a partition)."""
PARTITIONS = ("alpha", "beta")
PATHS = ("alpha/a", "alpha/b", "beta/a", "beta/b", "beta/c")
LADDER = (0.25, 0.5, 1.0)
"""The real ladder's shape, on the virtual clock: three retries cost no real time."""

Request = (
    CreateNodeRequest | CreateNodesRequest | UpdateNodeRequest | DeleteNodeRequest | MoveNodeRequest
)
Response = CreateNodeResponse | CreateNodesResponse | NodeOperationResponse

WRITES = frozenset({"write", "write_many", "update", "delete", "move"})


# --------------------------------------------------------------------------- invariants

INVARIANTS: dict[str, str] = {
    "one-answer": "exactly one answer per request (a re-issue by the ledger: at most one)",
    "success-row": "a success means the row is there with that request_id until an "
    "acknowledged write removes it",
    "success-true": "a success only when true: the requester held the verb (or opened the "
    "partition) and the node was there / free, at some point while the request was in flight",
    "exists-true": "NODE_ALREADY_EXISTS only when a row written by another request was there",
    "forbidden-true": "FORBIDDEN only when the requester lacked the verb in that partition",
    "refusal-true": "'no node' (VALIDATION_FAILED) only when the node was missing; no other "
    "validation refusal for valid input",
    "unavailable-own-call": "UNAVAILABLE only when one of that request's own store calls was "
    "refused",
    "never-unknown": "never UNKNOWN for valid input (a bulk's partial landing after a refused "
    "call excepted)",
    "two-rows": "no path with two rows",
    "unacknowledged-write": "no row changed without an acknowledged write",
    "nothing-written": "'Nothing was written' only when nothing was (and a list of written "
    "records is the list of what was)",
    "one-verdict": "every recorded intent exactly one verdict; none for an intent never "
    "recorded; every UNAVAILABLE answer says it is recorded or says it will not be re-issued",
    "no-resurrection": "the ledger never writes a request that was carried (answered created) "
    "after its intent was recorded: a node its owner deleted does not come back",
    "ledger-drains": "after a final restore and a gap the ledger drains",
    "no-heal-after-failed-read": "no heal after a failed read: a partition record is written "
    "only after a clean read of that partition showed it absent",
    "requester-bound": "an intent is settled by a caller's answer only when that caller is its "
    "requester, with its verb (and its path and request id): anyone else's answer settles nothing",
    "path-order": "the ledger re-issues the intents of one path one after another (never two "
    "at once), in the order they were recorded",
    "basis-named": "a re-issue based on a version is applied only to the row that version "
    "names: that version, written by the write the basis names (none named matches none)",
    "update-applied": "a successful update's content was on its row while it was in flight, "
    "unless an update of its request id had landed: an update reusing the create's request id "
    "is applied, not taken for its own landing",
}


class InvariantViolation(AssertionError):
    """An invariant of :data:`INVARIANTS` failed; ``invariant`` names it."""

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"[{invariant}] {INVARIANTS[invariant]}: {detail}")
        self.invariant = invariant
        self.detail = detail


# --------------------------------------------------------------------------- virtual clock


class VirtualClock(Scheduler):
    """A scheduler whose time only moves when the driver says so (see :meth:`fire_next`).

    Every action due at the earliest due time fires in one go, as the timers of an asyncio
    loop that fall due in the same iteration do.
    """

    def __init__(self) -> None:
        super().__init__()
        self._seconds = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._ids = itertools.count()

    @property
    def now(self) -> datetime:
        return self.to_datetime(self._seconds)

    @property
    def seconds(self) -> float:
        return self._seconds

    def schedule(
        self, action: abc.ScheduledAction[_T], state: _T | None = None
    ) -> abc.DisposableBase:
        return self.schedule_relative(0.0, action, state)

    def schedule_relative(
        self,
        duetime: typing.RelativeTime,
        action: abc.ScheduledAction[_T],
        state: _T | None = None,
    ) -> abc.DisposableBase:
        delay = duetime.total_seconds() if isinstance(duetime, timedelta) else float(duetime)
        return self._enqueue(self._seconds + max(0.0, delay), action, state)

    def schedule_absolute(
        self,
        duetime: typing.AbsoluteTime,
        action: abc.ScheduledAction[_T],
        state: _T | None = None,
    ) -> abc.DisposableBase:
        due = self.to_seconds(duetime) if isinstance(duetime, datetime) else float(duetime)
        return self._enqueue(max(due, self._seconds), action, state)

    def _enqueue(
        self, due: float, action: abc.ScheduledAction[_T], state: _T | None
    ) -> abc.DisposableBase:
        inner = CompositeDisposable()
        cancelled = [False]

        def run() -> None:
            if not cancelled[0]:
                result = action(self, state)
                if result is not None:
                    inner.add(result)

        def cancel() -> None:
            cancelled[0] = True
            inner.dispose()

        heapq.heappush(self._heap, (due, next(self._ids), run))
        return Disposable(cancel)

    @property
    def pending(self) -> bool:
        return bool(self._heap)

    def fire_next(self) -> bool:
        """Move the clock to the earliest due time and run everything due then."""
        if not self._heap:
            return False
        due = self._heap[0][0]
        self._seconds = max(self._seconds, due)
        while self._heap and self._heap[0][0] <= due:
            _, _, run = heapq.heappop(self._heap)
            run()
        return True


# --------------------------------------------------------------------------- rows and states


class Row(NamedTuple):
    """What the model compares of a stored row."""

    request_id: str | None
    created_by: str | None
    content: str
    version: int

    @classmethod
    def of(cls, node: MeshNode) -> Row:
        content = json.dumps(node.content, sort_keys=True)
        return cls(node.request_id, node.created_by, content, node.version)

    def value(self) -> Any:
        return json.loads(self.content)


State = Mapping[str, Row]


def owner(state: State, partition: str) -> str | None:
    row = state.get(owner_path(partition))
    value = row.value() if row is not None else None
    found = value.get("owner") if isinstance(value, dict) else None
    return found if isinstance(found, str) else None


def is_new(state: State, partition: str) -> bool:
    return partition not in state and owner_path(partition) not in state


def permissions(state: State, partition: str, user: str) -> frozenset[str]:
    row = state.get(grant_path(partition, user))
    value = row.value() if row is not None else None
    listed = value.get("permissions") if isinstance(value, dict) else None
    if not isinstance(listed, list):
        return frozenset()
    return frozenset(p for p in listed if isinstance(p, str))


def may(state: State, user: str, verb: str, partition: str) -> bool:
    """GrantPolicy on the model's facts: the system anything, the owner anything in its
    partition, others a grant naming the verb (or ``*``)."""
    if user == SYSTEM_USER or owner(state, partition) == user:
        return True
    allowed = permissions(state, partition, user)
    return "*" in allowed or verb in allowed


def may_claim_or(state: State, user: str, verb: str, partition: str) -> bool:
    """A create (or a move's target): any named user may open a new partition."""
    return is_new(state, partition) or may(state, user, verb, partition)


def is_system_path(path: str) -> bool:
    return any(segment.startswith("_") for segment in path.split("/")) or "/" not in path


# --------------------------------------------------------------------------- attempts and calls


@dataclass(eq=False)
class Attempt:
    """One subscription of one request: the caller's (``by_ledger`` False) or the ledger's."""

    number: int
    kind: str  # create | bulk | update | delete | move
    request: Request
    user: str
    by_ledger: bool
    start: int  # index into the state history when it was subscribed
    label: str = ""
    end: int | None = None
    answers: list[Response] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    opened: int = 0  # when it was subscribed, and answered: on one counter of the mesh
    closed: int | None = None

    def __repr__(self) -> str:
        who = "ledger re-issue" if self.by_ledger else "request"
        return f"<{who} #{self.number} {self.label or self.kind} by {self.user}>"

    @property
    def request_id(self) -> str:
        return self.request.request_id

    def refused(self) -> bool:
        return any(call.outcome == "refused" for call in self.calls)

    def successful_writes(self) -> list[Call]:
        return [c for c in self.calls if c.op in WRITES and c.changed]


@dataclass(eq=False)
class Call:
    seq: int
    attempt: Attempt | None
    op: str
    target: tuple[str, ...]
    nodes: dict[str, MeshNode] = field(default_factory=dict)
    outcome: str = "pending"  # ok | refused | error | pending
    error: BaseException | None = None
    results: list[object] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # paths this call changed

    def __repr__(self) -> str:
        return f"{self.op}{self.target}->{self.outcome}"


CURRENT: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar(
    "rxmesh_model_attempt", default=None
)


@dataclass
class Event:
    kind: str  # write | answer | verdict
    index: int  # the state index after the event
    call: Call | None = None
    attempt: Attempt | None = None
    response: Response | None = None
    outcome: PendingWriteOutcome | None = None
    paths: tuple[str, ...] = ()  # a write: the paths this effect changed


# --------------------------------------------------------------------------- recording store


class RecordingStore:
    """Forwards every call to ``faults`` and records it, attributed to the current attempt.

    Keeps a shadow of the store (replayed from the results of successful writes) and the history
    of its states, one per write that changed something. With ``defer`` the results reach the
    mesh one loop turn later (the store has already acted), so concurrent requests interleave at
    every store call. ``toggle`` runs once, just before the (k+1)-th call of a batch.
    """

    def __init__(self, faults: FaultInjectingStore) -> None:
        self.faults = faults
        self.defer = False
        self.shadow: dict[str, Row] = {}
        self.history: list[dict[str, Row]] = [{}]
        self.events: list[Event] = []
        self.calls: list[Call] = []
        self.batch_calls = 0
        self._toggle: tuple[int, Callable[[], None]] | None = None

    @property
    def name(self) -> str:
        return self.faults.name

    def arm_toggle(self, after: int, action: Callable[[], None]) -> None:
        self.batch_calls = 0
        self._toggle = (after, action)

    def fire_toggle(self) -> None:
        if self._toggle is not None:
            _, action = self._toggle
            self._toggle = None
            action()

    @property
    def index(self) -> int:
        return len(self.history) - 1

    def _apply(self, call: Call, value: object) -> None:
        before = dict(self.shadow)
        if call.op == "write" and isinstance(value, MeshNode):
            self.shadow[value.path] = Row.of(value)
        elif call.op == "write_many":
            for path in getattr(value, "paths", ()):
                self.shadow[path] = Row.of(call.nodes[path])
        elif call.op == "update" and isinstance(value, MeshNode):
            self.shadow[value.path] = Row.of(value)
        elif call.op == "delete" and value is True:
            self.shadow.pop(call.target[0], None)
        elif call.op == "move" and isinstance(value, MeshNode):
            self.shadow.pop(call.target[0], None)
            self.shadow[value.path] = Row.of(value)
        changed = [p for p in set(before) | set(self.shadow) if before.get(p) != self.shadow.get(p)]
        if changed:
            call.changed.extend(sorted(changed))
            self.history.append(dict(self.shadow))
            self.events.append(Event("write", self.index, call=call, paths=tuple(sorted(changed))))

    def _begin(
        self, op: str, target: tuple[str, ...], nodes: Sequence[MeshNode], attempt: Attempt | None
    ) -> Call:
        """Record one store call of ``attempt`` (firing the toggle when it is due)."""
        if self._toggle is not None and self.batch_calls >= self._toggle[0]:
            self.fire_toggle()
        self.batch_calls += 1
        call = Call(len(self.calls), attempt, op, target, {n.path: n for n in nodes})
        self.calls.append(call)
        if attempt is not None:
            attempt.calls.append(call)
        return call

    def _failed(self, call: Call, error: Exception) -> None:
        call.outcome = "refused" if is_store_unreachable(error) else "error"
        call.error = error

    def _answered(self, call: Call, op: str, value: Any) -> None:
        call.results.append(value)
        if op in WRITES:
            self._apply(call, value)

    async def _verb(
        self,
        op: str,
        target: tuple[str, ...],
        source: Callable[[], Awaitable[_T]],
        nodes: Sequence[MeshNode] = (),
    ) -> _T:
        call = self._begin(op, target, nodes, CURRENT.get())
        try:
            value = await source()
        except Exception as error:
            self._failed(call, error)
            if self.defer:
                await asyncio.sleep(0)  # answered on a later turn of the loop
            raise
        self._answered(call, op, value)
        if call.outcome == "pending":
            call.outcome = "ok"
        if self.defer:
            await asyncio.sleep(0)
        return value

    def _recorded(
        self,
        op: str,
        target: tuple[str, ...],
        source: Callable[[], Observable[_T]],
        nodes: Sequence[MeshNode] = (),
    ) -> Observable[_T]:
        attempt = CURRENT.get()

        def subscribe(
            observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            call = self._begin(op, target, nodes, attempt)
            gone = [False]
            loop = asyncio.get_event_loop()
            defer = self.defer

            def deliver(emit: Callable[[], None]) -> None:
                if not defer:
                    emit()
                else:
                    loop.call_soon(lambda: None if gone[0] else emit())

            def on_next(value: _T) -> None:
                self._answered(call, op, value)
                deliver(lambda: observer.on_next(value))

            def on_error(error: Exception) -> None:
                self._failed(call, error)
                deliver(lambda: observer.on_error(error))

            def on_completed() -> None:
                if call.outcome == "pending":
                    call.outcome = "ok"
                deliver(observer.on_completed)

            inner = source().subscribe(on_next, on_error, on_completed, scheduler=scheduler)
            return CompositeDisposable(inner, Disposable(lambda: gone.__setitem__(0, True)))

        return Observable(subscribe)

    # -- the Store protocol --

    async def read(self, path: str) -> MeshNode | None:
        return await self._verb("read", (path,), lambda: self.faults.read(path))

    async def read_many(self, paths: Sequence[str]) -> dict[str, MeshNode]:
        wanted = tuple(paths)
        return await self._verb("read_many", wanted, lambda: self.faults.read_many(wanted))

    async def write(self, node: MeshNode) -> MeshNode:
        return await self._verb("write", (node.path,), lambda: self.faults.write(node), [node])

    def write_many(self, nodes: Sequence[MeshNode], window: int = 1000) -> Observable[Any]:
        batch = tuple(nodes)
        return self._recorded(
            "write_many",
            tuple(n.path for n in batch),
            lambda: self.faults.write_many(batch, window),
            batch,
        )

    async def update(self, node: MeshNode, *basis: Any) -> MeshNode | None:
        return await self._verb(
            "update", (node.path,), lambda: self.faults.update(node, *basis), [node]
        )

    async def delete(self, path: str, *basis: Any) -> bool:
        return await self._verb("delete", (path,), lambda: self.faults.delete(path, *basis))

    async def move(self, source: str, target: str, *basis: Any) -> MeshNode | None:
        return await self._verb(
            "move", (source, target), lambda: self.faults.move(source, target, *basis)
        )

    def query(self, query: Any) -> Observable[Any]:
        return self.faults.query(query)

    @property
    def changes(self) -> Observable[Any]:
        return self.faults.changes

    @property
    def gaps(self) -> Observable[Any]:
        return self.faults.gaps

    @property
    def answers_again(self) -> Observable[Any]:
        return self.faults.answers_again


# --------------------------------------------------------------------------- traced mesh


class TracedMesh(Mesh):
    """The real :class:`Mesh`; each verb's subscription is tagged with its :class:`Attempt`."""

    def __init__(self, store: RecordingStore, **options: Any) -> None:
        self.recorder = store
        self.attempts: list[Attempt] = []
        self.ticks = itertools.count()
        super().__init__(store, **options)

    def _traced(
        self, kind: str, request: Any, user: str, label: str, source: Observable[_T]
    ) -> Observable[_T]:
        def subscribe(
            observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            by_ledger = bool(getattr(request, "reissued_after_unavailable", False))
            attempt = Attempt(
                len(self.attempts), kind, request, user, by_ledger, self.recorder.index, label
            )
            attempt.opened = next(self.ticks)
            self.attempts.append(attempt)

            def on_next(value: _T) -> None:
                attempt.answers.append(value)  # type: ignore[arg-type]
                attempt.end = self.recorder.index
                attempt.closed = next(self.ticks)
                self.recorder.events.append(
                    Event(
                        "answer",
                        self.recorder.index,
                        attempt=attempt,
                        response=value,  # type: ignore[arg-type]
                    )
                )
                observer.on_next(value)

            token = CURRENT.set(attempt)
            try:
                inner = source.subscribe(
                    on_next, observer.on_error, observer.on_completed, scheduler=scheduler
                )
            finally:
                CURRENT.reset(token)

            def dispose() -> None:
                if attempt.closed is None:  # called off (its intent settled by another answer)
                    attempt.closed = next(self.ticks)
                inner.dispose()

            return Disposable(dispose)

        return Observable(subscribe)

    @staticmethod
    def _user(request: Any, node: MeshNode | None = None) -> str:
        access = getattr(request, "access", None)
        if isinstance(access, AccessContext):
            return access.user
        return (node.created_by if node is not None else None) or "?"

    def create_node(self, request: Any) -> Observable[CreateNodeResponse]:
        label = f"create {request.node.path}" if isinstance(request, CreateNodeRequest) else ""
        node = request.node if isinstance(request, CreateNodeRequest) else None
        return self._traced(
            "create", request, self._user(request, node), label, super().create_node(request)
        )

    def create_nodes(self, request: Any) -> Observable[CreateNodesResponse]:
        label = f"bulk {[n.path for n in request.nodes]}"
        return self._traced(
            "bulk",
            request,
            self._user(request, request.nodes[0]),
            label,
            super().create_nodes(request),
        )

    def update_node(self, request: Any) -> Observable[NodeOperationResponse]:
        return self._traced(
            "update",
            request,
            self._user(request),
            f"update {request.node.path}",
            super().update_node(request),
        )

    def delete_node(self, request: Any) -> Observable[NodeOperationResponse]:
        return self._traced(
            "delete",
            request,
            self._user(request),
            f"delete {request.path}",
            super().delete_node(request),
        )

    def move_node(self, request: Any) -> Observable[NodeOperationResponse]:
        return self._traced(
            "move",
            request,
            self._user(request),
            f"move {request.source}->{request.target}",
            super().move_node(request),
        )


# --------------------------------------------------------------------------- the oracle


_RECORDS = re.compile(r"the partition records (.*?) were,")


def _fail(invariant: str, attempt: Attempt | None, detail: str) -> InvariantViolation:
    who = f"{attempt!r}: " if attempt is not None else ""
    if attempt is not None:
        answer = attempt.answers[0] if attempt.answers else None
        detail += f"\n    answer: {_short(answer)}\n    calls: {attempt.calls}"
    return InvariantViolation(invariant, who + detail)


def _short(response: Response | None) -> str:
    if response is None:
        return "none"
    reason = response.rejection_reason.value if response.rejection_reason else "success"
    return f"{reason} {response.error or ''}".strip()


def _paths_of(attempt: Attempt) -> tuple[str, ...]:
    request = attempt.request
    if isinstance(request, CreateNodeRequest | UpdateNodeRequest):
        return (request.node.path,)
    if isinstance(request, CreateNodesRequest):
        return tuple(n.path for n in request.nodes)
    if isinstance(request, DeleteNodeRequest):
        return (request.path,)
    return (request.source, request.target)


def _may_create(state: State, *, user: str, partition: str) -> bool:
    return may_claim_or(state, user, "create", partition)


def _row_of(state: State, *, path: str, rid: str, mine: bool) -> bool:
    row = state.get(path)
    return row is not None and (row.request_id == rid) is mine


def _bad_heal(path: str, user: str, row: Row, before: State) -> str:
    """Why a partition record written by a heal was not the heal's to write ("" if it was): the
    owner record names the requester; a grant goes only to the partition's owner (a user with a
    grant of its own is never healed one, and the system gets none)."""
    partition = partition_of(path)
    if path == owner_path(partition):
        value = row.value()
        named = value.get("owner") if isinstance(value, dict) else None
        return "" if named == user else f"healed {path} naming {named!r}, not {user!r}"
    if path == grant_path(partition, user):
        holder = owner(before, partition)
        if holder != user or user == SYSTEM_USER:
            return f"healed a grant {path} for {user!r}; the partition's owner is {holder!r}"
    return ""


def heal_partitions(attempt: Attempt) -> set[str]:
    """The partitions an attempt may heal: a create's, a bulk's, a move's target."""
    if attempt.kind in ("create", "bulk"):
        return {partition_of(p) for p in _paths_of(attempt)}
    if attempt.kind == "move":
        return {partition_of(_paths_of(attempt)[1])}
    return set()


def heal_paths(attempt: Attempt) -> set[str]:
    out: set[str] = set()
    for partition in heal_partitions(attempt):
        out |= {partition, owner_path(partition), grant_path(partition, attempt.user)}
    return out


class Oracle:
    """Judges one step: every attempt answered in it, every write made in it, every verdict.

    ``only`` (a set of invariant names) makes the other invariants silent (their failures are
    counted in ``ignored``): the mutant tests use it to show one check catching its mutant.
    """

    def __init__(self, only: frozenset[str] | None = None) -> None:
        self.only = only
        self.ignored: dict[str, int] = {}
        self.outstanding: dict[tuple[str, str], int] = {}  # intent key -> event index recorded
        # Intents whose request was carried (answered created) AFTER they were recorded: the
        # ledger must not write those (issue 20, bug 4). A later UNAVAILABLE answer that records
        # the request again is the caller asking again: then the ledger may write it.
        self.carried_after: set[tuple[str, str]] = set()
        self.recorded_order: dict[tuple[str, str], int] = {}  # intent key -> when recorded
        self.seen_events = 0
        self.found: list[InvariantViolation] = []  # this step's violations, raised at its end
        self.failed = False

    def fail(self, violation: InvariantViolation) -> None:
        if self.only is None or violation.invariant in self.only:
            self.found.append(violation)
        else:
            self.ignored[violation.invariant] = self.ignored.get(violation.invariant, 0) + 1

    def raise_found(self) -> None:
        """Raise the step's first violation (all of the step's bookkeeping is done by then)."""
        found, self.found = self.found, []
        if found:
            self.failed = True
            if len(found) > 1:
                found[0].add_note(
                    f"and {len(found) - 1} more: " + "; ".join(v.invariant for v in found[1:])
                )
            raise found[0]

    # -- one step --

    def judge_step(
        self, recorder: RecordingStore, attempts: Iterable[Attempt], *, settled: bool = True
    ) -> None:
        events = recorder.events[self.seen_events :]
        self.seen_events = len(recorder.events)
        step = list(attempts)
        for attempt in step:
            self.judge_answers(attempt, settled=settled)
        for attempt in step:
            if attempt.answers:
                self.judge_truth(attempt, recorder.history)
                self.judge_texts(attempt)
            self.judge_heals(attempt)
        self.judge_writes(recorder, step, events)
        self.judge_bases(recorder, events)
        self.judge_path_order(step)
        self.judge_ledger_events(events, recorder.history)
        for call in recorder.calls:
            if call.attempt is None and call.op in WRITES and call.changed:
                self.fail(_fail("unacknowledged-write", None, f"a write no request made: {call}"))

    def judge_answers(self, attempt: Attempt, *, settled: bool) -> None:
        count = len(attempt.answers)
        if attempt.by_ledger:
            if count > 1:
                self.fail(_fail("one-answer", attempt, f"{count} answers"))
            return
        if count != 1 and settled:
            self.fail(_fail("one-answer", attempt, f"{count} answers"))
        for response in attempt.answers:
            if response.request_id != attempt.request_id:
                self.fail(_fail("one-answer", attempt, "answered with another request_id"))

    def judge_truth(self, attempt: Attempt, history: Sequence[State]) -> None:
        response = attempt.answers[0]
        end = attempt.end if attempt.end is not None else len(history) - 1
        states = history[attempt.start : end + 1]
        user, rid = attempt.user, attempt.request_id
        reason = response.rejection_reason
        paths = _paths_of(attempt)

        def ever(predicate: Callable[[State], bool]) -> bool:  # true at some point of its flight
            return any(predicate(s) for s in states)

        def wrote(path: str) -> bool:
            return any(path in c.changed for c in attempt.successful_writes())

        if response.success:
            if attempt.kind == "create":
                (path,) = paths
                node = getattr(response, "node", None)
                if node is None or node.path != path or node.request_id != rid:
                    self.fail(_fail("success-row", attempt, f"answered {node!r}"))
                if wrote(path):
                    if not ever(lambda s: may_claim_or(s, user, "create", partition_of(path))):
                        self.fail(_fail("success-true", attempt, "created without the right"))
                elif not ever(lambda s: s.get(path) is not None and s[path].request_id == rid):
                    self.fail(_fail("success-row", attempt, f"no row of this request at {path}"))
            elif attempt.kind == "bulk":
                assert isinstance(response, CreateNodesResponse)
                created = {n.path: n for n in response.created}
                present = set(response.already_present)
                if set(created) | present != set(paths) or set(created) & present:
                    self.fail(_fail("success-row", attempt, "created/already_present != request"))
                for path, node in created.items():
                    if node.request_id != rid:
                        self.fail(_fail("success-row", attempt, f"{path} of another request"))
                    if wrote(path):
                        if not ever(partial(_may_create, user=user, partition=partition_of(path))):
                            self.fail(_fail("success-true", attempt, f"{path} without the right"))
                    elif not ever(partial(_row_of, path=path, rid=rid, mine=True)):
                        self.fail(
                            _fail("success-row", attempt, f"no row of this request at {path}")
                        )
                for path in present:
                    if not ever(partial(_row_of, path=path, rid=rid, mine=False)):
                        self.fail(_fail("exists-true", attempt, f"{path} reported already present"))
            else:
                verb = attempt.kind
                path = paths[0]
                mine = [c for c in attempt.calls if c.op == verb and c.changed]
                # the same request sent again (or re-issued) finds its own landed write: no write;
                # a delete that found its node gone: gone at some point of its flight
                absent = getattr(response, "already_absent", False)
                if absent and not ever(lambda s: path not in s):
                    self.fail(_fail("success-row", attempt, "already absent, yet never gone"))
                already = absent or ever(lambda s: any(n.request_id == rid for n in s.values()))
                if not mine and not already:
                    self.fail(_fail("success-row", attempt, f"success but no {verb} landed"))
                if verb == "update":
                    node: Any = getattr(attempt.request, "node", None)
                    content = json.dumps(node.content, sort_keys=True)
                    stored = ever(lambda s: (r := s.get(path)) is not None and r.content == content)
                    by_update = ever(  # an update of this id landed: its own, sent again
                        lambda s: (
                            (r := s.get(path)) is not None and r.request_id == rid and r.version > 1
                        )
                    )
                    if not stored and not by_update:
                        self.fail(
                            _fail("update-applied", attempt, "success, its content never stored")
                        )
                if not ever(lambda s: may(s, user, verb, partition_of(path))):
                    self.fail(_fail("success-true", attempt, f"{verb} without the right"))
                if verb == "move":
                    target = partition_of(paths[1])
                    if target != partition_of(path) and not ever(
                        lambda s: may_claim_or(s, user, "move", target)
                    ):
                        self.fail(
                            _fail(
                                "success-true", attempt, "moved into a partition without the right"
                            )
                        )
            return

        def lacks(verb: str, partition: str) -> bool:
            if verb == "create" or (verb == "move" and partition != partition_of(paths[0])):
                return ever(lambda s: not may_claim_or(s, user, verb, partition))
            return ever(lambda s: not may(s, user, verb, partition))

        if reason is RejectionReason.UNAVAILABLE:
            if not attempt.refused():
                self.fail(_fail("unavailable-own-call", attempt, "none of its calls was refused"))
        elif reason is RejectionReason.FORBIDDEN:
            if attempt.kind == "bulk":
                true = any(lacks("create", partition_of(p)) for p in paths)
            elif attempt.kind == "move":
                true = lacks("move", partition_of(paths[0])) or lacks(
                    "move", partition_of(paths[1])
                )
            else:
                true = lacks(attempt.kind, partition_of(paths[0]))
            if not true:
                self.fail(_fail("forbidden-true", attempt, "the requester held the verb"))
        elif reason is RejectionReason.NODE_ALREADY_EXISTS:
            if attempt.kind == "create":
                true = ever(lambda s: s.get(paths[0]) is not None and s[paths[0]].request_id != rid)
            elif attempt.kind == "move":
                true = ever(lambda s: paths[1] in s)
            else:
                true = False
            if not true:
                self.fail(_fail("exists-true", attempt, "no other request's row was there"))
        elif reason is RejectionReason.VALIDATION_FAILED:
            true = attempt.kind in ("update", "delete", "move") and ever(
                lambda s: paths[0] not in s
            )
            if not true:
                self.fail(_fail("refusal-true", attempt, "the node was there"))
        elif reason is RejectionReason.UNKNOWN:
            partly_landed = (
                attempt.kind == "bulk"
                and attempt.refused()
                and any(c.op == "write_many" and c.changed for c in attempt.calls)
            )
            if not partly_landed:
                self.fail(_fail("never-unknown", attempt, "UNKNOWN for valid input"))
        elif reason is RejectionReason.VERSION_CONFLICT:
            # True only if another write came first: the node changed (or went) during the
            # attempt, or — a re-issue — since the basis it was recorded with, or it is not at
            # the version the request expected.
            def row(s: State) -> tuple[int, str | None] | None:
                node = s.get(paths[0])
                return None if node is None else (node.version, node.request_id)

            seen = {row(s) for s in states}
            expected = getattr(attempt.request, "expected_version", None)
            stale = expected is not None and any(r is None or r[0] != expected for r in seen)
            true = attempt.kind in ("update", "delete", "move") and (
                attempt.by_ledger or len(seen) > 1 or None in seen or stale
            )
            if not true:
                self.fail(_fail("refusal-true", attempt, "VERSION_CONFLICT but nothing changed"))
        else:
            self.fail(_fail("refusal-true", attempt, f"{reason} for valid input"))

    def judge_texts(self, attempt: Attempt) -> None:
        response = attempt.answers[0]
        text = response.error or ""
        written = sorted({p for c in attempt.successful_writes() for p in c.changed})
        if "Nothing was written" in text and written:
            self.fail(_fail("nothing-written", attempt, f"yet it wrote {written}"))
        listed = _RECORDS.search(text)
        if listed is not None:
            named = sorted(re.findall(r"'([^']*)'", listed.group(1)))
            if named != written:
                self.fail(_fail("nothing-written", attempt, f"names {named}, wrote {written}"))
        if attempt.by_ledger or response.rejection_reason is not RejectionReason.UNAVAILABLE:
            return
        if isinstance(response, CreateNodeResponse):
            if not response.recorded_for_reissue and "will not be re-issued" not in text:
                self.fail(
                    _fail("one-verdict", attempt, "neither recorded nor 'will not be re-issued'")
                )
        elif isinstance(response, CreateNodesResponse):
            recorded, refused = set(response.recorded_for_reissue), set(response.not_recorded)
            missing = {n.path for n in response.not_created}
            if recorded & refused or recorded | refused != missing:
                self.fail(_fail("one-verdict", attempt, "recorded/not_recorded != not_created"))
        elif not response.recorded_for_reissue and "will not be re-issued" not in text:
            cancelled = "cancelled" in text  # a cooperative cancellation is never recorded
            if not cancelled:
                self.fail(
                    _fail("one-verdict", attempt, "neither recorded nor 'will not be re-issued'")
                )

    def judge_heals(self, attempt: Attempt) -> None:
        node_paths = set(_paths_of(attempt)) if attempt.kind in ("create", "bulk") else set()
        for index, call in enumerate(attempt.calls):
            if call.op != "write" or call.target[0] in node_paths:
                continue
            path = call.target[0]
            partition = partition_of(path)
            facts = [
                c
                for c in attempt.calls[:index]
                if c.op == "read_many"
                and partition in c.target
                and owner_path(partition) in c.target
            ]
            last = facts[-1] if facts else None
            if last is None or last.outcome != "ok" or not last.results:
                self.fail(
                    _fail("no-heal-after-failed-read", attempt, f"wrote {path} after {last!r}")
                )
                continue
            found = last.results[0]
            seen = set(found) if isinstance(found, dict) else set()
            absent = (
                not ({partition, owner_path(partition)} & seen)
                if path == owner_path(partition)
                else path not in seen
            )
            if not absent:
                self.fail(
                    _fail(
                        "no-heal-after-failed-read",
                        attempt,
                        f"wrote {path} that its read found present",
                    )
                )

    def judge_writes(
        self, recorder: RecordingStore, step: Sequence[Attempt], events: Sequence[Event]
    ) -> None:
        """Every change is explained by an answer (or is an admitted partition heal)."""
        created: set[tuple[str, str]] = set()
        for answered in recorder_attempts(events):
            for response in answered.answers:
                if isinstance(response, CreateNodeResponse) and response.success:
                    created.add((_paths_of(answered)[0], answered.request_id))
                elif isinstance(response, CreateNodesResponse):
                    created |= {(n.path, answered.request_id) for n in response.created}
        for event in events:
            if event.kind != "write" or event.call is None:
                continue
            call = event.call
            attempt = call.attempt
            if attempt is None:
                continue
            answer = attempt.answers[0] if attempt.answers else None
            success = answer is not None and answer.success
            if call.op in ("write", "write_many"):
                for path in event.paths:
                    row = recorder.history[event.index].get(path)
                    key = (path, row.request_id) if row is not None and row.request_id else None
                    if key is not None and key in created:
                        continue
                    if (
                        call.op == "write"
                        and path in heal_paths(attempt)
                        and (row is not None and row.created_by == SYSTEM_USER)
                    ):
                        assert row is not None
                        why = _bad_heal(path, attempt.user, row, recorder.history[event.index - 1])
                        if why:
                            self.fail(_fail("unacknowledged-write", attempt, why))
                        continue  # a partition heal (its read: no-heal-after-failed-read)
                    self.fail(_fail("unacknowledged-write", attempt, f"{path} written ({call})"))
            elif not (success and attempt.kind == call.op):
                self.fail(_fail("unacknowledged-write", attempt, f"{call} changed the store"))

    def judge_bases(self, recorder: RecordingStore, events: Sequence[Event]) -> None:
        """A re-issued update, delete or move changed only the row its basis names."""
        for event in events:
            call = event.call
            if event.kind != "write" or call is None or call.attempt is None:
                continue
            attempt = call.attempt
            request: Any = attempt.request
            if not attempt.by_ledger or call.op not in ("update", "delete", "move"):
                continue
            path = call.target[0]
            before = recorder.history[event.index - 1].get(path)
            named = (request.expected_version, request.expected_request_id)
            if before is None or (before.version, before.request_id) != named:
                self.fail(
                    _fail(
                        "basis-named",
                        attempt,
                        f"{call} applied to {before} on the basis {named}",
                    )
                )

    def judge_path_order(self, step: Sequence[Attempt]) -> None:
        """No two re-issues of one path at once; one path's in the order recorded."""
        reissues = sorted((a for a in step if a.by_ledger), key=lambda a: a.opened)
        for index, later in enumerate(reissues):
            for earlier in reissues[:index]:
                if not set(_paths_of(earlier)) & set(_paths_of(later)):
                    continue
                if earlier.closed is None or earlier.closed > later.opened:
                    self.fail(
                        _fail("path-order", later, f"re-issued while {earlier!r} was in flight")
                    )
                first = self.recorded_order.get(_intent_key(earlier), -1)
                second = self.recorded_order.get(_intent_key(later), -1)
                if first > second >= 0:
                    self.fail(
                        _fail("path-order", later, f"re-issued after {earlier!r}, recorded later")
                    )

    def judge_ledger_events(self, events: Sequence[Event], history: Sequence[State]) -> None:
        for event in events:
            if event.kind == "write" and event.call is not None and event.call.attempt is not None:
                call, attempt = event.call, event.call.attempt
                if attempt.by_ledger and call.op == "write":
                    for path in event.paths:
                        key = (path, attempt.request_id)
                        if key in self.carried_after and path == attempt.request.node.path:  # type: ignore[union-attr]
                            self.fail(
                                _fail(
                                    "no-resurrection",
                                    attempt,
                                    f"re-created {path}: its request was carried after "
                                    "the intent was recorded",
                                )
                            )
            elif event.kind == "answer" and event.attempt is not None:
                self._on_answer(event.attempt, event.response)
            elif event.kind == "verdict" and event.outcome is not None:
                outcome = event.outcome
                key = (outcome.intent.key, outcome.intent.request_id)
                if key not in self.outstanding:
                    self.fail(
                        _fail(
                            "one-verdict",
                            None,
                            f"a verdict for {key} that is not "
                            f"outstanding: {outcome.verdict} {outcome.detail}",
                        )
                    )
                    continue
                del self.outstanding[key]
                self.carried_after.discard(key)
                intent = outcome.intent
                by = event.attempt
                if by is not None and not by.by_ledger:
                    verb = "create" if by.kind == "bulk" else by.kind
                    if by.user != intent.requester or verb != intent.verb:
                        self.fail(
                            _fail(
                                "requester-bound",
                                by,
                                f"settled {key} of {intent.requester} ({intent.verb}): "
                                f"{outcome.verdict} {outcome.detail}",
                            )
                        )
                if outcome.verdict is Verdict.LANDED and intent.verb == "delete":
                    if history[event.index].get(intent.path) is not None:
                        self.fail(_fail("success-row", None, f"LANDED {key} but the row is there"))
                elif outcome.verdict is Verdict.LANDED:
                    # The request's id was on the row at some point up to the verdict (a later
                    # update or move re-stamps the row with its own id: the row keeps the id of
                    # its last write). Request ids are unique, so that is its write landing.
                    where = intent.target if intent.verb == "move" else intent.path
                    rows = (state.get(where or intent.path) for state in history[: event.index + 1])
                    if not any(row is not None and row.request_id == key[1] for row in rows):
                        self.fail(_fail("success-row", None, f"LANDED {key} but no such row"))

    def _on_answer(self, attempt: Attempt, response: Response | None) -> None:
        if response is None:
            return
        rid = attempt.request_id
        carried: list[tuple[str, str]] = []
        recorded: list[tuple[str, str]] = []
        if isinstance(response, CreateNodeResponse):
            path = attempt.request.node.path  # type: ignore[union-attr]
            if response.success:
                carried.append((path, rid))
            elif (
                response.rejection_reason is RejectionReason.UNAVAILABLE
                and response.recorded_for_reissue
                and not attempt.by_ledger
            ):
                recorded.append((path, rid))
        elif isinstance(response, CreateNodesResponse):
            carried = [(n.path, rid) for n in response.created]
            recorded = [(path, rid) for path in response.recorded_for_reissue]
        elif (
            response.rejection_reason is RejectionReason.UNAVAILABLE
            and response.recorded_for_reissue
            and not attempt.by_ledger
        ):
            request: Any = attempt.request
            path = getattr(request, "source", None) or getattr(request, "path", None)
            path = path or request.node.path
            recorded.append((f"{path} {attempt.kind}", rid))
        for key in carried:
            if key in self.outstanding and not attempt.by_ledger:
                self.carried_after.add(key)
        for key in recorded:
            self.outstanding.setdefault(key, 0)
            self.carried_after.discard(key)
            self.recorded_order[key] = len(self.recorded_order)

    def judge_drained(self, mesh: TracedMesh) -> None:
        ledger = mesh.ledger
        left = [(i.key, i.request_id) for i in (*ledger.pending(), *ledger.in_flight())]
        reissuing = mesh.recovery.reissuing if mesh.recovery is not None else 0
        if left or reissuing or self.outstanding:
            self.fail(
                InvariantViolation(
                    "ledger-drains",
                    f"after restore + gap: pending/in flight {left}, re-issuing {reissuing}, "
                    f"recorded without a verdict {sorted(self.outstanding)}",
                )
            )


def _intent_key(attempt: Attempt) -> tuple[str, str]:
    """The ledger key and request id of the intent a re-issue carries."""
    request: Any = attempt.request
    if attempt.kind == "create":
        return request.node.path, attempt.request_id
    path = getattr(request, "source", None) or getattr(request, "path", None)
    return f"{path or request.node.path} {attempt.kind}", attempt.request_id


def recorder_attempts(events: Sequence[Event]) -> list[Attempt]:
    seen: dict[int, Attempt] = {}
    for event in events:
        if event.kind == "answer" and event.attempt is not None:
            seen.setdefault(event.attempt.number, event.attempt)
    return list(seen.values())


def perms_choices() -> list[tuple[str, ...]]:
    return [("*",), *[(verb,) for verb in VERBS], ("create", "delete")]
