"""What the ledger tests build on: a small fake of the mesh interface the recovery uses (evidence
subject and a recorded create), intents, and what a new process would load from a journal."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import reactivex
from reactivex import Observable
from reactivex.disposable import Disposable
from reactivex.subject import Subject

from rxmesh.ledger import PendingWrite, PendingWriteLedger
from rxmesh.model import AccessContext, ChangeFeedGap, CommitAnnounced, MeshNode, StoreEvidence
from rxmesh.operations import CreateNodeRequest, CreateNodeResponse, RejectionReason

Answer = Callable[[CreateNodeRequest], CreateNodeResponse]


def landed(request: CreateNodeRequest) -> CreateNodeResponse:
    return CreateNodeResponse.created(
        request.request_id, request.node.model_copy(update={"version": 1})
    )


def refused(reason: RejectionReason, text: str = "refused") -> Answer:
    def answer(request: CreateNodeRequest) -> CreateNodeResponse:
        return CreateNodeResponse.fail(request.request_id, reason, text)

    return answer


class FakeMesh:
    """``store.answers_again`` is a Subject; ``create_node`` records the request and answers.

    With ``hold=True`` each create answers only when the test calls :meth:`release`.
    """

    def __init__(self, answer: Answer = landed, *, hold: bool = False) -> None:
        self.evidence: Subject[StoreEvidence] = Subject()
        self.store = SimpleNamespace(answers_again=self.evidence)
        self.answer = answer
        self.hold = hold
        self.requests: list[CreateNodeRequest] = []
        self.held: dict[str, Subject[CreateNodeResponse]] = {}
        self.subscribed = 0
        self.disposed = 0

    def create_node(self, request: CreateNodeRequest) -> Observable[CreateNodeResponse]:
        self.requests.append(request)
        if not self.hold:
            return reactivex.defer(lambda _: reactivex.of(self.answer(request)))
        subject: Subject[CreateNodeResponse] = Subject()
        self.held[request.node.path] = subject

        def subscribe(observer: Any, scheduler: Any = None) -> Any:
            self.subscribed += 1
            inner = subject.subscribe(observer)

            def dispose() -> None:
                self.disposed += 1
                inner.dispose()

            return Disposable(dispose)

        return Observable(subscribe)

    def release(self, path: str) -> None:
        subject = self.held.pop(path)
        request = next(r for r in reversed(self.requests) if r.node.path == path)
        subject.on_next(self.answer(request))
        subject.on_completed()

    def declare_gap(self) -> None:
        now = datetime.now(UTC)
        self.evidence.on_next(
            ChangeFeedGap(source="fake", lost_at=now, resumed_at=now, reason="test gap")
        )

    def announce_commit(self, path: str = "acme/other") -> None:
        self.evidence.on_next(CommitAnnounced(source="fake", path=path, version=1))


def make_intent(
    path: str = "acme/docs/readme",
    *,
    request_id: str = "req-1",
    user: str = "alice",
    content: Any = None,
) -> PendingWrite:
    return PendingWrite(
        node=MeshNode(path=path, node_type="Doc", content=content or {"title": path}),
        requester=user,
        access=AccessContext(user=user, on_behalf_of="svc-import"),
        request_id=request_id,
    )


def reloaded(journal_dir: Path) -> list[tuple[str, str]]:
    """What a new ledger over ``journal_dir`` (a new process) would re-issue: (path, request id)."""
    ledger = PendingWriteLedger(journal_dir)
    try:
        return sorted((i.path, i.request_id) for i in ledger.pending())
    finally:
        ledger.close()
