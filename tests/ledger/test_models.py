"""PendingWrite and PendingWriteOutcome are frozen and round-trip through JSON."""

from __future__ import annotations

import dataclasses

import pydantic
import pytest

from rxmesh.ledger import LedgerStatistics, PendingWrite, PendingWriteLedger, PendingWriteOutcome
from rxmesh.operations import RejectionReason, Verdict
from tests.ledger._fakes import make_intent


def test_a_pending_write_round_trips_through_json() -> None:
    intent = make_intent(content={"nested": [1, 2.5, None, "x"]})

    again = PendingWrite.model_validate_json(intent.model_dump_json())

    assert again == intent
    assert again.origin == "create"
    assert again.recorded_at.tzinfo is not None
    assert again.path == "acme/docs/readme"


def test_an_outcome_round_trips_through_json() -> None:
    outcome = PendingWriteOutcome(
        intent=make_intent(),
        verdict=Verdict.DROPPED,
        reason=RejectionReason.FORBIDDEN,
        detail="no grant",
    )

    assert PendingWriteOutcome.model_validate_json(outcome.model_dump_json()) == outcome


def test_the_records_are_frozen() -> None:
    intent = make_intent()
    statistics = PendingWriteLedger().statistics()

    with pytest.raises(pydantic.ValidationError):
        intent.requester = "mallory"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        statistics.pending = 3  # type: ignore[misc]
    assert isinstance(statistics, LedgerStatistics)


def test_an_unknown_origin_or_an_empty_requester_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError):
        PendingWrite.model_validate({**make_intent().model_dump(), "origin": "upsert"})
    with pytest.raises(pydantic.ValidationError):  # a move names its target
        PendingWrite.model_validate({**make_intent().model_dump(), "origin": "move"})
    with pytest.raises(pydantic.ValidationError):  # a create has no basis
        PendingWrite.model_validate({**make_intent().model_dump(), "expected_version": 3})
    with pytest.raises(pydantic.ValidationError):
        PendingWrite.model_validate({**make_intent().model_dump(), "requester": ""})
