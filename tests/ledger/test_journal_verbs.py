"""Update, delete and move intents in the journal (issue 18): keyed by (path, verb) in both
formats, their basis kept over a restart, and settled one by one; a create's entry is written as
before, so older journals and older readers agree on it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from rxmesh.ledger import PendingWrite, PendingWriteLedger, PendingWriteOutcome
from rxmesh.ledger._journal import journal_file_name
from rxmesh.model import MeshNode
from rxmesh.operations import Verdict
from tests.helpers import ALICE


def intent(origin: str, request_id: str, **fields: object) -> PendingWrite:
    basis = {} if origin == "create" else {"expected_version": 3, "expected_request_id": "w-2"}
    return PendingWrite.model_validate(
        {
            "node": MeshNode(path="acme/a", node_type="Doc", content={"x": 1}),
            "requester": "alice",
            "access": ALICE,
            "request_id": request_id,
            "origin": origin,
            **basis,
            **({"target": "acme/b"} if origin == "move" else {}),
            **fields,
        }
    )


def all_verbs() -> list[PendingWrite]:
    return [intent(verb, f"r-{verb}") for verb in ("create", "update", "delete", "move")]


def test_four_verbs_of_one_path_are_four_intents_in_files_and_after_a_restart(
    journal_dir: Path,
) -> None:
    ledger, intents = PendingWriteLedger(journal_dir), all_verbs()
    for each in intents:
        assert ledger.record(each)  # format 1: one file per key
    names = sorted(p.name for p in journal_dir.iterdir())
    assert names == sorted(journal_file_name(i.key) for i in intents)
    assert journal_file_name("acme/a") in names  # the create's file: named as always
    ledger.close()

    again = PendingWriteLedger(journal_dir)
    loaded = {i.verb: i for i in again.pending()}
    assert set(loaded) == {"create", "update", "delete", "move"}
    assert loaded["update"] == intents[1]  # basis kept, field for field
    assert loaded["move"].target == "acme/b"
    again.close()


def test_the_log_keeps_them_apart_and_a_settled_one_leaves_the_others(journal_dir: Path) -> None:
    async def record() -> None:
        ledger = PendingWriteLedger(journal_dir)
        results = await ledger.record_many_durably(all_verbs())  # format 2: the log
        assert results == [True] * 4
        ledger.close()

    asyncio.run(record())
    ledger = PendingWriteLedger(journal_dir)
    assert len(ledger.pending()) == 4
    (update,) = [i for i in ledger.take_all() if i.verb == "update"]
    ledger.settle(update, PendingWriteOutcome(intent=update, verdict=Verdict.CONFLICT))
    assert ledger.statistics().conflicts == 1
    for other in ledger.in_flight():
        ledger.restore(other)
    ledger.close()

    again = PendingWriteLedger(journal_dir)
    assert sorted(i.verb for i in again.pending()) == ["create", "delete", "move"]
    again.close()


def test_a_creates_journal_file_carries_no_verb_fields(journal_dir: Path) -> None:
    ledger = PendingWriteLedger(journal_dir)
    ledger.record(intent("create", "r-create"))
    ledger.record(intent("update", "r-update"))
    ledger.close()
    create = json.loads((journal_dir / journal_file_name("acme/a")).read_text())
    update = json.loads((journal_dir / journal_file_name("acme/a update")).read_text())
    assert "expected_version" not in create["intent"] and create["intent"]["origin"] == "create"
    assert update["intent"]["expected_version"] == 3 and update["intent"]["origin"] == "update"
