"""The intents of one path are re-issued one after another, in the order they were recorded (the
ledger's sequence, kept in the journal), never by the wall clock (issue 31 item 2).

Negative controls: intents of different paths still run concurrently; an old journal without
sequences still loads, in ``recorded_at`` order.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reactivex import Observable
from reactivex.disposable import Disposable
from reactivex.subject import Subject

from rxmesh.ledger import PendingWrite, PendingWriteLedger, PendingWriteRecovery
from rxmesh.model import ChangeFeedGap, MeshNode, StoreEvidence
from rxmesh.operations import CreateNodeResponse, NodeOperationResponse
from tests.helpers import ALICE

NOW = datetime(2026, 1, 1, tzinfo=UTC)
EARLIER = NOW - timedelta(seconds=2)  # the clock stepped back between the two requests


def intent(verb: str, path: str, request_id: str, at: datetime, **fields: Any) -> PendingWrite:
    basis = {} if verb == "create" else {"expected_version": 1, "expected_request_id": "seed"}
    return PendingWrite(
        node=MeshNode(path=path, node_type="Doc", content={"by": request_id}),
        requester="alice",
        access=ALICE,
        request_id=request_id,
        recorded_at=at,
        origin=verb,  # type: ignore[arg-type]
        **basis,
        **fields,
    )


class HoldingMesh:
    """Every verb's re-issue is held until :meth:`release`; ``started`` says in which order they
    were subscribed, ``running`` which are in flight now."""

    def __init__(self) -> None:
        self.evidence: Subject[StoreEvidence] = Subject()
        self.store = self
        self.started: list[str] = []
        self.running: set[str] = set()
        self.held: dict[str, tuple[Subject[Any], Any]] = {}

    @property
    def answers_again(self) -> Observable[StoreEvidence]:
        return self.evidence

    async def read(self, path: str) -> MeshNode | None:
        raise AssertionError("no re-issue here has an unknown outcome")

    def _held(self, name: str, answer: Any) -> Observable[Any]:
        subject: Subject[Any] = Subject()

        def subscribe(observer: Any, scheduler: Any = None) -> Any:
            self.started.append(name)
            self.running.add(name)
            self.held[name] = (subject, answer)
            return Disposable(subject.subscribe(observer).dispose)

        return Observable(subscribe)

    def create_node(self, request: Any) -> Observable[Any]:
        return self._held(
            f"create {request.node.path}",
            CreateNodeResponse.created(request.request_id, request.node),
        )

    def update_node(self, request: Any) -> Observable[Any]:
        return self._op("update", request.node.path, request.request_id)

    def delete_node(self, request: Any) -> Observable[Any]:
        return self._op("delete", request.path, request.request_id)

    def move_node(self, request: Any) -> Observable[Any]:
        return self._op("move", request.source, request.request_id)

    def _op(self, verb: str, path: str, request_id: str) -> Observable[Any]:
        return self._held(
            f"{verb} {path}", NodeOperationResponse(request_id=request_id, success=True)
        )

    def release(self, name: str) -> None:
        subject, answer = self.held.pop(name)
        self.running.discard(name)
        subject.on_next(answer)
        subject.on_completed()

    def gap(self) -> None:
        self.evidence.on_next(
            ChangeFeedGap(source="fake", lost_at=NOW, resumed_at=NOW, reason="test")
        )


def test_one_paths_intents_run_one_after_another_in_recorded_order() -> None:
    """fails at 1d389e8 because the create (recorded second, its wall clock stepped back) was
    re-issued first, concurrently with the delete recorded before it."""
    ledger = PendingWriteLedger("")
    ledger.record(intent("delete", "acme/a", "del-1", NOW))
    ledger.record(intent("create", "acme/a", "create-2", EARLIER))
    ledger.record(intent("create", "acme/b", "create-3", EARLIER))
    mesh = HoldingMesh()
    with PendingWriteRecovery(mesh, ledger):  # type: ignore[arg-type]
        mesh.gap()
        # the control: another path runs at once, concurrently
        assert mesh.started == ["delete acme/a", "create acme/b"]
        mesh.release("delete acme/a")
        assert mesh.started[-1] == "create acme/a"
        assert mesh.running == {"create acme/b", "create acme/a"}
        mesh.release("create acme/a")
        mesh.release("create acme/b")
    assert ledger.statistics().landed == 3


def test_a_move_waits_for_the_earlier_intents_of_its_target() -> None:
    ledger = PendingWriteLedger("")
    ledger.record(intent("create", "acme/z", "create-1", NOW))
    ledger.record(intent("move", "acme/a", "move-2", EARLIER, target="acme/z"))
    mesh = HoldingMesh()
    with PendingWriteRecovery(mesh, ledger):  # type: ignore[arg-type]
        mesh.gap()
        assert mesh.started == ["create acme/z"]
        mesh.release("create acme/z")
        assert mesh.started == ["create acme/z", "move acme/a"]
        mesh.release("move acme/a")


def test_the_sequence_is_kept_in_the_journal_across_restarts(tmp_path: Path) -> None:
    """fails at 1d389e8 because a restarted ledger ordered the intents by ``recorded_at``."""
    journal = tmp_path / "journal"
    first = PendingWriteLedger(journal)
    first.record(intent("delete", "acme/a", "del-1", NOW))
    first.record(intent("create", "acme/a", "create-2", EARLIER))
    first.close()
    second = PendingWriteLedger(journal)
    order = [(i.request_id, i.sequence) for i in second.pending()]
    assert [request_id for request_id, _ in order] == ["del-1", "create-2"], order
    assert order[0][1] < order[1][1]
    second.record(intent("update", "acme/b", "update-3", EARLIER - timedelta(days=1)))
    assert [i.request_id for i in second.take_all()] == ["del-1", "create-2", "update-3"]
    second.close()


async def test_on_the_mesh_a_delete_then_a_create_of_one_path_leaves_the_created_node(
    monkeypatch: Any,
) -> None:
    """End to end on the embedded store. Fails at 1d389e8 because the create, re-issued first
    (its clock stepped back), found the old node (ALREADY_PRESENT) and the delete then removed
    it: the path ended absent."""
    from rxmesh.aio import first_value
    from rxmesh.ledger import _models
    from rxmesh.operations import CreateNodeRequest, DeleteNodeRequest
    from tests.helpers import Outcomes
    from tests.mesh.conftest import make_mesh

    mesh, store = make_mesh()
    await mesh.create(MeshNode(path="acme/a", node_type="Doc", content={"v": "old"}), access=ALICE)
    store.refuse_writes_as_unreachable()
    delete = DeleteNodeRequest(path="acme/a", access=ALICE)
    assert (await first_value(mesh.delete_node(delete), timeout=5)).recorded_for_reissue

    class SteppedBack(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) - timedelta(seconds=2)

    monkeypatch.setattr(_models, "datetime", SteppedBack)  # the clock that stamps recorded_at
    create = CreateNodeRequest(
        node=MeshNode(path="acme/a", node_type="Doc", content={"v": "new"}), access=ALICE
    )
    assert (await first_value(mesh.create_node(create), timeout=5)).recorded_for_reissue
    stamps = {i.verb: i.recorded_at for i in mesh.ledger.pending()}
    assert stamps["create"] < stamps["delete"]  # recorded second, stamped earlier
    collected = Outcomes(mesh.ledger)
    store.restore()
    store.declare_gap("back")
    outcomes = await collected.wait(2)
    assert sorted(o.verdict.value for o in outcomes) == ["LANDED", "LANDED"], outcomes
    rows = {n.path: n for n in store.inner.nodes("acme")}
    assert rows["acme/a"].content == {"v": "new"}
    mesh.dispose()


async def test_the_sequence_is_kept_in_the_log_across_restarts(tmp_path: Path) -> None:
    """The same through the log (``record_durably``, ``record_many_durably``). Fails at 1d389e8
    because the restarted ledger ordered them by ``recorded_at``."""
    journal = tmp_path / "journal"
    first = PendingWriteLedger(journal)
    await first.record_durably(intent("delete", "acme/a", "del-1", NOW))
    await first.record_many_durably(
        [intent("create", "acme/a", "bulk-2", EARLIER), intent("create", "acme/b", "bulk-2", NOW)]
    )
    first.close()
    second = PendingWriteLedger(journal)
    assert [i.request_id for i in second.pending()] == ["del-1", "bulk-2", "bulk-2"]
    assert [i.path for i in second.pending()] == ["acme/a", "acme/a", "acme/b"]
    second.close()
