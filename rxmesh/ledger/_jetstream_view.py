"""What a replica sees of the shared JetStream journal: every entry, who owns it, at which
revision, and whose lease was renewed when (the public ledger is in ``_jetstream.py``).

The view follows one KV watch of the whole bucket. A revision older than one already seen is
ignored, so this replica's own writes (applied when acknowledged) and their echo on the watch
never undo each other. An entry that cannot be decoded, or whose intent does not belong under
its key, is copied under ``q.`` and removed: never re-issued.

An entry may also carry debts (what one is: ``_jetstream_entries.py``); once its own intent is
settled, an entry that still owes keeps only its debts. How debts are paid is in
``_jetstream_debts.py``.
"""

from __future__ import annotations

import asyncio
import binascii
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loguru import logger
from reactivex.subject import Subject

from rxmesh.exceptions import JournalError, PendingWriteHeldError
from rxmesh.ledger._jetstream_entries import Debts, Entry, Owed, decode, encode, key_token, untoken
from rxmesh.ledger._ledger import PendingWriteLedger
from rxmesh.ledger._models import (
    LedgerStatistics,
    PendingWrite,
    PendingWriteOutcome,
    statistics_from,
)
from rxmesh.ledger._publish import count_recorded

__all__ = ["JetStreamView"]


