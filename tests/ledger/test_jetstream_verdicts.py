"""Who publishes a verdict the JetStream journal owes, whoever owns the intent.

1. An intent the same requester replaces gets exactly one verdict even when its owner is dead
   (its lease lapsed, and nobody took it over, or not yet): the replacing entry carries the
   replaced intent as a debt of its owner, and the debt is paid, verdict published, only by the
   compare-and-set that removes it from the entry — by the owner, or by any replica once the
   owner's lease lapsed.
2. A caller's own re-issue answered on another replica than the owner settles the intent
   there, by compare-and-set on the entry; the owner does not re-issue it afterwards.

Negative controls: another requester is refused (nothing replaced, nothing settled); a live
owner still publishes its own verdicts (superseded, or its re-issue's).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from rxmesh import Mesh, MeshNode, RejectionReason
from rxmesh.aio import first_value
from rxmesh.ledger import JetStreamLedger, PendingWriteHeldError, PendingWriteOutcome
from rxmesh.operations import CreateNodeRequest, CreateNodesRequest, Verdict
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore
from tests.helpers import ALICE, MALLORY
from tests.ledger import test_jetstream
from tests.ledger.test_jetstream import Clock, intent, until

pytest.importorskip("nats")

bucket = test_jetstream.bucket  # the same fixtures: a fresh bucket, ledgers closed after
open_ledger = test_jetstream.open_ledger


class Verdicts:
    """Every outcome the given ledgers publish, in arrival order, with who published it."""

    def __init__(self, *ledgers: JetStreamLedger) -> None:
        self.got: list[tuple[str, PendingWriteOutcome]] = []
        for ledger in ledgers:
            ledger.outcomes.subscribe(
                lambda outcome, name=ledger.owner: self.got.append((name, outcome))
            )

    def of(self, request_id: str) -> list[tuple[str, Verdict, str | None]]:
        return [
            (name, o.verdict, o.superseded_by)
            for name, o in self.got
            if o.intent.request_id == request_id
        ]


async def quiet(*ledgers: JetStreamLedger) -> None:
    """Wait (bounded) until every write the ledgers spawned (settles, payments) is answered."""
    async with asyncio.timeout(10):
        while any(ledger._tasks for ledger in ledgers):  # noqa: ASYNC110 - their own tasks, bounded above
            await asyncio.sleep(0.01)


# ------------------------------------------------------------------- 1. a dead owner's debts


async def test_replacing_a_dead_owners_intent_gives_it_exactly_one_verdict(
    open_ledger: Callable[..., Any],
) -> None:
    """Fails at 41e90aa: the replaced intent of a dead owner got no verdict at all (the
    replacing replica published only for its own intents, and the owner was gone)."""
    a: JetStreamLedger = await open_ledger("a")
    first = intent("t/d", "r1")
    await a.record_durably(first)
    clock_b, clock_c = Clock(), Clock()
    b: JetStreamLedger = await open_ledger("b", clock_b)
    c: JetStreamLedger = await open_ledger("c", clock_c)
    heard = Verdicts(a, b, c)
    await a.aclose(release=False)  # a dies holding r1
    clock_b.now += 6
    clock_c.now += 6  # its lease lapsed as far as b and c can tell; nobody claimed r1 yet
    await b.renew_lease()  # b and c are alive
    await c.renew_lease()

    newer = intent("t/d", "r2")
    assert await b.record_durably(newer) is True  # the same requester replaces it
    await until(lambda: c.shared().get("t/d", (None,))[0] == newer)
    await asyncio.gather(b.claim_lapsed(), c.claim_lapsed())  # both try to pay a's debt
    await until(lambda: heard.of("r1") != [])
    await quiet(b, c)
    assert [(v, by) for _, v, by in heard.of("r1")] == [(Verdict.DROPPED, "r2")]
    assert heard.of("r2") == []
    assert b.pending() == (newer,) and c.pending() == ()
    assert await b.claim_lapsed() == 0 and await c.claim_lapsed() == 0  # nothing owed any more
    await quiet(b, c)
    assert len(heard.of("r1")) == 1


async def test_a_debt_of_an_owner_not_yet_lapsed_is_paid_once_it_lapses(
    open_ledger: Callable[..., Any],
) -> None:
    """The owner died but its lease has not lapsed yet: the replacing replica cannot tell it
    from a live owner, so it publishes nothing then; once the lease lapses, the replicas that
    claim pay the debt, exactly one of them. Fails at 41e90aa: no verdict ever."""
    a: JetStreamLedger = await open_ledger("a")
    await a.record_durably(intent("t/e", "r1"))
    clock_b, clock_c = Clock(), Clock()
    b: JetStreamLedger = await open_ledger("b", clock_b)
    c: JetStreamLedger = await open_ledger("c", clock_c)
    heard = Verdicts(a, b, c)
    await a.aclose(release=False)
    assert await b.record_durably(intent("t/e", "r2")) is True
    await quiet(b, c)
    assert heard.of("r1") == []  # a might be alive: its debt is its own to pay
    clock_b.now += 6
    clock_c.now += 6
    await b.renew_lease()
    await c.renew_lease()
    await asyncio.gather(b.claim_lapsed(), c.claim_lapsed())
    await until(lambda: heard.of("r1") != [])
    await quiet(b, c)
    assert [(v, by) for _, v, by in heard.of("r1")] == [(Verdict.DROPPED, "r2")]


async def test_a_debt_survives_the_settling_of_the_intent_that_replaced_it(
    open_ledger: Callable[..., Any],
) -> None:
    """The replacing intent is re-issued and settled before the dead owner's debt is paid:
    the entry keeps the debt (no intent left in it), and the debt is still paid exactly once.
    Fails at 41e90aa: the settling delete took the entry, and the replaced intent never got a
    verdict."""
    a: JetStreamLedger = await open_ledger("a")
    await a.record_durably(intent("t/f", "r1"))
    clock = Clock()
    b: JetStreamLedger = await open_ledger("b", clock)
    heard = Verdicts(a, b)
    await a.aclose(release=False)
    await b.record_durably(intent("t/f", "r2"))
    (taken,) = b.take_all()
    b.settle(taken, PendingWriteOutcome(intent=taken, verdict=Verdict.LANDED))
    await quiet(b)
    assert [v for _, v, _ in heard.of("r2")] == [Verdict.LANDED]
    assert "t/f" not in b.shared() and b.pending() == ()
    clock.now += 6
    await b.claim_lapsed()
    await until(lambda: heard.of("r1") != [])
    await quiet(b)
    assert [(v, by) for _, v, by in heard.of("r1")] == [(Verdict.DROPPED, "r2")]
    stored = await b._kv.keys()  # the entry went once nothing was owed in it
    assert [k for k in stored if k.startswith("i.")] == []


async def test_a_zombie_owners_late_reissue_publishes_nothing_once_its_debt_was_paid(
    open_ledger: Callable[..., Any],
) -> None:
    """The owner took its intent for re-issue, stopped renewing, and its intent was replaced
    and its debt paid by a survivor: when its re-issue comes back, it publishes nothing (one
    verdict per intent, decided by which compare-and-set won). Fails at 41e90aa: no survivor
    published anything for it; only the zombie's late re-issue did."""
    a: JetStreamLedger = await open_ledger("a")
    await a.record_durably(intent("t/z", "r1"))
    (taken,) = a.take_all()
    clock = Clock()
    b: JetStreamLedger = await open_ledger("b", clock)
    heard = Verdicts(a, b)
    await b.record_durably(intent("t/z", "r2"))
    clock.now += 6  # a renews no more (renew=False)
    await b.claim_lapsed()
    await until(lambda: heard.of("r1") != [])
    await until(lambda: a.shared()["t/z"][0].request_id == "r2")
    await quiet(b)
    a.settle_if_outstanding(taken, PendingWriteOutcome(intent=taken, verdict=Verdict.LANDED))
    await quiet(a, b)
    assert [(name, v) for name, v, _ in heard.of("r1")] == [("b", Verdict.DROPPED)]


