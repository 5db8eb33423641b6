"""A pending-write journal the replicas of one deployment share, on a NATS JetStream KV bucket.

One KV entry per intent key (``i.<base64url of PendingWrite.key>``) holding the intent and its
OWNER, the replica that re-issues it; one lease entry per live replica (``lease.<owner>``),
renewed on a timer. Every replica watches the whole bucket, so every replica sees every intent.
The rules, all by compare-and-set on the entry's revision (JetStream's expected-last-sequence):

- recording creates the entry (or replaces the same requester's, at the revision it saw): the
  publish ack, after the stream's replicas stored it, is the durable step. No ack, no record;
- an owner whose lease has not been renewed for ``lease_ttl`` (as seen on the watcher's own
  clock, so no two clocks are compared) is dead: a replica rewrites each of its entries with
  itself as owner at the revision it saw; only one such rewrite can succeed per entry;
- settling deletes the entry at the revision the settler saw, so a re-issue whose entry was
  replaced meanwhile never deletes the newer intent;
- an intent the same requester replaces stays in the replacing entry as a debt of the replica
  that owned it, until the one write that removes it publishes its verdict
  (``_jetstream_debts.py``): a dead owner's replaced intents are settled by the survivors.

An entry that cannot be decoded, or whose intent does not belong under its key, is copied under
``q.`` and removed: never re-issued. ``nats-py`` (the ``rxmesh[nats]`` extra) is imported only
when a ledger connects.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any

from loguru import logger

from rxmesh.exceptions import JournalError, PendingWriteHeldError
from rxmesh.ledger._core import RecordResult
from rxmesh.ledger._jetstream_debts import lapsed_when
from rxmesh.ledger._jetstream_entries import OWNER_PATTERN, Entry, Owed, default_owner, key_token
from rxmesh.ledger._jetstream_leases import JetStreamLeases
from rxmesh.ledger._models import PendingWrite, PendingWriteOutcome

__all__ = ["DEFAULT_BUCKET", "JetStreamLedger"]

DEFAULT_BUCKET = "rxmesh_pending_writes"
_SERIALIZABLE_SINCE = (2, 9, 21)
"""The first nats-server release whose replicated streams refuse all but one of concurrent
writes naming one expected last revision of a key; before it, two replicas could both win a
claim or a settle, and an intent get two verdicts."""
_IN_FLIGHT = 500
"""Publishes a bulk keeps awaiting at once: enough to pipeline, few enough that one bulk never
fills the client's pending buffer."""


def _warn_if_not_serializable(client: Any, replicas: int) -> None:
    try:
        version = client.connected_server_version
        found = (version.major, version.minor, version.patch)
    except Exception:  # noqa: BLE001 - a client that cannot say: nothing to warn about
        return
    if replicas > 1 and found < _SERIALIZABLE_SINCE:
        logger.warning(
            "nats-server {} may accept two concurrent compare-and-set writes of one key in a "
            "replicated bucket (fixed in {}): two replicas could then both take over one "
            "intent, or both publish its verdict; upgrade the NATS servers",
            ".".join(map(str, found)),
            ".".join(map(str, _SERIALIZABLE_SINCE)),
        )


