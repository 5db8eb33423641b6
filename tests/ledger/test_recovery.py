"""PendingWriteRecovery: re-issue each intent once on evidence, never on a timer."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from reactivex.testing import TestScheduler

from rxmesh.exceptions import MeshDisposedError
from rxmesh.ledger import (
    JournalError,
    PendingWriteLedger,
    PendingWriteOutcome,
    PendingWriteRecovery,
    outcome_of,
)
from rxmesh.operations import CreateNodeResponse, RejectionReason, Verdict
from tests.helpers import LogRecords
from tests.ledger._fakes import FakeMesh, landed, make_intent, refused


def _outcomes(ledger: PendingWriteLedger) -> list[PendingWriteOutcome]:
    seen: list[PendingWriteOutcome] = []
    ledger.outcomes.subscribe(seen.append)
    return seen


def test_evidence_reissues_every_pending_intent_once_as_the_original_request() -> None:
    ledger = PendingWriteLedger()
    intents = [make_intent(f"acme/doc{i}", request_id=f"req-{i}", user=f"u{i}") for i in range(3)]
    for intent in intents:
        ledger.record(intent)
    mesh = FakeMesh()

    with PendingWriteRecovery(mesh, ledger):
        mesh.declare_gap()

    assert len(mesh.requests) == 3
    for intent, request in zip(intents, mesh.requests, strict=True):
        assert request.node == intent.node
        assert request.access == intent.access
        assert request.request_id == intent.request_id
        assert request.reissued_after_unavailable is True
    assert ledger.pending() == ()
    assert ledger.in_flight() == ()


def test_an_announced_commit_is_evidence_too() -> None:
    ledger = PendingWriteLedger()
    ledger.record(make_intent())
    mesh = FakeMesh()

    with PendingWriteRecovery(mesh, ledger):
        mesh.announce_commit()

    assert len(mesh.requests) == 1


def test_without_evidence_nothing_is_reissued_even_an_hour_later() -> None:
    scheduler = TestScheduler()
    ledger = PendingWriteLedger()
    ledger.record(make_intent())
    mesh = FakeMesh()

    with PendingWriteRecovery(mesh, ledger, scheduler=scheduler):
        scheduler.advance_to(3600.0)
        assert mesh.requests == []  # no timer, no poll
        assert len(ledger.pending()) == 1
        mesh.declare_gap()  # negative control: the same set-up does re-issue on evidence
        assert len(mesh.requests) == 1


def test_before_start_and_after_dispose_evidence_reissues_nothing() -> None:
    ledger = PendingWriteLedger()
    ledger.record(make_intent())
    mesh = FakeMesh()
    recovery = PendingWriteRecovery(mesh, ledger)

    mesh.declare_gap()
    recovery.start()
    recovery.dispose()
    mesh.declare_gap()

    assert mesh.requests == []
    assert len(ledger.pending()) == 1
    with pytest.raises(MeshDisposedError):
        recovery.start()


@pytest.mark.parametrize(
    ("answer", "verdict", "reason"),
    [
        (landed, Verdict.LANDED, None),
        (
            refused(RejectionReason.NODE_ALREADY_EXISTS),
            Verdict.ALREADY_PRESENT,
            RejectionReason.NODE_ALREADY_EXISTS,
        ),
        (refused(RejectionReason.UNAVAILABLE), Verdict.DROPPED, RejectionReason.UNAVAILABLE),
        (refused(RejectionReason.FORBIDDEN), Verdict.DROPPED, RejectionReason.FORBIDDEN),
        (
            refused(RejectionReason.VALIDATION_FAILED),
            Verdict.DROPPED,
            RejectionReason.VALIDATION_FAILED,
        ),
        (
            refused(RejectionReason.INVALID_NODE_TYPE),
            Verdict.DROPPED,
            RejectionReason.INVALID_NODE_TYPE,
        ),
        (refused(RejectionReason.INVALID_PATH), Verdict.DROPPED, RejectionReason.INVALID_PATH),
        (refused(RejectionReason.UNKNOWN), Verdict.DROPPED, RejectionReason.UNKNOWN),
    ],
)
def test_each_answer_settles_as_its_verdict_and_is_published(
    answer: Any, verdict: Verdict, reason: RejectionReason | None
) -> None:
    ledger = PendingWriteLedger()
    intent = make_intent()
    ledger.record(intent)
    seen = _outcomes(ledger)
    mesh = FakeMesh(answer)

    with PendingWriteRecovery(mesh, ledger):
        mesh.declare_gap()

    (outcome,) = seen
    assert outcome.intent == intent
    assert outcome.verdict is verdict
    assert outcome.reason is reason
    statistics = ledger.statistics()
    assert (statistics.landed, statistics.already_present, statistics.dropped) == (
        int(verdict is Verdict.LANDED),
        int(verdict is Verdict.ALREADY_PRESENT),
        int(verdict is Verdict.DROPPED),
    )


def test_a_success_without_a_reason_is_landed_and_a_failure_without_one_is_dropped_unknown() -> (
    None
):
    intent = make_intent()
    failure = CreateNodeResponse(request_id="req-1", success=False, error="?")

    assert outcome_of(intent, CreateNodeResponse(request_id="req-1", success=True)).verdict is (
        Verdict.LANDED
    )
    dropped = outcome_of(intent, failure)
    assert (dropped.verdict, dropped.reason, dropped.detail) == (
        Verdict.DROPPED,
        RejectionReason.UNKNOWN,
        "?",
    )


def test_a_dropped_reissue_is_a_warning_naming_the_path_and_the_writer(
    log_records: LogRecords,
) -> None:
    ledger = PendingWriteLedger()
    ledger.record(make_intent("acme/contracts/c-17", user="bob"))
    mesh = FakeMesh(refused(RejectionReason.FORBIDDEN, "bob holds no grant"))

    with PendingWriteRecovery(mesh, ledger):
        mesh.declare_gap()

    warnings = [r["message"] for r in log_records if r["level"] == "WARNING"]
    (warning,) = [w for w in warnings if "DROPPED" in w]
    assert "acme/contracts/c-17" in warning
    assert "bob" in warning
    assert "FORBIDDEN" in warning


def test_a_landed_reissue_is_logged_at_info_not_warning(
    log_records: LogRecords,
) -> None:
    ledger = PendingWriteLedger()
    ledger.record(make_intent())
    mesh = FakeMesh()

    with PendingWriteRecovery(mesh, ledger):
        mesh.declare_gap()

    settled = [r for r in log_records if "settled LANDED" in r["message"]]
    assert [r["level"] for r in settled] == ["INFO"]
    assert not [r for r in log_records if r["level"] in {"WARNING", "ERROR"}]


def test_a_second_evidence_does_not_reissue_a_settled_intent() -> None:
    ledger = PendingWriteLedger()
    ledger.record(make_intent())
    mesh = FakeMesh(refused(RejectionReason.UNAVAILABLE))  # refused again: DROPPED, once

    with PendingWriteRecovery(mesh, ledger):
        mesh.declare_gap()
        mesh.declare_gap()
        mesh.announce_commit()

    assert len(mesh.requests) == 1
    assert ledger.statistics().dropped == 1


def test_evidence_while_a_round_is_in_flight_does_not_reissue_the_same_intents() -> None:
    ledger = PendingWriteLedger()
    for path in ("acme/a", "acme/b"):
        ledger.record(make_intent(path, request_id=path))
    mesh = FakeMesh(hold=True)
    seen = _outcomes(ledger)

    with PendingWriteRecovery(mesh, ledger):
        mesh.declare_gap()
        mesh.declare_gap()
        mesh.announce_commit()
        assert [r.node.path for r in mesh.requests] == ["acme/a", "acme/b"]
        assert len(ledger.in_flight()) == 2
        mesh.release("acme/a")
        mesh.release("acme/b")

    assert [o.verdict for o in seen] == [Verdict.LANDED, Verdict.LANDED]
    assert len(mesh.requests) == 2


def test_a_refusal_recorded_while_the_old_intent_is_in_flight_is_reissued_by_the_next_evidence(
    journal_dir: Path,
) -> None:
    ledger = PendingWriteLedger(journal_dir)
    ledger.record(make_intent(request_id="old"))
    mesh = FakeMesh(hold=True)

    with PendingWriteRecovery(mesh, ledger):
        mesh.declare_gap()
        assert ledger.record(make_intent(request_id="new")) is True  # a later refusal, same path
        mesh.release("acme/docs/readme")  # the old one settles...
        # ...and does not delete the file, which now holds the newer intent.
        assert [i.request_id for i in PendingWriteLedger(journal_dir).pending()] == ["new"]
        mesh.declare_gap()
        assert [r.request_id for r in mesh.requests] == ["old", "new"]
        mesh.release("acme/docs/readme")

    assert PendingWriteLedger(journal_dir).pending() == ()


def test_recording_the_intent_being_reissued_does_not_record_it_again(journal_dir: Path) -> None:
    ledger = PendingWriteLedger(journal_dir)
    intent = make_intent()
    ledger.record(intent)
    mesh = FakeMesh(hold=True)

    with PendingWriteRecovery(mesh, ledger):
        mesh.declare_gap()
        assert ledger.record(intent) is False  # e.g. the re-issue met UNAVAILABLE again
        assert ledger.pending() == ()
        mesh.release(intent.path)
        mesh.declare_gap()

    assert len(mesh.requests) == 1
    assert ledger.statistics().recorded == 1


def test_a_reissue_that_errors_is_dropped_unknown_and_reported_at_error(
    log_records: LogRecords,
) -> None:
    ledger = PendingWriteLedger()
    ledger.record(make_intent())
    seen = _outcomes(ledger)

    def explode(_: Any) -> CreateNodeResponse:
        raise RuntimeError("boom")

    mesh = FakeMesh(explode)
    with PendingWriteRecovery(mesh, ledger):
        mesh.declare_gap()

    (outcome,) = seen
    assert (outcome.verdict, outcome.reason) == (Verdict.DROPPED, RejectionReason.UNKNOWN)
    assert "RuntimeError: boom" in outcome.detail
    assert any(r["level"] == "ERROR" and "boom" in r["message"] for r in log_records)


def test_a_reissue_that_completes_without_an_answer_is_dropped_unknown() -> None:
    ledger = PendingWriteLedger()
    ledger.record(make_intent())
    seen = _outcomes(ledger)
    mesh = FakeMesh(hold=True)

    with PendingWriteRecovery(mesh, ledger):
        mesh.declare_gap()
        mesh.held.pop("acme/docs/readme").on_completed()

    (outcome,) = seen
    assert (outcome.verdict, outcome.reason) == (Verdict.DROPPED, RejectionReason.UNKNOWN)


def test_a_mesh_disposed_during_the_reissue_leaves_the_intent_in_the_ledger(
    journal_dir: Path,
) -> None:
    ledger = PendingWriteLedger(journal_dir)
    ledger.record(make_intent())
    seen = _outcomes(ledger)
    mesh = FakeMesh(hold=True)

    with PendingWriteRecovery(mesh, ledger):
        mesh.declare_gap()
        mesh.held.pop("acme/docs/readme").on_error(MeshDisposedError("mesh disposed"))

    assert seen == []
    assert len(ledger.pending()) == 1
    assert len(PendingWriteLedger(journal_dir).pending()) == 1


def test_dispose_cancels_reissues_in_flight_and_puts_their_intents_back() -> None:
    ledger = PendingWriteLedger()
    for path in ("acme/a", "acme/b", "acme/c"):
        ledger.record(make_intent(path, request_id=path))
    mesh = FakeMesh(hold=True)
    recovery = PendingWriteRecovery(mesh, ledger, max_concurrent=2)

    recovery.start()
    mesh.declare_gap()
    assert recovery.reissuing == 3
    recovery.dispose()

    assert mesh.disposed == 2  # both subscriptions in flight were cancelled
    assert sorted(i.path for i in ledger.pending()) == ["acme/a", "acme/b", "acme/c"]
    assert ledger.in_flight() == ()


def test_at_most_max_concurrent_reissues_are_in_flight() -> None:
    ledger = PendingWriteLedger()
    paths = [f"acme/d{i}" for i in range(5)]
    for path in paths:
        ledger.record(make_intent(path, request_id=path))
    mesh = FakeMesh(hold=True)

    with PendingWriteRecovery(mesh, ledger, max_concurrent=2):
        mesh.declare_gap()
        assert [r.node.path for r in mesh.requests] == paths[:2]
        mesh.release(paths[0])
        assert [r.node.path for r in mesh.requests] == paths[:3]
        for path in paths[1:]:
            mesh.release(path)

    assert len(mesh.requests) == 5
    assert ledger.statistics().landed == 5


def test_a_restarted_ledger_is_reissued_on_evidence_and_its_file_removed(
    journal_dir: Path,
) -> None:
    intent = make_intent()
    PendingWriteLedger(journal_dir).record(intent)  # the process that met UNAVAILABLE
    ledger = PendingWriteLedger(journal_dir)  # the next process
    seen = _outcomes(ledger)
    mesh = FakeMesh()

    with PendingWriteRecovery(mesh, ledger):
        assert mesh.requests == []  # loading is not evidence
        mesh.declare_gap()

    assert [r.request_id for r in mesh.requests] == ["req-1"]
    assert [o.verdict for o in seen] == [Verdict.LANDED]
    assert list(journal_dir.iterdir()) == []


def test_thousands_of_synchronous_answers_do_not_recurse() -> None:
    ledger = PendingWriteLedger()
    for i in range(3_000):
        ledger.record(make_intent(f"acme/n{i}", request_id=f"r{i}"))
    mesh = FakeMesh()
    limit = sys.getrecursionlimit()

    with PendingWriteRecovery(mesh, ledger, max_concurrent=4):
        mesh.declare_gap()

    assert sys.getrecursionlimit() == limit
    assert ledger.statistics().landed == 3_000


def test_settling_an_intent_twice_is_refused() -> None:
    ledger = PendingWriteLedger()
    intent = make_intent()
    ledger.record(intent)
    (taken,) = ledger.take_all()
    outcome = PendingWriteOutcome(intent=taken, verdict=Verdict.LANDED)
    ledger.settle(taken, outcome)

    with pytest.raises(ValueError, match="not outstanding"):
        ledger.settle(taken, outcome)
    with pytest.raises(ValueError, match="not about"):
        ledger.settle(make_intent("acme/other"), outcome)


def test_a_file_that_cannot_be_deleted_still_publishes_the_verdict_and_reports_at_error(
    journal_dir: Path, monkeypatch: pytest.MonkeyPatch, log_records: LogRecords
) -> None:
    ledger = PendingWriteLedger(journal_dir)
    ledger.record(make_intent())
    seen = _outcomes(ledger)
    (taken,) = ledger.take_all()

    def failing_unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(os, "unlink", failing_unlink)
    with pytest.raises(JournalError, match="could not delete"):
        ledger.settle(taken, PendingWriteOutcome(intent=taken, verdict=Verdict.LANDED))
    monkeypatch.undo()

    assert [o.verdict for o in seen] == [Verdict.LANDED]
    assert any(
        r["level"] == "ERROR" and "re-issue it again" in r["message"] for r in log_records
    )
    assert len(PendingWriteLedger(journal_dir).pending()) == 1  # the next process re-issues it


def test_the_recovery_does_not_raise_into_the_mesh_when_a_file_cannot_be_deleted(
    journal_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = PendingWriteLedger(journal_dir)
    ledger.record(make_intent())
    seen = _outcomes(ledger)
    mesh = FakeMesh()

    def failing_unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError(30, "Read-only file system")

    with PendingWriteRecovery(mesh, ledger):
        monkeypatch.setattr(os, "unlink", failing_unlink)
        mesh.declare_gap()
        monkeypatch.undo()

    assert [o.verdict for o in seen] == [Verdict.LANDED]
    assert ledger.statistics().landed == 1