async def test_control_a_live_owner_publishes_its_own_verdicts(
    open_ledger: Callable[..., Any],
) -> None:
    """Negative control: a live owner pays the debt another replica's replacement left it —
    superseded when it had not taken the intent, its re-issue's verdict when it had — and no
    other replica publishes anything for it."""
    a: JetStreamLedger = await open_ledger("a")
    b: JetStreamLedger = await open_ledger("b")
    heard = Verdicts(a, b)
    await a.record_durably(intent("t/l", "r1"))
    await a.record_durably(intent("t/m", "m1"))
    taken = next(i for i in a.take_all() if i.request_id == "m1")
    a.restore(next(i for i in a.in_flight() if i.request_id == "r1"))
    await until(lambda: {"t/l", "t/m"} <= set(b.shared()))
    await b.record_durably(intent("t/l", "r2"))
    await b.record_durably(intent("t/m", "m2"))
    await until(lambda: heard.of("r1") != [])
    a.settle_if_outstanding(taken, PendingWriteOutcome(intent=taken, verdict=Verdict.LANDED))
    await until(lambda: heard.of("m1") != [])
    await quiet(a, b)
    assert heard.of("r1") == [("a", Verdict.DROPPED, "r2")]
    assert heard.of("m1") == [("a", Verdict.LANDED, None)]
    assert [i.request_id for i in b.pending()] == ["r2", "m2"]


