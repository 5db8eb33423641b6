"""How the ledger tells: a recorded intent logged; a settled one counted, logged, published."""

from __future__ import annotations

from loguru import logger
from reactivex.subject import Subject

from rxmesh.instrumentation import _events
from rxmesh.instrumentation import _seam as _instrumentation
from rxmesh.ledger._models import PendingWrite, PendingWriteOutcome
from rxmesh.operations import Verdict

__all__ = ["count_recorded", "log_bulk", "log_recorded", "publish", "reissued", "superseded"]


def count_recorded(counts: dict[str, int], intent: PendingWrite) -> None:
    """Count ``intent`` recorded, and tell the instruments (nothing is built while none is)."""
    counts["recorded"] += 1
    if _instrumentation.enabled:
        _instrumentation.emit(_events.IntentRecorded(request_id=intent.request_id))


def reissued(intent: PendingWrite) -> None:
    """Tell the instruments the recovery re-issues ``intent`` (once, on evidence)."""
    if _instrumentation.enabled:
        _instrumentation.emit(_events.IntentReissued(request_id=intent.request_id))


def log_recorded(intent: PendingWrite, replaced: bool, journal_dir: str | None) -> None:
    """INFO: ``intent`` is recorded (durably when there is a journal)."""
    logger.bind(
        path=intent.path,
        requester=intent.requester,
        request_id=intent.request_id,
        journal_dir=journal_dir,
    ).info(
        "pending write recorded for {} by {} ({}){}",
        intent.path,
        intent.requester,
        "durable" if journal_dir is not None else "in memory",
        "; it replaces the earlier intent for that path" if replaced else "",
    )


def log_bulk(recorded: int, total: int, journal_dir: str | None) -> None:
    """INFO: one line for a bulk's records (not one per node)."""
    logger.bind(journal_dir=journal_dir, recorded=recorded).info(
        "{} of {} pending write(s) of a bulk recorded durably in one step", recorded, total
    )


def superseded(
    counts: dict[str, int], old: PendingWrite, new: PendingWrite | str, when: str
) -> PendingWriteOutcome:
    """Count ``old`` settled DROPPED, superseded by ``new`` (same requester and path; an intent,
    or its request id); the caller publishes the outcome once it has left the ledger's lock."""
    by = new if isinstance(new, str) else new.request_id
    counts["superseded"] += 1
    counts[Verdict.DROPPED] += 1
    return PendingWriteOutcome(
        intent=old,
        verdict=Verdict.DROPPED,
        detail=(
            f"superseded by request {by} of the same requester for the same "
            f"path, {when}; that request carries the write"
        ),
        superseded_by=by,
    )


def publish(subject: Subject[PendingWriteOutcome], outcome: PendingWriteOutcome) -> None:
    """Log ``outcome`` (INFO; WARNING for a refused re-issue) and publish it on ``subject``."""
    intent = outcome.intent
    if _instrumentation.enabled:
        reason = None if outcome.reason is None else outcome.reason.value
        settled = _events.IntentSettled(
            request_id=intent.request_id, verdict=outcome.verdict.value, reason=reason
        )
        _instrumentation.emit(settled)
    bound = logger.bind(
        path=intent.path,
        requester=intent.requester,
        request_id=intent.request_id,
        verdict=outcome.verdict.value,
        reason=None if outcome.reason is None else outcome.reason.value,
        superseded_by=outcome.superseded_by,
    )
    if outcome.superseded_by is not None:
        bound.info(
            "pending write for {} by {} (request {}) settled DROPPED: superseded by request "
            "{} of the same requester, which carries the write",
            intent.path,
            intent.requester,
            intent.request_id,
            outcome.superseded_by,
        )
    elif outcome.verdict is Verdict.DROPPED:
        bound.warning(
            "pending write for {} by {} DROPPED: the re-issue was refused ({}): {}",
            intent.path,
            intent.requester,
            outcome.reason.value if outcome.reason is not None else "no reason",
            outcome.detail,
        )
    else:
        bound.info(
            "pending write for {} by {} settled {}",
            intent.path,
            intent.requester,
            outcome.verdict.value,
        )
    subject.on_next(outcome)
