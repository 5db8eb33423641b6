"""The JetStream journal's rules, on the shared NATS server (one fresh bucket per test).

Recording (create, replace, refuse), taking over a lapsed owner by compare-and-set (two claimers
race, exactly one wins each entry), settling once, hostile entries quarantined. What happens when
NATS cannot be reached is in test_jetstream_unreachable.py (its own throwaway server).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from rxmesh.ledger import (
    JetStreamLedger,
    PendingWrite,
    PendingWriteHeldError,
    PendingWriteOutcome,
)
from rxmesh.ledger._jetstream_entries import key_token as _token
from rxmesh.model import MeshNode
from rxmesh.operations import Verdict
from tests.helpers import until

pytest.importorskip("nats")


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def intent(path: str, request_id: str, requester: str = "alice") -> PendingWrite:
    return PendingWrite(
        node=MeshNode(path=path, created_by=requester), requester=requester, request_id=request_id
    )


@pytest.fixture
async def bucket(nats_url: str) -> AsyncIterator[str]:
    import nats

    name = f"rxmesh_test_{uuid.uuid4().hex[:12]}"
    yield name
    client = await nats.connect(nats_url)
    try:
        await client.jetstream().delete_key_value(name)
    except Exception:
        pass
    await client.close()


@pytest.fixture
async def open_ledger(nats_url: str, bucket: str) -> AsyncIterator[Callable[..., Any]]:
    opened: list[JetStreamLedger] = []

    async def make(owner: str, clock: Callable[[], float] | None = None) -> JetStreamLedger:
        ledger = await JetStreamLedger.connect(
            nats_url,
            bucket=bucket,
            replicas=1,
            owner=owner,
            lease_ttl=5.0,
            clock=clock or Clock(),
            renew=False,
        )
        opened.append(ledger)
        return ledger

    yield make
    for ledger in opened:
        await ledger.aclose(release=False)


async def test_record_replace_refuse(open_ledger: Callable[..., Any]) -> None:
    a: JetStreamLedger = await open_ledger("a")
    b: JetStreamLedger = await open_ledger("b")
    outcomes: list[PendingWriteOutcome] = []
    a.outcomes.subscribe(outcomes.append)

    first = intent("t/x", "r1")
    assert await a.record_durably(first) is True
    assert await a.record_durably(first) is False  # pending unchanged: nothing written
    await until(lambda: "t/x" in b.shared())
    assert b.shared()["t/x"] == (first, "a")

    second = intent("t/x", "r2")
    assert await a.record_durably(second) is True  # same requester: replaces
    assert [(o.intent, o.verdict, o.superseded_by) for o in outcomes] == [
        (first, Verdict.DROPPED, "r2")
    ]
    with pytest.raises(PendingWriteHeldError):
        await a.record_durably(intent("t/x", "r3", requester="mallory"))
    await until(lambda: b.shared().get("t/x", (None,))[0] == second)
    with pytest.raises(PendingWriteHeldError):  # refused on every replica
        await b.record_durably(intent("t/x", "r4", requester="mallory"))
    assert a.pending() == (second,)
    assert b.pending() == ()  # not b's to re-issue


async def test_two_claimers_race_exactly_one_wins_each(open_ledger: Callable[..., Any]) -> None:
    a: JetStreamLedger = await open_ledger("a")
    intents = [intent(f"t/n{i}", f"r{i}") for i in range(60)]
    assert all(r is True for r in await a.record_many_durably(intents))
    clock_b, clock_c = Clock(), Clock()
    b: JetStreamLedger = await open_ledger("b", clock_b)
    c: JetStreamLedger = await open_ledger("c", clock_c)

    # Negative control: a's lease is fresh, nothing is claimed.
    assert await b.claim_lapsed() == 0
    assert await c.claim_lapsed() == 0

    await a.aclose(release=False)  # a "dies": no more renewals, its lease entry stays
    clock_b.now += 6.0
    clock_c.now += 6.0
    won_b, won_c = await asyncio.gather(b.claim_lapsed(), c.claim_lapsed())
    assert won_b + won_c == 60
    await until(lambda: all(o in {"b", "c"} for _, o in b.shared().values()))
    await until(lambda: all(o in {"b", "c"} for _, o in c.shared().values()))
    await b.renew_lease()
    await c.renew_lease()
    taken_b, taken_c = b.take_all(), c.take_all()
    assert len(taken_b) == won_b and len(taken_c) == won_c
    assert {i.request_id for i in taken_b}.isdisjoint({i.request_id for i in taken_c})
    assert sorted(i.request_id for i in taken_b + taken_c) == sorted(i.request_id for i in intents)


async def test_settled_once_and_removed_for_every_replica(
    open_ledger: Callable[..., Any],
) -> None:
    a: JetStreamLedger = await open_ledger("a")
    b: JetStreamLedger = await open_ledger("b")
    one = intent("t/s", "r1")
    await a.record_durably(one)
    await until(lambda: "t/s" in b.shared())
    (taken,) = a.take_all()
    outcome = PendingWriteOutcome(intent=taken, verdict=Verdict.LANDED)
    assert a.settle_if_outstanding(taken, outcome) is True
    assert a.settle_if_outstanding(taken, outcome) is False
    with pytest.raises(ValueError, match="not outstanding"):
        a.settle(taken, outcome)
    await until(lambda: "t/s" not in b.shared())
    assert b.settle_if_outstanding(taken, outcome) is False  # gone for every replica
    assert a.statistics().landed == 1 and b.statistics().landed == 0
    # The path is free again: a new record creates it afresh.
    assert await b.record_durably(intent("t/s", "r9", requester="bob")) is True


async def test_settle_of_a_replaced_intent_keeps_the_newer(
    open_ledger: Callable[..., Any],
) -> None:
    """A re-issue settling its intent after the same requester replaced it deletes nothing:
    the delete is a compare-and-set on the revision the re-issued intent was written at."""
    a: JetStreamLedger = await open_ledger("a")
    b: JetStreamLedger = await open_ledger("b")
    await a.record_durably(intent("t/p", "r1"))
    (taken,) = a.take_all()
    await until(lambda: "t/p" in b.shared())
    newer = intent("t/p", "r2")
    assert await b.record_durably(newer) is True  # b now owns the newer intent
    await until(lambda: a.shared()["t/p"][0] == newer)
    assert a.settle_if_outstanding(taken, PendingWriteOutcome(intent=taken, verdict=Verdict.LANDED))
    async with asyncio.timeout(10):
        while a._tasks:  # noqa: ASYNC110 - a delete, were one sent: its own task, bounded above
            await asyncio.sleep(0.01)
    stored = await b._kv.get(f"i.{_token('t/p')}")  # the bucket itself, not a watch's view
    assert stored.value is not None and b"r2" in stored.value
    assert b.shared()["t/p"] == (newer, "b")
    assert b.pending() == (newer,)


async def test_hostile_entries_quarantined_never_taken(
    open_ledger: Callable[..., Any], nats_url: str, bucket: str
) -> None:
    import nats

    a: JetStreamLedger = await open_ledger("a")
    await a.record_durably(intent("t/good", "r1"))
    await a.aclose(release=False)  # nobody watches while the entries are planted
    client = await nats.connect(nats_url)
    kv = await client.jetstream().key_value(bucket)
    await kv.put(f"i.{_token('t/garbage')}", b"\x00not json")
    # A well-formed intent filed under another key: never trusted for either path.
    forged = intent("t/elsewhere", "r2").model_dump_json().encode()
    await kv.put(f"i.{_token('t/victim')}", b'{"v":1,"owner":"a","intent":' + forged + b"}")
    await kv.put("i.___", b"{}")  # not an intent key at all
    await kv.put(f"i.{_token('t/noowner')}", b'{"v":1,"owner":"no good","intent":{}}')

    b: JetStreamLedger = await open_ledger("a")  # a restarted under its name
    assert set(b.shared()) == {"t/good"}
    assert b.statistics().quarantined == 4
    assert [i.request_id for i in b.take_all()] == ["r1"]
    async with asyncio.timeout(10):  # moved aside: copied under q., removed from i.
        while True:
            keys = await kv.keys()
            if [k for k in keys if k.startswith("i.")] == [f"i.{_token('t/good')}"]:
                break
            await asyncio.sleep(0.05)
    assert len([k for k in keys if k.startswith("q.")]) == 4
    await client.close()


async def test_recording_keeps_no_lock_per_key_once_recorded(
    open_ledger: Callable[..., Any],
) -> None:
    """A key's recording lock lives while the key is being recorded: a lock kept for every key
    ever recorded grows without bound (fails at 108954c: one lock per key recorded stays)."""
    a: JetStreamLedger = await open_ledger("a")
    same = [intent("t/same", f"r{n}") for n in range(3)]
    results = await asyncio.gather(
        *(a.record_durably(i) for i in [*same, *(intent(f"t/k{n}", "r") for n in range(20))])
    )
    assert results == [True] * 23
    assert a.shared()["t/same"][0] in same
    assert a._recording == {}


async def test_entries_in_any_json_form_are_read(
    open_ledger: Callable[..., Any], nats_url: str, bucket: str
) -> None:
    """Entries are read from their bytes when they are in the form the ledger writes; any other
    JSON form of a valid entry (spaces, another order, a field after the intent) is read too,
    and the form the ledger writes round-trips to the same intent and owner."""
    import json

    import nats

    a: JetStreamLedger = await open_ledger("a")
    written = intent("t/written", "r0")
    await a.record_durably(written)
    await a.aclose(release=False)
    client = await nats.connect(nats_url)
    kv = await client.jetstream().key_value(bucket)
    spaced = intent("t/spaced", "r1")
    document = {"v": 1, "owner": "a", "intent": spaced.model_dump(mode="json")}
    await kv.put(f"i.{_token('t/spaced')}", json.dumps(document).encode())
    reordered = intent("t/reordered", "r2")
    head = b'{"v":1,"owner":"a","intent":' + reordered.model_dump_json().encode()
    await kv.put(f"i.{_token('t/reordered')}", head + b',"note":"x"}')
    await client.close()

    b: JetStreamLedger = await open_ledger("b")
    assert b.shared() == {
        "t/written": (written, "a"),
        "t/spaced": (spaced, "a"),
        "t/reordered": (reordered, "a"),
    }
    assert b.statistics().quarantined == 0


async def test_adopted_announced_only_when_the_store_answers(
    open_ledger: Callable[..., Any],
) -> None:
    """Taken over while this replica's store answers (it took its own intents on evidence and
    recorded nothing since): announced for an immediate re-issue. Negative control: taken over
    right after an UNAVAILABLE record: not announced, re-issued on the next evidence."""
    a: JetStreamLedger = await open_ledger("a")
    await a.record_durably(intent("t/1", "r1"))
    clock = Clock()
    b: JetStreamLedger = await open_ledger("b", clock)
    announced: list[int] = []
    b.adopted.subscribe(announced.append)
    await b.record_durably(intent("t/own", "ro", requester="bob"))  # b's store is away
    await a.aclose(release=False)
    clock.now += 6
    assert await b.claim_lapsed() == 1
    assert announced == []
    await b.renew_lease()
    assert {i.request_id for i in b.take_all()} == {"ro", "r1"}  # on b's next evidence

    c: JetStreamLedger = await open_ledger("c", clock)
    await c.record_durably(intent("t/2", "r2", requester="carol"))
    d: JetStreamLedger = await open_ledger("d", clock)
    announced_d: list[int] = []
    d.adopted.subscribe(announced_d.append)
    assert d.take_all() == []  # d's store answered (evidence)
    await c.aclose(release=True)  # released: lapsed at once, whatever the clock says
    await until(lambda: "c" in d.lapsed())
    assert await d.claim_lapsed() == 1
    assert announced_d == [1]
    assert d.pending()[0].request_id == "r2"


async def test_a_stale_watch_never_makes_a_live_owner_lapse(
    open_ledger: Callable[..., Any],
) -> None:
    """The lease is read before anything is taken over: a watcher that fell behind (here:
    stopped) sees no renewal, but the lease's revision moved, so nothing is claimed. Negative
    control: without that renewal, the same claim takes the intent over."""
    a: JetStreamLedger = await open_ledger("a")
    await a.record_durably(intent("t/live", "r1"))
    clock = Clock()
    b: JetStreamLedger = await open_ledger("b", clock)
    await b._watcher.stop()  # b's watch falls behind
    await a.renew_lease()
    clock.now += 6
    assert b.lapsed() == {"a"}  # as far as b's watch knows
    assert await b.claim_lapsed() == 0
    clock.now += 6  # no renewal since the one b read
    assert await b.claim_lapsed() == 1


async def test_no_take_while_the_own_lease_is_stale(open_ledger: Callable[..., Any]) -> None:
    """A replica that has not renewed its lease lately takes nothing for re-issue (another may
    be taking its intents over); the first renewal announces the deferred take. Negative
    control: with a fresh lease the same take hands the intent out at once."""
    clock = Clock()
    a: JetStreamLedger = await open_ledger("a", clock)
    announced: list[int] = []
    a.adopted.subscribe(announced.append)
    await a.record_durably(intent("t/mine", "r1"))
    clock.now += 3  # more than half the 5 s lease since the last renewal
    assert a.take_all() == []
    assert announced == []
    await a.renew_lease()
    assert announced == [0]
    assert [i.request_id for i in a.take_all()] == ["r1"]  # fresh: taken at once


async def test_a_verdict_only_where_the_settling_delete_won(
    open_ledger: Callable[..., Any],
) -> None:
    """An owner whose lease lapsed while it re-issued an intent, and the replica that took the
    intent over, both settle it: only the delete at the current revision succeeds, and only
    that replica publishes a verdict. Negative control: nobody took it over, the owner's own
    settle publishes."""
    a: JetStreamLedger = await open_ledger("a")
    on_a: list[PendingWriteOutcome] = []
    a.outcomes.subscribe(on_a.append)
    await a.record_durably(intent("t/one", "r1"))
    await a.record_durably(intent("t/two", "r2"))
    first, second = a.take_all()
    clock = Clock()
    b: JetStreamLedger = await open_ledger("b", clock)
    on_b: list[PendingWriteOutcome] = []
    b.outcomes.subscribe(on_b.append)

    a.settle(second, PendingWriteOutcome(intent=second, verdict=Verdict.LANDED))
    await until(lambda: len(on_a) == 1)  # the control: a's delete won, a's verdict
    clock.now += 6  # a renews no more (renew=False): lapsed as far as b can tell
    assert await b.claim_lapsed() == 1
    a.settle(first, PendingWriteOutcome(intent=first, verdict=Verdict.LANDED))
    await b.renew_lease()
    (taken,) = b.take_all()
    b.settle(taken, PendingWriteOutcome(intent=taken, verdict=Verdict.LANDED))
    await until(lambda: len(on_b) == 1)
    await until(lambda: "t/one" not in a.shared())
    assert [o.intent.request_id for o in on_a] == ["r2"]
    assert [o.intent.request_id for o in on_b] == ["r1"]


async def test_a_lost_settling_delete_never_puts_back_what_another_replica_took(
    open_ledger: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner's settling delete loses the race to a replica that took the intent over,
    while the owner's watch has not seen the take-over yet. Fails at 95cabec: nats-py's
    ``delete(last=...)`` raises JetStream's own API error (10071), not
    ``KeyWrongLastSequenceError``, so the loss was handled as "could not delete": the stale
    entry was put back as the owner's own, pending again, to be re-issued and settled a second
    time. Negative control: the owner's delete with nobody racing it publishes its verdict."""
    a: JetStreamLedger = await open_ledger("a")
    on_a: list[PendingWriteOutcome] = []
    a.outcomes.subscribe(on_a.append)
    await a.record_durably(intent("t/one", "r1"))
    await a.record_durably(intent("t/two", "r2"))
    first, second = a.take_all()
    a.settle(second, PendingWriteOutcome(intent=second, verdict=Verdict.LANDED))
    await until(lambda: len(on_a) == 1)  # the control: nobody raced, a's verdict
    clock = Clock()
    b: JetStreamLedger = await open_ledger("b", clock)
    await until(lambda: "t/one" in b.shared())
    held: list[Any] = []
    monkeypatch.setattr(a, "_see", held.append)  # a's watch falls behind from here
    clock.now += 6
    assert await b.claim_lapsed() == 1
    a.settle(first, PendingWriteOutcome(intent=first, verdict=Verdict.LANDED))
    async with asyncio.timeout(10):
        while a._tasks:  # noqa: ASYNC110 - the settling delete's own task, bounded above
            await asyncio.sleep(0.01)
    assert a.pending() == () and a.take_all() == []  # nothing of a's to re-issue
    assert len(on_a) == 1  # and no second verdict
    monkeypatch.undo()
    for entry in held:  # the watch catches up: b owns it
        a._see(entry)
    assert a.shared()["t/one"][1] == "b"