async def test_control_another_requester_replaces_nothing_and_owes_nothing(
    open_ledger: Callable[..., Any],
) -> None:
    """Negative control: another requester's intent for a dead owner's path is refused; the
    dead owner's intent stands, is claimed, and gets no superseded verdict."""
    a: JetStreamLedger = await open_ledger("a")
    await a.record_durably(intent("t/h", "r1"))
    clock = Clock()
    b: JetStreamLedger = await open_ledger("b", clock)
    heard = Verdicts(a, b)
    await a.aclose(release=False)
    clock.now += 6
    with pytest.raises(PendingWriteHeldError):
        await b.record_durably(intent("t/h", "x1", requester="mallory"))
    assert await b.claim_lapsed() == 1
    await quiet(b)
    assert heard.got == []
    await b.renew_lease()
    assert [i.request_id for i in b.take_all()] == ["r1"]


# ------------------------------------------------- 2. the caller's own re-issue, anywhere


async def test_an_answer_on_another_replica_settles_the_intent_once(
    open_ledger: Callable[..., Any],
) -> None:
    """Fails at 41e90aa: only the owner saw the intent as outstanding, so an answer to the
    caller's own re-issue on another replica settled nothing and the owner re-issued it later."""
    a: JetStreamLedger = await open_ledger("a")
    b: JetStreamLedger = await open_ledger("b")
    heard = Verdicts(a, b)
    one = intent("t/s", "r1")
    await a.record_durably(one)
    await until(lambda: "t/s" in b.shared())
    assert b.outstanding("t/s", "r1") == one
    assert b.outstanding("t/s", "other") is None
    outcome = PendingWriteOutcome(intent=one, verdict=Verdict.LANDED)
    assert b.settle_if_outstanding(one, outcome) is True
    await quiet(b)
    await until(lambda: "t/s" not in a.shared())
    assert a.take_all() == [] and a.pending() == ()  # never re-issued by its owner
    assert heard.of("r1") == [("b", Verdict.LANDED, None)]
    assert b.settle_if_outstanding(one, outcome) is False


async def test_an_answer_racing_the_owners_reissue_gives_one_verdict(
    open_ledger: Callable[..., Any],
) -> None:
    """The owner is re-issuing the intent while the caller's own re-issue is answered on
    another replica: both settle; the delete that wins decides the one verdict. (A guard: it
    holds at 41e90aa too, where only the owner could settle.)"""
    a: JetStreamLedger = await open_ledger("a")
    b: JetStreamLedger = await open_ledger("b")
    heard = Verdicts(a, b)
    for n in range(20):
        await a.record_durably(intent(f"t/r{n}", f"r{n}"))
    await until(lambda: len(b.shared()) == 20)
    taken = a.take_all()
    for n, one in enumerate(taken):
        landed = PendingWriteOutcome(intent=one, verdict=Verdict.LANDED)
        first, second = (a, b) if n % 2 else (b, a)
        first.settle_if_outstanding(one, landed)
        second.settle_if_outstanding(one, landed)
    await until(lambda: len(heard.got) >= 20)
    await quiet(a, b)
    assert Counter(o.intent.request_id for _, o in heard.got) == {f"r{n}": 1 for n in range(20)}
    assert a.pending() == () and a.in_flight() == ()


