"""An integer in node content has at most ``MAX_CONTENT_INT_DIGITS`` (640) decimal digits
(docs/requests.md): a longer one is refused VALIDATION_FAILED naming its place, on every verb and
entry point, before any store call; one of 640 digits is written and read back by both stores.

Issue 31, item 7: at 1d389e8 an integer of more than 4,300 digits (Python's default int-to-str
limit) made ``create_node``/``update_node`` answer UNKNOWN "Unexpected error: ValueError" and
``create_nodes`` RAISE ValueError out of the call (the bulk never answered), while the same value
sent as JSON text was refused.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from reactivex import Observable

from rxmesh import Mesh, MeshNode
from rxmesh.exceptions import NodeValidationError
from rxmesh.ledger import PendingWriteLedger
from rxmesh.model import MAX_CONTENT_INT_DIGITS, validate_content
from rxmesh.operations import (
    CreateNodeRequest,
    CreateNodesRequest,
    RejectionReason,
    UpdateNodeRequest,
)
from rxmesh.providers.memory import InMemoryStore
from rxmesh.providers.postgres import PostgresStore
from rxmesh.testing import FaultInjectingStore
from tests.helpers import ALICE, answers
from tests.mesh.conftest import FAST

HUGE = 10**5000
"""More digits than Python turns into text by default (4,300): what issue 31 sent."""
TOO_LONG = 10**MAX_CONTENT_INT_DIGITS
"""The smallest integer refused: 641 digits."""
LONGEST = 10**MAX_CONTENT_INT_DIGITS - 1
"""The largest integer accepted: 640 nines."""


async def one_answer(source: Observable[Any]) -> Any:
    got = await answers(source, timeout=5.0, settle=0.01)
    assert len(got) == 1, got
    assert not isinstance(got[0], BaseException), got[0]
    return got[0]


def _content(value: int) -> dict[str, Any]:
    return {"title": "t", "n": [1, {"big": value}]}


WHERE = "content.n[1].big"


@pytest.mark.parametrize(
    "value", [HUGE, -HUGE, TOO_LONG, -TOO_LONG], ids=["huge", "-huge", "641", "-641"]
)
def test_the_rule_refuses_an_integer_of_too_many_digits_naming_its_place(value: int) -> None:
    with pytest.raises(NodeValidationError) as raised:
        validate_content("p/a", _content(value))
    assert f"node 'p/a': {WHERE} is an integer of more than 640 digits" in str(raised.value)


@pytest.mark.parametrize("value", [LONGEST, -LONGEST, 2**64, 0, True])
def test_the_rule_accepts_an_integer_of_at_most_640_digits(value: int) -> None:
    """Negative control: 640 digits (either sign), a 65-bit integer, a bool."""
    validate_content("p/a", _content(value))


def _mesh(store: Any, **options: Any) -> Mesh:
    options.setdefault("ledger", PendingWriteLedger(journal_dir=None))
    return Mesh(store, retry_delays=FAST, **options)


async def _every_verb(mesh: Mesh, partition: str, value: int) -> dict[str, tuple[Any, str]]:
    """``(reason or None, error text)`` of each verb and entry point sending ``value``."""
    path = f"{partition}/doc"
    outcome: dict[str, tuple[Any, str]] = {}

    def of(answer: Any) -> tuple[Any, str]:
        return (None, "") if answer.success else (answer.rejection_reason, answer.error or "")

    node = MeshNode(path=path, node_type="Doc", content=_content(value))
    outcome["create_node"] = of(
        await one_answer(
            mesh.create_node(CreateNodeRequest(node=node, access=ALICE, request_id="c1"))
        )
    )
    body = {
        "node": {"path": path + "-m", "node_type": "Doc", "content": _content(value)},
        "access": {"user": "alice"},
        "request_id": "c2",
    }
    outcome["create_node(mapping)"] = of(await one_answer(mesh.create_node(body)))
    # The bulk: its answer is awaited, never raised out of the call.
    bulk = mesh.create_nodes(
        CreateNodesRequest(
            nodes=(
                MeshNode(path=f"{partition}/ok", node_type="Doc", content={}),
                MeshNode(path=f"{partition}/bulk", node_type="Doc", content=_content(value)),
            ),
            access=ALICE,
            request_id="b1",
        )
    )
    outcome["create_nodes"] = of(await one_answer(bulk))
    # The existing node to update: plain content, then the update carrying the value.
    await mesh.create(MeshNode(path=f"{partition}/upd", node_type="Doc", content={}), access=ALICE)
    updated = MeshNode(path=f"{partition}/upd", node_type="Doc", content=_content(value))
    outcome["update_node"] = of(
        await one_answer(
            mesh.update_node(UpdateNodeRequest(node=updated, access=ALICE, request_id="u1"))
        )
    )
    again = MeshNode(path=f"{partition}/doc2", node_type="Doc", content=_content(value))
    for name, call in (
        ("create", lambda: mesh.create(again, access=ALICE)),
        ("update", lambda: mesh.update(updated, access=ALICE)),
    ):
        try:
            await call()
            outcome[name] = (None, "")
        except NodeValidationError as exc:
            outcome[name] = (RejectionReason.VALIDATION_FAILED, str(exc))
    return outcome


def _assert_refused(outcome: dict[str, tuple[Any, str]]) -> None:
    for verb, (reason, text) in outcome.items():
        assert reason is RejectionReason.VALIDATION_FAILED, (verb, reason, text[:300])
        assert WHERE in text and "more than 640 digits" in text, (verb, text[:300])


async def test_every_verb_refuses_a_huge_integer_on_the_memory_store() -> None:
    """Fails at 1d389e8: create_node/update_node answered UNKNOWN "Unexpected error:
    ValueError" and create_nodes raised ValueError out of the call."""
    store = InMemoryStore()
    mesh = _mesh(store)
    try:
        outcome = await _every_verb(mesh, "ints", HUGE)
    finally:
        mesh.dispose()
    _assert_refused(outcome)
    assert [n.path for n in store.nodes("ints") if "/_" not in n.path] == ["ints", "ints/upd"]
    assert (await store.read("ints/upd")).content == {}  # type: ignore[union-attr]