async def test_restore_puts_a_taken_intent_back(open_ledger: Callable[..., Any]) -> None:
    """An abandoned re-issue (the recovery disposed) puts its intent back: pending, taken again
    on the next evidence, settled once."""
    a: JetStreamLedger = await open_ledger("a")
    await a.record_durably(intent("t/r", "r1"))
    (taken,) = a.take_all()
    assert a.pending() == () and a.take_all() == []
    assert a.restore(taken) is True
    assert a.pending() == (taken,)
    assert a.restore(taken) is False  # not taken any more
    (again,) = a.take_all()
    assert a.settle_if_outstanding(again, PendingWriteOutcome(intent=again, verdict=Verdict.LANDED))
    assert a.pending() == () and a.in_flight() == ()


async def test_a_watch_the_cluster_does_not_answer_at_once_is_opened_again(
    open_ledger: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening the watch creates a consumer; while several replicas open at once a cluster's
    meta leader may not answer one request in time (nats: timeout). Still connecting: tried
    again within a bound, and the journal opens with what the bucket holds. Fails at feecd32,
    where the first timeout ended connect() with a JournalError (seen in a three-replica start
    under load)."""
    from nats.errors import TimeoutError as NatsTimeout
    from nats.js.kv import KeyValue

    first: JetStreamLedger = await open_ledger("a")
    assert await first.record_durably(intent("w/a", "r1")) is True
    real = KeyValue.watch
    refused: list[int] = []

    async def slow_twice(self: KeyValue, *args: Any, **kwargs: Any) -> Any:
        if len(refused) < 2:
            refused.append(1)
            raise NatsTimeout
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(KeyValue, "watch", slow_twice)
    second: JetStreamLedger = await open_ledger("b")
    assert len(refused) == 2
    assert "w/a" in second.shared()  # the watch, opened at the third try, loaded the bucket