async def test_the_owner_calls_off_a_reissue_settled_elsewhere(
    open_ledger: Callable[..., Any],
) -> None:
    """The owner took the intent for re-issue (queued, not sent) when the caller's own
    re-issue was answered on another replica: once the owner sees the entry gone, the intent
    is no longer outstanding there (its queued re-issue is skipped) nor in flight, and its
    late settle publishes nothing. Fails at 41e90aa: nothing settled it on the other replica."""
    a: JetStreamLedger = await open_ledger("a")
    b: JetStreamLedger = await open_ledger("b")
    heard = Verdicts(a, b)
    one = intent("t/q", "r1")
    await a.record_durably(one)
    (taken,) = a.take_all()
    await until(lambda: "t/q" in b.shared())
    assert b.settle_if_outstanding(one, PendingWriteOutcome(intent=one, verdict=Verdict.LANDED))
    await until(lambda: a.in_flight() == ())
    assert a.outstanding("t/q", "r1") is None
    late = PendingWriteOutcome(intent=taken, verdict=Verdict.LANDED)
    assert a.settle_if_outstanding(taken, late) is False
    await quiet(a, b)
    assert heard.of("r1") == [("b", Verdict.LANDED, None)]


async def test_a_settling_delete_jetstream_did_not_take_is_tried_again_on_the_lease_timer(
    open_ledger: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delete that settles a re-issued intent is refused for another reason than a lost
    race (here: a timeout, as while a stream leader is elected after a NATS server died). The
    answer is known: the intent is not re-issued again, and the next lease tick deletes it and
    publishes its one verdict. Fails at 41e90aa: the intent waited, pending again, for the next
    evidence (none came), and no tick published anything. Negative control: a delete that
    succeeds publishes at once."""
    from nats.errors import TimeoutError as NatsTimeout

    a: JetStreamLedger = await open_ledger("a")
    heard = Verdicts(a)
    await a.record_durably(intent("t/ok", "r0"))
    await a.record_durably(intent("t/t", "r1"))
    control, one = sorted(a.take_all(), key=lambda i: i.request_id)
    a.settle(control, PendingWriteOutcome(intent=control, verdict=Verdict.LANDED))
    await until(lambda: heard.of("r0") != [])

    delete = a._kv.delete
    refused: list[str] = []

    async def refuse_once(key: str, **kwargs: Any) -> Any:
        if not refused:
            refused.append(key)
            raise NatsTimeout
        return await delete(key, **kwargs)

    monkeypatch.setattr(a._kv, "delete", refuse_once)
    a.settle(one, PendingWriteOutcome(intent=one, verdict=Verdict.LANDED))
    await quiet(a)
    assert refused and heard.of("r1") == []
    assert a.pending() == () and a.take_all() == []  # answered: not re-issued again
    await a.renew_lease()
    await a.claim_lapsed()  # the lease timer's tick
    await quiet(a)
    assert heard.of("r1") == [("a", Verdict.LANDED, None)]
    await until(lambda: "t/t" not in a.shared())


async def test_the_callers_own_reissue_on_another_replica_settles_it(
    open_ledger: Callable[..., Any],
) -> None:
    """Two meshes over one store, each with its replica's ledger. alice's create is recorded
    on a during an outage; mallory's create carrying alice's request id, answered on b, settles
    nothing (negative control); alice's own re-send, routed to b, lands and settles her intent
    on b; a, given evidence, re-issues nothing. Fails at 41e90aa: b did not see a's intent as
    outstanding, and a re-issued it on its evidence."""
    a: JetStreamLedger = await open_ledger("a")
    b: JetStreamLedger = await open_ledger("b")
    heard = Verdicts(a, b)
    store = FaultInjectingStore(InMemoryStore())
    mesh_a = Mesh(store, ledger=a, retry_delays=(0.001,))
    mesh_b = Mesh(store, ledger=b, retry_delays=(0.001,))
    try:
        await mesh_a.create(MeshNode(path="p/seed", content={}), access=ALICE)
        store.refuse_writes_as_unreachable()
        create = CreateNodeRequest(node=MeshNode(path="p/doc", content={"x": 1}), access=ALICE)
        answer = await first_value(mesh_a.create_node(create), timeout=10)
        assert answer.rejection_reason is RejectionReason.UNAVAILABLE
        assert answer.recorded_for_reissue
        store.restore()
        await until(lambda: "p/doc" in b.shared())

        stranger = CreateNodeRequest(
            node=MeshNode(path="p/doc", content={"evil": 1}),
            access=MALLORY,
            request_id=create.request_id,
        )
        refused = await first_value(mesh_b.create_node(stranger), timeout=10)
        assert not refused.success
        await quiet(a, b)
        assert heard.got == [] and "p/doc" in b.shared()

        store.drop_change_feed()  # the re-send's commit is no evidence for a: a waits
        again = await first_value(mesh_b.create_node(create), timeout=10)
        assert again.success, again
        await until(lambda: heard.of(create.request_id) != [])
        await until(lambda: "p/doc" not in a.shared())
        assert a.take_all() == []  # a's next evidence finds nothing to re-issue
        await quiet(a, b)
        assert heard.of(create.request_id) == [("b", Verdict.LANDED, None)]
    finally:
        mesh_a.dispose()
        mesh_b.dispose()


async def test_a_bulk_resent_on_a_replica_with_no_intents_of_its_own_settles_them(
    open_ledger: Callable[..., Any],
) -> None:
    """alice's bulk is recorded on a during an outage; her re-send of the same bulk, answered
    on b (which has no intent of its own, pending or in flight), lands and settles each node's
    intent there, once. Fails at 41e90aa and at 41dd880: the bulk's settle returned early on b
    because b's own statistics showed nothing outstanding, so a later re-issued them. Negative
    control: mallory's bulk carrying alice's bulk id, answered on b, settles nothing."""
    a: JetStreamLedger = await open_ledger("a")
    b: JetStreamLedger = await open_ledger("b")
    heard = Verdicts(a, b)
    store = FaultInjectingStore(InMemoryStore())
    mesh_a = Mesh(store, ledger=a, retry_delays=(0.001,))
    mesh_b = Mesh(store, ledger=b, retry_delays=(0.001,))
    paths = [f"q/doc-{n}" for n in range(3)]
    try:
        await mesh_a.create(MeshNode(path="q/seed", content={}), access=ALICE)
        store.refuse_writes_as_unreachable()
        bulk = CreateNodesRequest(
            nodes=[MeshNode(path=path, content={"x": 1}) for path in paths], access=ALICE
        )
        answer = await first_value(mesh_a.create_nodes(bulk), timeout=10)
        assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer
        store.restore()
        await until(lambda: all(path in b.shared() for path in paths))
        assert b.pending() == () and b.in_flight() == ()  # b owns nothing

        stranger = CreateNodesRequest(
            nodes=[MeshNode(path=path, content={"evil": 1}) for path in paths],
            access=MALLORY,
            request_id=bulk.request_id,
        )
        await first_value(mesh_b.create_nodes(stranger), timeout=10)
        await quiet(a, b)
        assert heard.got == [] and all(path in b.shared() for path in paths)

        store.drop_change_feed()  # the re-send's commits are no evidence for a: a waits
        again = await first_value(mesh_b.create_nodes(bulk), timeout=10)
        assert again.success, again
        await until(lambda: len(heard.of(bulk.request_id)) == len(paths))
        await until(lambda: not any(path in a.shared() for path in paths))
        assert a.take_all() == []
        await quiet(a, b)
        assert sorted(heard.of(bulk.request_id)) == [("b", Verdict.LANDED, None)] * len(paths)
    finally:
        mesh_a.dispose()
        mesh_b.dispose()