async def test_an_integer_one_digit_too_long_is_refused_on_every_verb() -> None:
    """The bound itself: 641 digits (Python could print them; the rule still refuses)."""
    mesh = _mesh(InMemoryStore())
    try:
        _assert_refused(await _every_verb(mesh, "ints", -TOO_LONG))
    finally:
        mesh.dispose()


async def test_640_digits_are_written_and_read_back_on_the_memory_store() -> None:
    """Negative control: the longest integer accepted lands on every verb."""
    store = InMemoryStore()
    mesh = _mesh(store)
    try:
        outcome = await _every_verb(mesh, "ints", LONGEST)
    finally:
        mesh.dispose()
    assert all(reason is None for reason, _ in outcome.values()), outcome
    assert (await store.read("ints/bulk")).content == _content(LONGEST)  # type: ignore[union-attr]


@pytest.mark.parametrize("value", [HUGE, TOO_LONG], ids=["huge", "641"])
async def test_a_huge_integer_is_refused_before_the_journal_store_away(
    tmp_path: Path, value: int
) -> None:
    """Fails at 1d389e8 (huge): the create answered UNKNOWN ValueError and the bulk raised. With
    the store away, nothing is sent to it or recorded in the journal: the refusal comes first."""
    store = FaultInjectingStore(InMemoryStore())
    store.refuse_reads_as_unreachable()
    store.refuse_writes_as_unreachable()
    journal = tmp_path / "journal"
    mesh = _mesh(store, ledger=PendingWriteLedger(journal))
    node = MeshNode(path="ints/doc", node_type="Doc", content=_content(value))
    try:
        create = await one_answer(mesh.create_node(CreateNodeRequest(node=node, access=ALICE)))
        bulk = await one_answer(mesh.create_nodes(CreateNodesRequest(nodes=(node,), access=ALICE)))
        update = await one_answer(mesh.update_node(UpdateNodeRequest(node=node, access=ALICE)))
    finally:
        mesh.dispose()
    for answer in (create, bulk, update):
        assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED, answer.error[:300]
        assert WHERE in answer.error
    assert store.statistics().operations == 0
    assert not mesh.ledger.pending()
    assert not [p for p in journal.glob("*") if p.is_file()]


async def test_a_plain_create_with_the_store_away_is_still_recorded(tmp_path: Path) -> None:
    """Negative control of the test above: 640 digits reach the store and are recorded."""
    store = FaultInjectingStore(InMemoryStore())
    store.refuse_reads_as_unreachable()
    store.refuse_writes_as_unreachable()
    mesh = _mesh(store, ledger=PendingWriteLedger(tmp_path / "journal"))
    node = MeshNode(path="ints/doc", node_type="Doc", content=_content(LONGEST))
    try:
        answer = await one_answer(mesh.create_node(CreateNodeRequest(node=node, access=ALICE)))
        assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer.error
        assert [w.node.content for w in mesh.ledger.pending()] == [_content(LONGEST)]
    finally:
        mesh.dispose()


async def test_json_text_gets_the_same_refusal() -> None:
    """The JSON text form of a 641-digit integer: refused naming the same place."""
    text = json.dumps(
        {
            "node": {"path": "ints/doc", "node_type": "Doc", "content": _content(TOO_LONG)},
            "access": {"user": "alice"},
        }
    )
    mesh = _mesh(InMemoryStore())
    try:
        answer = await one_answer(mesh.create_node(text))
    finally:
        mesh.dispose()
    assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED
    assert WHERE in answer.error


@pytest.mark.postgres
async def test_postgres_refuses_a_huge_integer_and_keeps_640_digits(
    pg_store: PostgresStore,
) -> None:
    """Fails at 1d389e8 as on memory. Negative control in the same store: 640 digits are
    written as jsonb and read back equal (PostgreSQL holds 131,072 digits; the rule is what
    every Python reader can decode)."""
    mesh = _mesh(pg_store)
    partition = f"i{uuid.uuid4().hex[:8]}"
    try:
        _assert_refused(await _every_verb(mesh, partition, HUGE))
        outcome = await _every_verb(mesh, partition + "k", LONGEST)
    finally:
        mesh.dispose()
    assert all(reason is None for reason, _ in outcome.values()), outcome
    stored = await pg_store.read(f"{partition}k/bulk")
    assert stored is not None and stored.content == _content(LONGEST)
    assert await pg_store.read(f"{partition}/doc") is None


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
async def test_a_number_json_cannot_hold_is_refused_on_every_verb(value: float) -> None:
    """NaN and the infinities (already refused at 1d389e8: the check that they still are, on
    every verb, alongside the integers)."""
    mesh = _mesh(InMemoryStore())
    try:
        outcome = await _every_verb(mesh, "floats", value)  # type: ignore[arg-type]
    finally:
        mesh.dispose()
    for verb, (reason, text) in outcome.items():
        assert reason is RejectionReason.VALIDATION_FAILED, (verb, reason, text)
        assert f"{WHERE} is {value!r}, which JSON cannot hold" in text, (verb, text)
