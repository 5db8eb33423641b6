"""The driver: what one step of the model-based check does, on a loop of its own.

:class:`Driver` is plain Python (no hypothesis): the state machine calls it, and so do the
regression tests that replay the minimal sequences verbatim.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from rxmesh import AccessContext, MeshNode
from rxmesh.ledger import PendingWriteLedger
from rxmesh.mesh._access import grant_path, owner_path
from rxmesh.operations import (
    CreateNodeRequest,
    CreateNodesRequest,
    DeleteNodeRequest,
    MoveNodeRequest,
    RejectionReason,
    UpdateNodeRequest,
)
from rxmesh.providers import Store
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore

from ._harness import (
    CURRENT,
    LADDER,
    PARTITIONS,
    PATHS,
    USERS,
    Attempt,
    Event,
    InvariantViolation,
    Oracle,
    RecordingStore,
    Request,
    Row,
    TracedMesh,
    VirtualClock,
)

_T = TypeVar("_T")


# --------------------------------------------------------------------------- what a step does


@dataclass(frozen=True)
class Op:
    """One request of a batch. ``verb``: create, bulk, update, delete, move, grant, revoke,
    resend (``back`` picks the request sent ``back`` sends ago, verbatim), again (the same, over
    creates and bulks only), retry (the caller's re-issue, verbatim, of its latest request
    answered UNAVAILABLE), undo (the requester of the ``back``-th latest create deletes its
    node; of a bulk, its ``which``-th node), steal (``user`` sends a copy of the ``back``-th
    latest request, with its request id, as their own) or reuse (the requester of the
    ``back``-th latest create updates its node with the create's request id). An update, delete
    or move with ``which`` 1 names ``expected_version=1`` (no request id)."""

    verb: str
    user: str = "system"
    paths: tuple[str, ...] = ()
    grantee: str = ""
    perms: tuple[str, ...] = ()
    back: int = 0
    which: int = 0

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def __repr__(self) -> str:
        if self.verb == "resend":
            return f"resend({self.back})"
        if self.verb == "retry":
            return "retry()"
        if self.verb == "again":
            return f"again({self.back})"
        if self.verb == "undo":
            return f"undo({self.back}, {self.which})"
        if self.verb == "steal":
            return f"steal({self.user!r}, {self.back})"
        if self.verb == "reuse":
            return f"reuse({self.back})"
        if self.which and self.verb in ("update", "delete", "move"):
            return f"{self.verb}({self.user!r}, {', '.join(map(repr, self.paths))}, v1)"
        if self.verb == "grant":
            return f"grant({self.paths[0]!r}, {self.grantee!r}, {list(self.perms)!r})"
        if self.verb == "revoke":
            return f"revoke({self.paths[0]!r}, {self.grantee!r})"
        shown = repr(list(self.paths)) if self.verb == "bulk" else ", ".join(map(repr, self.paths))
        return f"{self.verb}({self.user!r}, {shown})"


def create(user: str, path: str) -> Op:
    return Op("create", user, (path,))


def bulk(user: str, *paths: str) -> Op:
    return Op("bulk", user, tuple(paths))


def update(user: str, path: str) -> Op:
    return Op("update", user, (path,))


def delete(user: str, path: str) -> Op:
    return Op("delete", user, (path,))


def move(user: str, source: str, target: str) -> Op:
    return Op("move", user, (source, target))


def grant(partition: str, grantee: str, *perms: str) -> Op:
    return Op("grant", "system", (partition,), grantee, tuple(perms))


def revoke(partition: str, grantee: str) -> Op:
    return Op("revoke", "system", (partition,), grantee)


def resend(back: int = 0) -> Op:
    return Op("resend", back=back)


def again(back: int = 0) -> Op:
    return Op("again", back=back)


def retry() -> Op:
    return Op("retry")


def undo(back: int = 0, which: int = 0) -> Op:
    return Op("undo", back=back, which=which)


def steal(user: str, back: int = 0) -> Op:
    return Op("steal", user, back=back)


def reuse(back: int = 0) -> Op:
    return Op("reuse", back=back)


@dataclass(frozen=True)
class Toggle:
    """A fault toggle run just before the batch's (after+1)-th store call (0: before the
    batch; a batch that makes fewer calls gets it at its end)."""

    action: str  # refuse_writes | refuse_reads | restore | restore+gap | fault:<partition>:<n>
    after: int = 0

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def __repr__(self) -> str:
        return f"Toggle({self.action!r}, after={self.after})"


@dataclass(frozen=True)
class Batch:
    ops: tuple[Op, ...]
    toggle: Toggle | None = None
    interleave: bool = False

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def __repr__(self) -> str:
        extra = f", toggle={self.toggle!r}" if self.toggle else ""
        extra += ", interleave=True" if self.interleave else ""
        return f"Batch({list(self.ops)!r}{extra})"


# --------------------------------------------------------------------------- the driver


class Driver:
    """One mesh over ``FaultInjectingStore(<inner>)`` behind a recorder, its loop, its oracle.

    ``inner`` is ``None`` for the embedded store; a coroutine factory for another (PostgreSQL),
    with ``close`` to release it, ``twice`` to list the paths it holds more than one row for,
    and ``real_time`` (a store that does IO cannot be run to quiescence by counting loop turns:
    the virtual clock then advances whenever the loop has been quiet for a few milliseconds).
    """

    def __init__(
        self,
        *,
        only: frozenset[str] | None = None,
        inner: Callable[[], Awaitable[Store]] | None = None,
        close: Callable[[Store], Awaitable[None]] | None = None,
        twice: Callable[[Store], Awaitable[list[str]]] | None = None,
        real_time: bool = False,
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self.real_time = real_time
        self._close = close
        self._twice = twice
        store: Store = InMemoryStore() if inner is None else self.run(inner())
        self.inner = store
        self.faults = FaultInjectingStore(store)
        self.recorder = RecordingStore(self.faults)
        self.clock = VirtualClock()
        self.mesh = TracedMesh(
            self.recorder,
            retry_delays=LADDER,
            ledger=PendingWriteLedger(""),
            scheduler=self.clock,
        )
        self.oracle = Oracle(only)
        self.sent: list[Request] = []
        self.serial = 0
        self._verdicts = self.mesh.ledger.outcomes.subscribe(
            lambda outcome: self.recorder.events.append(
                Event("verdict", self.recorder.index, outcome=outcome, attempt=CURRENT.get())
            )
        )

    # -- the loop --

    def run(self, work: Awaitable[_T]) -> _T:
        return self.loop.run_until_complete(work)

    async def _idle(self) -> None:
        """Yield until nothing but this task is ready on the loop (no IO, no real timers).

        CPython's loop keeps its ready callbacks in ``_ready``; a loop without it gets a fixed
        number of turns (enough for the embedded store, whose calls complete synchronously).
        """
        ready = getattr(self.loop, "_ready", None)
        if ready is None:
            for _ in range(200):
                await asyncio.sleep(0)
            return
        for _ in range(100_000):
            await asyncio.sleep(0)
            if not ready:
                return
        raise AssertionError("the loop never went idle")

    async def quiesce(self, attempts: Sequence[Attempt] = ()) -> None:
        """Run until nothing more happens: every ready callback, then every virtual timer."""
        if self.real_time:
            await self._quiesce_real(attempts)
            return
        for _ in range(10_000):
            await self._idle()
            if not self.clock.fire_next():
                return
        raise AssertionError("the virtual clock never ran dry")

    async def _quiesce_real(self, attempts: Sequence[Attempt]) -> None:
        quiet = 0
        deadline = self.loop.time() + 60.0
        while self.loop.time() < deadline:
            await asyncio.sleep(0.005)
            busy = (
                any(not a.answers for a in attempts if not a.by_ledger)
                or (self.mesh.recovery is not None and self.mesh.recovery.reissuing > 0)
                or self.clock.pending
            )
            if self.clock.pending:
                self.clock.fire_next()
            quiet = 0 if busy else quiet + 1
            if quiet >= 6:
                return
        raise AssertionError("the step did not settle within 60 s")

    # -- requests --

    def request(self, op: Op) -> Request | None:
        self.serial += 1
        access = AccessContext(user=op.user)
        content = {"v": self.serial}
        if op.verb == "resend":
            if not self.sent:
                return None
            return self.sent[max(0, len(self.sent) - 1 - op.back)]
        if op.verb == "retry":
            return self._unavailable() or (self.sent[-1] if self.sent else None)
        req: Request
        made = [
            r
            for r in self.sent
            if isinstance(r, CreateNodesRequest)
            or (isinstance(r, CreateNodeRequest) and "/_" not in r.node.path)
        ]
        if op.verb == "again":
            return made[max(0, len(made) - 1 - op.back)] if made else None
        if op.verb == "steal":
            theirs = [
                r
                for r in self.sent
                if r.access is not None and not r.access.is_system and r.access.user != op.user
            ]
            if not theirs:
                return None
            origin = theirs[max(0, len(theirs) - 1 - op.back)]
            req = origin.model_copy(update={"access": access, **_altered(origin, self.serial)})
            self.sent.append(req)
            return req
        if op.verb == "reuse":
            single = [r for r in made if isinstance(r, CreateNodeRequest)]
            if not single:
                return None
            origin = single[max(0, len(single) - 1 - op.back)]
            assert isinstance(origin, CreateNodeRequest)
            req = UpdateNodeRequest(
                node=_doc(origin.node.path, {"u": self.serial}),
                access=origin.access,
                request_id=origin.request_id,
            )
            self.sent.append(req)
            return req
        if op.verb == "undo":
            if not made:
                return None
            origin = made[max(0, len(made) - 1 - op.back)]
            nodes = origin.nodes if isinstance(origin, CreateNodesRequest) else (origin.node,)
            req = DeleteNodeRequest(path=nodes[op.which % len(nodes)].path, access=origin.access)
            self.sent.append(req)
            return req
        if op.verb == "create":
            req = CreateNodeRequest(node=_doc(op.paths[0], content), access=access)
        elif op.verb == "bulk":
            nodes = tuple(_doc(p, {"v": self.serial, "i": i}) for i, p in enumerate(op.paths))
            req = CreateNodesRequest(nodes=nodes, access=access)
        elif op.verb == "update":
            req = UpdateNodeRequest(
                node=_doc(op.paths[0], {"u": self.serial}), access=access, **_basis(op)
            )
        elif op.verb == "delete":
            req = DeleteNodeRequest(path=op.paths[0], access=access, **_basis(op))
        elif op.verb == "move":
            req = MoveNodeRequest(
                source=op.paths[0], target=op.paths[1], access=access, **_basis(op)
            )
        elif op.verb == "grant":
            node = MeshNode(
                path=grant_path(op.paths[0], op.grantee),
                node_type="Grant",
                content={"permissions": list(op.perms)},
            )
            req = CreateNodeRequest(node=node, access=AccessContext.system())
        elif op.verb == "revoke":
            req = DeleteNodeRequest(
                path=grant_path(op.paths[0], op.grantee), access=AccessContext.system()
            )
        else:
            raise ValueError(op.verb)
        self.sent.append(req)
        return req

    def _unavailable(self) -> Request | None:
        """The caller's latest request whose latest answer (to the caller) was UNAVAILABLE: a
        caller stops re-issuing a request once it has been answered otherwise."""
        decided: set[int] = set()
        for attempt in reversed(self.mesh.attempts):
            if attempt.by_ledger or not attempt.answers or id(attempt.request) in decided:
                continue
            decided.add(id(attempt.request))
            if attempt.answers[-1].rejection_reason is RejectionReason.UNAVAILABLE:
                return attempt.request
        return None

    def _source(self, req: Request) -> Any:
        if isinstance(req, CreateNodeRequest):
            return self.mesh.create_node(req)
        if isinstance(req, CreateNodesRequest):
            return self.mesh.create_nodes(req)
        if isinstance(req, UpdateNodeRequest):
            return self.mesh.update_node(req)
        if isinstance(req, DeleteNodeRequest):
            return self.mesh.delete_node(req)
        return self.mesh.move_node(req)

    # -- steps --

    def toggle(self, action: str) -> None:
        if action == "refuse_writes":
            self.faults.refuse_writes_as_unreachable()
        elif action == "refuse_reads":
            self.faults.refuse_reads_as_unreachable()
        elif action == "restore":
            self.faults.restore()
        elif action == "restore+gap":
            self.faults.restore()
            self.faults.declare_gap("model: store answers again")
        elif action.startswith("fault:"):
            _, partition, times = action.split(":")
            self.faults.fault_next_read(partition, times=int(times))
        else:
            raise ValueError(action)

    def batch(self, batch: Batch) -> None:
        """Send the batch's requests concurrently, run to quiescence, judge the step."""
        first = len(self.mesh.attempts)
        requests = [r for r in (self.request(op) for op in batch.ops) if r is not None]
        self.recorder.defer = batch.interleave
        if batch.toggle is not None:
            self.recorder.arm_toggle(batch.toggle.after, lambda: self.toggle(batch.toggle.action))  # type: ignore[union-attr]
        subscriptions: list[Any] = []

        async def send() -> None:
            subscriptions.extend(self._source(req).subscribe() for req in requests)
            await self.quiesce(self.mesh.attempts[first:])

        async def late() -> None:
            self.recorder.fire_toggle()  # a batch that made fewer calls: its toggle now
            await self.quiesce(self.mesh.attempts[first:])

        self.run(send())
        self.run(late())
        self.recorder.defer = False
        for subscription in subscriptions:
            subscription.dispose()
        self.judge(first)

    def knob(self, action: str) -> None:
        """A fault toggle between batches (a gap may start re-issues: they are judged too)."""
        first = len(self.mesh.attempts)

        async def knob() -> None:
            self.toggle(action)  # on the loop: a gap starts re-issues, which subscribe here
            await self.quiesce(self.mesh.attempts[first:])

        self.run(knob())
        self.judge(first)

    def drain(self) -> None:
        """The final restore and gap: every intent must settle with its verdict."""
        first = len(self.mesh.attempts)

        async def final() -> None:
            self.faults.restore()
            self.faults.declare_gap("model: final restore")
            await self.quiesce(self.mesh.attempts[first:])

        self.run(final())
        self.oracle.judge_step(self.recorder, self.mesh.attempts[first:])
        self.compare_store(raise_found=False)
        self.oracle.judge_drained(self.mesh)
        self.oracle.raise_found()

    def judge(self, first: int) -> None:
        self.oracle.judge_step(self.recorder, self.mesh.attempts[first:])
        self.compare_store()

    # -- the store against the model --

    def tracked(self) -> list[str]:
        system = [
            path
            for partition in PARTITIONS
            for path in (
                partition,
                owner_path(partition),
                *(grant_path(partition, user) for user in USERS),
            )
        ]
        return [*PATHS, *system]

    def stored(self) -> tuple[dict[str, Row], list[str]]:
        """The store's rows (read straight from the inner store) and any path held twice."""
        if isinstance(self.inner, InMemoryStore):
            nodes = self.inner.nodes()
            paths = [n.path for n in nodes]
            twice = sorted({p for p in paths if paths.count(p) > 1})
            return {n.path: Row.of(n) for n in nodes}, twice
        return self.run(self._stored_elsewhere())

    async def _stored_elsewhere(self) -> tuple[dict[str, Row], list[str]]:

        found = await self.inner.read_many(self.tracked())
        twice = [] if self._twice is None else await self._twice(self.inner)
        return {p: Row.of(n) for p, n in found.items()}, twice

    def compare_store(self, *, raise_found: bool = True) -> None:
        rows, twice = self.stored()
        if twice:
            self.oracle.fail(InvariantViolation("two-rows", f"paths held twice: {twice}"))
        model = self.recorder.shadow
        for path in sorted(set(rows) | set(model)):
            if isinstance(self.inner, InMemoryStore) or path in self.tracked():
                want, got = model.get(path), rows.get(path)
                if want == got:
                    continue
                name = "success-row" if want is not None else "unacknowledged-write"
                self.oracle.fail(
                    InvariantViolation(name, f"{path}: the model holds {want}, the store {got}")
                )
        if raise_found:
            self.oracle.raise_found()

    def close(self) -> None:
        try:
            self._verdicts.dispose()
            self.mesh.dispose()
            if self._close is not None:
                self.run(self._close(self.inner))
            self.run(self._idle())
        finally:
            self.loop.close()


def _doc(path: str, content: dict[str, Any]) -> MeshNode:
    return MeshNode(path=path, node_type="Doc", content=content)


def _basis(op: Op) -> dict[str, Any]:
    return {"expected_version": 1} if op.which else {}


def _altered(origin: Request, serial: int) -> dict[str, Any]:
    """A stolen request's own content (its paths and request id are the victim's)."""
    if isinstance(origin, CreateNodeRequest | UpdateNodeRequest):
        return {"node": origin.node.model_copy(update={"content": {"stolen": serial}})}
    if isinstance(origin, CreateNodesRequest):
        stolen = {"content": {"stolen": serial}}
        return {"nodes": tuple(n.model_copy(update=stolen) for n in origin.nodes)}
    return {}