class JetStreamLedger(JetStreamLeases):
    """A :class:`PendingWriteLedger` whose journal is a JetStream KV bucket the replicas share.

    Create it with :meth:`connect` (on the event loop the mesh runs on) and pass it as the mesh's
    ``ledger``; close it with :meth:`aclose`. It keeps the journal's rules — recorded only once
    JetStream acknowledged it, one intent per key (the same requester replaces, another is
    refused with :class:`PendingWriteHeldError`), hostile entries quarantined — and adds owners:
    a replica re-issues only the intents it owns, and takes over those of a replica whose lease
    lapsed (compare-and-set: exactly one replica wins each). When JetStream cannot be reached, a
    record raises :class:`JournalError`: the answer says the intent was not recorded.

    Intents taken over are re-issued at once if this replica's store has answered since it last
    answered UNAVAILABLE (it re-issued on evidence and recorded nothing since), else on its next
    evidence, like its own: they are announced on :attr:`adopted`, which the
    :class:`PendingWriteRecovery` follows.

    A caller's own re-issue of a recorded request settles the intent on whichever replica
    answers it (:meth:`outstanding` sees every replica's intents there): by compare-and-set on
    its entry, so the owner does not re-issue it afterwards and exactly one verdict is
    published, whether that answer or the owner's re-issue is settled first.
    """

    # ------------------------------------------------------------------------ construction

    @classmethod
    async def connect(
        cls,
        servers: str | list[str] = "nats://127.0.0.1:4222",
        *,
        bucket: str = DEFAULT_BUCKET,
        replicas: int = 3,
        owner: str | None = None,
        lease_ttl: float = 15.0,
        timeout: float = 2.0,
        client: Any = None,
        clock: Callable[[], float] = time.monotonic,
        renew: bool = True,
    ) -> JetStreamLedger:
        """Connect, create the bucket if missing (``replicas`` copies), load every intent.

        Args:
            servers: the NATS servers (ignored when ``client`` is given).
            bucket: the KV bucket all replicas of one deployment share.
            replicas: the bucket's replication factor when this call creates it (3 keeps every
                acknowledged intent through the loss of one server of three).
            owner: this replica's name, ``[A-Za-z0-9_-]{1,64}``, unique among live replicas
                (default: host, pid and a random suffix). A restarted replica may reuse its
                name to keep its intents.
            lease_ttl: seconds without a lease renewal after which a replica counts as dead.
            timeout: how long a record waits for JetStream's ack before it counts as not
                recorded.
            client: a connected ``nats.aio.client.Client`` to use (the caller closes it).
            clock: a monotonic clock in seconds (leases are judged on it).
            renew: run the lease timer (renew, then take over lapsed leases every third of
                ``lease_ttl``); ``False`` leaves both to :meth:`renew_lease` and
                :meth:`claim_lapsed`.

        Raises:
            ValueError: an invalid ``owner``, ``replicas`` or ``lease_ttl``.
            JournalError: JetStream cannot be reached or the bucket cannot be used.
        """
        owner = owner if owner is not None else default_owner()
        if not OWNER_PATTERN.fullmatch(owner):
            raise ValueError(f"invalid owner {owner!r}: expected [A-Za-z0-9_-]{{1,64}}")
        if replicas < 1 or lease_ttl <= 0 or timeout <= 0:
            raise ValueError("replicas must be >= 1, lease_ttl and timeout > 0")
        import nats
        from nats.js.errors import BucketNotFoundError

        owns = client is None
        where = f"{servers!r} bucket {bucket!r}"
        try:
            if client is None:
                async with asyncio.timeout(timeout * 4):  # its reconnect loop never gives up
                    client = await nats.connect(
                        servers, connect_timeout=timeout, max_reconnect_attempts=-1
                    )
            js = client.jetstream(timeout=timeout)
            # A cluster just started (or whose meta leader is being elected) may not answer the
            # first requests, and replicas starting together race to create the bucket: bounded.
            deadline = asyncio.get_running_loop().time() + max(10.0, timeout * 5)
            while True:
                try:
                    try:
                        kv = await js.key_value(bucket)
                    except BucketNotFoundError:
                        kv = await js.create_key_value(bucket=bucket, history=1, replicas=replicas)
                    break
                except Exception:
                    if asyncio.get_running_loop().time() > deadline:
                        raise
                    await asyncio.sleep(0.1)
        except Exception as exc:
            if owns and client is not None:
                await client.close()
            raise JournalError(
                f"cannot open the JetStream pending-write journal at {where}: "
                f"{type(exc).__name__}: {exc}",
                path=bucket,
            ) from exc
        _warn_if_not_serializable(client, replicas)
        ledger = cls(
            kv,
            client,
            bucket=bucket,
            owner=owner,
            lease_ttl=lease_ttl,
            timeout=timeout,
            clock=clock,
            owns_client=owns,
        )
        try:
            await ledger._start(renew)
        except BaseException:
            await ledger.aclose()
            raise
        return ledger

    async def _start(self, renew: bool) -> None:
        # A bucket just created elects its stream's leader first: its first write may find no
        # one to answer yet. Bounded: a journal that never answers is an error.
        deadline = asyncio.get_running_loop().time() + max(10.0, self._timeout * 5)
        while True:
            try:
                await self.renew_lease(strict=True)
                break
            except JournalError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.1)
        # Opening the watch creates a consumer, which a cluster's meta leader must answer: while
        # several replicas open at once it may not answer within one request's timeout. Still
        # connecting, nothing written: tried again, within a bound of its own.
        deadline = asyncio.get_running_loop().time() + max(10.0, self._timeout * 5)
        while True:
            try:
                self._watcher = await self._kv.watch(">")
                break
            except Exception as exc:
                if asyncio.get_running_loop().time() <= deadline:
                    await asyncio.sleep(0.1)
                    continue
                raise JournalError(
                    f"cannot watch the JetStream pending-write journal {self._bucket!r}: {exc}",
                    path=self._bucket,
                ) from exc
        self._watching = asyncio.create_task(self._watch())
        async with asyncio.timeout(max(30.0, self._timeout * 10)):
            await self._initial.wait()
        mine = sum(1 for e in self._view.values() if e.owner == self._owner)
        self._counts["loaded"] = mine
        if renew:
            self._renewing = asyncio.create_task(self._renew_forever())
        logger.bind(bucket=self._bucket, owner=self._owner).info(
            "JetStream pending-write journal {} opened by {}: {} intent(s), {} of them its own",
            self._bucket,
            self._owner,
            len(self._view),
            mine,
        )

    # ------------------------------------------------------------------------------ recording

    async def _record_one(self, intent: PendingWrite) -> bool:
        """Decide against the newest entry seen, then write it by compare-and-set; a lost race
        is decided again against the entry that won it."""
        key = intent.key
        # One lock per key while someone records it, dropped with its last user: a lock kept
        # for every key ever recorded is one more object each full collection walks.
        held = self._recording.get(key)
        if held is None:
            held = self._recording[key] = [asyncio.Lock(), 0]
        held[1] += 1
        try:
            return await self._record_locked(intent, held[0])
        finally:
            held[1] -= 1
            if not held[1]:
                del self._recording[key]

    async def _record_locked(self, intent: PendingWrite, lock: asyncio.Lock) -> bool:
        from nats.js.errors import KeyWrongLastSequenceError

        key = intent.key
        async with lock:
            for _ in range(8):
                current, owed, last = self._owing(key)
                if current is not None:
                    if current.request_id == intent.request_id and (
                        (key, intent.request_id) in self._taken or current.intent == intent
                    ):
                        return False  # being re-issued, or pending unchanged
                    if current.requester != intent.requester:
                        raise self._held(intent, current.request_id)
                    if current.request_id != intent.request_id:
                        # Its verdict is owed by the replica that owns it, whoever that is.
                        owed = (*owed, Owed(current.owner, current.intent, intent.request_id))
                written = Entry(intent, self._owner, 0, owed)
                value = self._value(intent, owed=owed)
                self._writing[key] = (value, written)
                try:
                    written.revision = await self._kv.update(
                        f"i.{key_token(key)}", value, last=last
                    )
                except KeyWrongLastSequenceError:
                    await self._refresh(key)
                    continue
                except Exception as exc:
                    raise self._unreachable(intent, exc) from exc
                finally:
                    del self._writing[key]
                self._wrote(written, current is not None)
                if current is not None and current.request_id != intent.request_id:
                    await self._replaced(current)
                return True
        raise JournalError(
            f"the pending write for {key!r} lost every compare-and-set race; NOT recorded",
            path=self._bucket,
        )

    async def _replaced(self, old: Entry) -> None:
        """The intent of ``old`` was replaced: publish its verdict now when this replica owns
        it and is not re-issuing it, or when its owner's lease lapsed; a live owner pays its
        debt itself when it sees the new entry."""
        key = old.intent.key
        if old.owner == self._owner:
            if not self._busy((key, old.intent.request_id)):
                debt = Owed(old.owner, old.intent, "")
                await self._pay_superseded(debt, "before it was re-issued")
        elif old.owner in self.lapsed() and await self._still_lapsed(old.owner):
            await self._pay_superseded(Owed(old.owner, old.intent, ""), lapsed_when(old.owner))

    async def record_durably(self, intent: PendingWrite) -> bool:
        """Record ``intent`` once JetStream acknowledged it (see :class:`PendingWriteLedger`).

        Raises:
            PendingWriteHeldError: another requester's intent for the key is outstanding.
            JournalError: JetStream did not acknowledge it within ``timeout`` (unreachable, no
                quorum), it cannot be encoded, or the ledger is closed: not recorded.
        """
        self._answering = False  # recorded because this replica's store did not answer
        if self._closed:
            raise self._closed_error()
        return await self._record_one(intent)

    async def record_many_durably(self, intents: Iterable[PendingWrite]) -> list[RecordResult]:
        """Record a bulk's intents, ``_IN_FLIGHT`` publishes awaiting their acks at once."""
        self._answering = False
        if self._closed:
            raise self._closed_error()
        batch = list(intents)
        results: list[RecordResult] = [False] * len(batch)
        gate = asyncio.Semaphore(_IN_FLIGHT)

        async def one(index: int, intent: PendingWrite) -> None:
            async with gate:
                try:
                    results[index] = await self._record_one(intent)
                except (PendingWriteHeldError, JournalError) as exc:
                    results[index] = exc

        await asyncio.gather(*(one(i, intent) for i, intent in enumerate(batch)))
        return results

    def record(self, intent: PendingWrite) -> bool:
        """Record from another thread than the ledger's loop (blocks for JetStream's ack).

        Raises:
            JournalError: called on the ledger's own loop (use :meth:`record_durably`), or
                not recorded (see :meth:`record_durably`).
        """
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise JournalError(
                "JetStreamLedger.record() would block its own event loop; await "
                "record_durably() instead",
                path=self._bucket,
            )
        future = asyncio.run_coroutine_threadsafe(self.record_durably(intent), self._loop)
        return future.result()

    # ---------------------------------------------------------------------------- re-issuing

    def take_all(self) -> list[PendingWrite]:
        """Take every intent this replica owns out for re-issue (oldest first).

        Nothing while this replica's lease was not renewed within half ``lease_ttl``: another
        replica may be about to take its intents over, and one intent is never re-issued by
        two. They are taken (announced on :attr:`adopted`) once a renewal succeeds, unless
        another replica took them first.
        """
        with self._lock:
            self._answering = True  # called on the store's evidence
            renewed = self._renewed_at
            if renewed is None or self._clock() - renewed > self._lease_ttl / 2:
                self._deferred = True
                logger.bind(owner=self._owner).warning(
                    "replica {} did not renew its lease lately; its pending writes are "
                    "re-issued once it does (or by the replica that takes them over)",
                    self._owner,
                )
                return []
            entries = sorted(self._mine(), key=lambda entry: entry.intent.recorded_at)
            for entry in entries:
                self._taken[(entry.intent.key, entry.intent.request_id)] = entry
                del self._owned[entry.intent.key]
            self._counts["taken"] += len(entries)
        return [entry.intent for entry in entries]

    def restore(self, intent: PendingWrite) -> bool:
        """Put a taken, unsettled intent back; ``False`` if a newer one replaced it (settled
        DROPPED, ``superseded_by`` naming it, once its debt is removed from the newer entry)
        or it was not outstanding."""
        with self._lock:
            if self._taken.pop((intent.key, intent.request_id), None) is None:
                return False
            current = self._view.get(intent.key)
            if current is not None and current.request_id == intent.request_id:
                if current.owner != self._owner:
                    return False
                self._owned[intent.key] = current
                return True
        debt = Owed(self._owner, intent, "")
        self._spawn(
            self._pay_superseded(debt, "while its re-issue was abandoned"),
            f"paying {intent.key}",
        )
        return False

    def settle(self, intent: PendingWrite, outcome: PendingWriteOutcome) -> None:
        """Settle ``intent``: publish its verdict, delete its entry by compare-and-set.

        Raises:
            ValueError: ``outcome`` is not about ``intent``, or it is not outstanding here.
        """
        self._settle(intent, outcome, strict=True)

    def settle_if_outstanding(self, intent: PendingWrite, outcome: PendingWriteOutcome) -> bool:
        """:meth:`settle` unless it is not outstanding here (settled already, or not owned)."""
        return self._settle(intent, outcome, strict=False)

    def _settle(self, intent: PendingWrite, outcome: PendingWriteOutcome, *, strict: bool) -> bool:
        if outcome.intent != intent:
            raise ValueError("the outcome is not about the intent being settled")
        key = intent.key
        mine = (key, intent.request_id)
        with self._lock:
            entry = self._taken.pop(mine, None)
            current = self._view.get(key)
            if entry is None:
                if (
                    current is None
                    or current.request_id != intent.request_id
                    or mine in self._settling
                ):
                    if not strict:
                        return False
                    raise ValueError(
                        f"pending write for {key!r} (request {intent.request_id}) is not "
                        "outstanding; it was settled already"
                    )
                entry = current
            # Its own re-issue, or an answer to the caller's own re-issue of another replica's.
            anyone = entry.owner != self._owner
            self._settling.add(mine)
            if current is not None and current.request_id == intent.request_id:
                self._owned.pop(key, None)
        self._spawn(self._settle_entry(key, entry, outcome, anyone=anyone), f"settling {key}")
        return True