class JetStreamView(PendingWriteLedger):
    """The state and the watch of a :class:`~rxmesh.ledger.JetStreamLedger`."""

    def __init__(
        self,
        kv: Any,
        client: Any,
        *,
        bucket: str,
        owner: str,
        lease_ttl: float,
        timeout: float,
        clock: Callable[[], float],
        owns_client: bool,
    ) -> None:
        super().__init__("")
        self._kv = kv
        self._client = client
        self._bucket = bucket
        self._owner = owner
        self._lease_ttl = lease_ttl
        self._timeout = timeout
        self._clock = clock
        self._owns_client = owns_client
        self._loop = asyncio.get_running_loop()
        self._view: dict[str, Entry] = {}  # intent key -> its entry, as last seen
        self._debts: dict[str, Debts] = {}  # intent key -> its entry, when only debts are left
        self._indebted: set[str] = set()  # the keys whose entry owes something
        # Debts being paid, and settles being written, by this replica: (key, request id).
        self._paying: set[tuple[str, str]] = set()
        self._settling: set[tuple[str, str]] = set()
        # Settles whose write JetStream did not take: (key, request id) -> (the entry, its
        # outcome, whether it answers the caller's own re-issue), tried again on the lease timer.
        self._unsettled: dict[tuple[str, str], tuple[Entry, PendingWriteOutcome, bool]] = {}
        self._owned: dict[str, Entry] = {}  # the entries this replica owns and has not taken
        self._revisions: dict[str, int] = {}  # intent key -> newest revision seen (puts, deletes)
        self._taken: dict[tuple[str, str], Entry] = {}
        self._recording: dict[str, list[Any]] = {}  # intent key -> [its lock, its users]
        # intent key -> (the bytes this replica is writing, their entry) until the ack: the
        # watch's echo of them is known without decoding it again.
        self._writing: dict[str, tuple[bytes, Entry]] = {}
        # owner -> (its lease's newest revision seen, when this replica first saw it)
        self._leases: dict[str, tuple[int, float]] = {}
        self._started = clock()
        self._answering = False  # this replica's store answered since its last UNAVAILABLE
        # When this replica's lease writes started succeeding again (None: the last one failed),
        # and when the last one that succeeded was sent.
        self._writable_since: float | None = None
        self._renewed_at: float | None = None
        self._deferred = False  # a take was refused for a stale lease: announce once renewed
        self._adopted: Subject[int] = Subject()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watcher: Any = None
        self._watching: asyncio.Task[None] | None = None
        self._renewing: asyncio.Task[None] | None = None
        self._initial = asyncio.Event()
        self._claims = 0
        self._lost = 0
        self._counts.setdefault("claimed", 0)

    # ------------------------------------------------------------------------------- watching

    async def _watch(self) -> None:
        try:
            async for entry in self._watcher:
                if entry is None:
                    self._initial.set()
                    continue
                self._see(entry)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - logged; the journal's view stops updating
            logger.opt(exception=exc).error(
                "the watch of JetStream pending-write journal {} failed: {}", self._bucket, exc
            )
        finally:
            self._initial.set()

    def _see(self, entry: Any) -> None:
        key: str = entry.key
        deleted = entry.operation in ("DEL", "PURGE")
        if key.startswith("lease."):
            owner = key[len("lease.") :]
            self._saw_lease(owner, entry.revision, deleted)
            return
        if not key.startswith("i."):
            return  # quarantined copies, or something that is not ours to read
        token = key[2:]
        try:
            path = untoken(token)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            if not deleted:
                self._quarantine(key, entry.value, entry.revision, "its key is not an intent key")
            return
        if entry.revision <= self._revisions.get(path, 0):
            return  # what this replica wrote, or older than what it saw
        self._revisions[path] = entry.revision
        old = self._view.get(path)
        if deleted:
            with self._lock:
                self._drop(path)
                self._settled_elsewhere(path, old)
            return
        writing = self._writing.get(path)
        try:
            if writing is not None and writing[0] == entry.value:
                new: Entry | Debts = writing[1].moved(entry.revision, writing[1].owed)
            else:
                new = self._decode(entry.value, path, entry.revision)
        except ValueError as exc:
            self._drop(path)
            self._quarantine(key, entry.value, entry.revision, str(exc))
            return
        with self._lock:
            if isinstance(new, Debts):
                self._put_debts(path, new)
                self._settled_elsewhere(path, old)
            else:
                self._put(path, new)
                if (
                    old is not None
                    and old.owner == self._owner
                    and new.owner != self._owner
                    and old.request_id == new.request_id
                ):
                    self._lost += 1  # taken over: this replica's lease lapsed
                    logger.bind(path=path, owner=new.owner).warning(
                        "pending write for {} was taken over by replica {} (this replica's "
                        "lease lapsed)",
                        path,
                        new.owner,
                    )
        # An intent of this replica replaced by anyone: its debt is in the new entry.
        self._owed_seen(path)

    def _settled_elsewhere(self, path: str, old: Entry | None) -> None:
        """Another replica settled the intent of ``old`` (it removed the entry): if this one
        took it for re-issue, that re-issue is called off (not outstanding any more; an
        answer to it settles nothing)."""
        if old is not None and self._taken.pop((path, old.request_id), None) is not None:
            logger.bind(path=path).info(
                "pending write for {} (request {}) was settled by another replica; its "
                "re-issue here is called off",
                path,
                old.request_id,
            )

    def _owed_seen(self, path: str) -> None:
        """The entry of ``path`` changed: pay what it owes for this replica (the debts'
        subclass does)."""

    def _saw_lease(self, owner: str, revision: int, deleted: bool) -> None:
        known = self._leases.get(owner)
        if known is None or revision > known[0]:
            self._leases[owner] = (revision, -math.inf if deleted else self._clock())

    def _decode(self, value: bytes | None, path: str, revision: int) -> Entry | Debts:
        return decode(value, path, revision, self._owner)

    def _value(
        self,
        intent: PendingWrite | bytes | None,
        owner: str | None = None,
        owed: tuple[Owed, ...] = (),
    ) -> bytes:
        """An entry's bytes (``owner``: this replica unless given)."""
        return encode(intent, owner or self._owner, owed, self._bucket)

    def _quarantine(self, key: str, value: bytes | None, revision: int, why: str) -> None:
        self._counts["quarantined"] += 1
        logger.bind(bucket=self._bucket, key=key).error(
            "JetStream pending-write entry {} (revision {}) quarantined, never re-issued: {}",
            key,
            revision,
            why,
        )

        async def move() -> None:
            await self._kv.put(f"q.{revision}", value or b"")
            await self._kv.delete(key, last=revision)

        self._spawn(move(), f"quarantining {key}")

    def _held(self, intent: PendingWrite, holder: str) -> PendingWriteHeldError:
        """``intent`` is refused: request ``holder`` of another requester holds its key."""
        self._counts["held"] += 1
        return PendingWriteHeldError(
            f"a pending write for {intent.key!r} by another requester (request "
            f"{holder}) is outstanding; the intent of request "
            f"{intent.request_id} is not recorded",
            path=intent.key,
            holder_request_id=holder,
        )

    def _unreachable(self, intent: PendingWrite, exc: BaseException) -> JournalError:
        return JournalError(
            f"JetStream did not acknowledge the pending write for {intent.key!r} "
            f"({type(exc).__name__}: {exc}); it is NOT recorded",
            path=self._bucket,
        )

    def _wrote(self, written: Entry, replaced: bool) -> None:
        with self._lock:
            key = written.intent.key
            if written.revision >= self._revisions.get(key, 0):  # else the watch saw newer
                self._revisions[key] = written.revision
                self._put(key, written)
            count_recorded(self._counts, written.intent)
            if replaced:
                self._counts["replaced"] += 1

    async def _refresh(self, key: str) -> None:
        """Read the newest entry of ``key`` after a lost race (the watch may not have it yet)."""
        from nats.js.errors import KeyDeletedError, KeyNotFoundError

        try:
            entry = await self._kv.get(f"i.{key_token(key)}")
        except KeyDeletedError as exc:
            self._revisions[key] = max(self._revisions.get(key, 0), exc.entry.revision or 0)
            self._drop(key)
            return
        except KeyNotFoundError:
            return
        except Exception as exc:
            raise JournalError(
                f"cannot read the JetStream pending-write entry for {key!r}: {exc}",
                path=self._bucket,
            ) from exc
        self._see(entry)

    def _put(self, key: str, entry: Entry) -> None:
        self._view[key] = entry
        self._debts.pop(key, None)
        if entry.owed:
            self._indebted.add(key)
        else:
            self._indebted.discard(key)
        mine = (key, entry.request_id)
        if entry.owner == self._owner and mine not in self._taken and mine not in self._settling:
            entry.keep()
            self._owned[key] = entry
        else:
            self._owned.pop(key, None)

    def _put_debts(self, key: str, debts: Debts) -> None:
        self._drop(key)
        self._debts[key] = debts
        self._indebted.add(key)

    def _drop(self, key: str) -> None:
        self._view.pop(key, None)
        self._owned.pop(key, None)
        self._debts.pop(key, None)
        self._indebted.discard(key)

    def _owing(self, key: str) -> tuple[Entry | None, tuple[Owed, ...], int]:
        """The entry of ``key`` as last seen (``None``: gone, or only debts), what it owes,
        and its revision."""
        entry = self._view.get(key)
        if entry is not None:
            return entry, entry.owed, entry.revision
        debts = self._debts.get(key)
        if debts is not None:
            return None, debts.owed, debts.revision
        return None, (), self._revisions.get(key, 0)

    def _mine(self) -> list[Entry]:
        # Asked on every piece of evidence (each commit announced): an index, not a scan.
        return list(self._owned.values())

    def _spawn(self, coroutine: Any, what: str) -> None:
        def start() -> None:
            task = self._loop.create_task(coroutine, name=what)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            start()
        else:
            self._loop.call_soon_threadsafe(start)

    # ------------------------------------------------------------------------------ reading

    def outstanding(self, path: str, request_id: str) -> PendingWrite | None:
        """The intent with key ``path`` and ``request_id`` if it is outstanding: taken by this
        replica for re-issue, or in the bucket, whichever replica owns it (an answer to the
        caller's own re-issue settles it wherever it is answered)."""
        with self._lock:
            taken = self._taken.get((path, request_id))
            if taken is not None:
                return taken.intent
            current = self._view.get(path)
            if (
                current is not None
                and current.request_id == request_id
                and (path, request_id) not in self._settling
            ):
                return current.intent
            return None

    def anything_outstanding(self) -> bool:
        """Whether any intent is outstanding in the bucket, whichever replica owns it, or taken
        here: an answer on this replica settles another's intent too."""
        with self._lock:
            return bool(self._view or self._taken)

    def pending(self) -> tuple[PendingWrite, ...]:
        """The intents this replica owns and has not taken, oldest first."""
        with self._lock:
            return tuple(
                sorted((e.intent for e in self._mine()), key=lambda intent: intent.recorded_at)
            )

    def in_flight(self) -> tuple[PendingWrite, ...]:
        """The intents taken for re-issue and not yet settled."""
        with self._lock:
            return tuple(entry.intent for entry in self._taken.values())

    def shared(self) -> dict[str, tuple[PendingWrite, str]]:
        """Every intent in the bucket as this replica saw it last: key -> (intent, owner)."""
        with self._lock:
            return {key: (e.intent, e.owner) for key, e in self._view.items()}

    @property
    def journal_dir(self) -> Path | None:
        """``None``: this journal is not a directory."""
        return None

    def journal_file(self, path: str) -> Path | None:
        """``None``: this journal is not a directory."""
        return None

    def statistics(self) -> LedgerStatistics:
        """This replica's figures (``journal_dir`` names the bucket as ``nats-kv:<bucket>``)."""
        with self._lock:
            return statistics_from(
                self._counts,
                journal_dir=f"nats-kv:{self._bucket}",
                pending=len(self._mine()),
                in_flight=len(self._taken),
            )

    @property
    def claimed(self) -> int:
        """Intents this replica took over from replicas whose lease lapsed."""
        return self._counts["claimed"]

    def __repr__(self) -> str:
        return f"JetStreamLedger({self._bucket!r}, owner={self._owner!r})"
