"""Settling in the shared JetStream journal: every recorded intent gets exactly one verdict,
whoever owns it, and the one compare-and-set that wins decides who publishes it.

- An entry is settled by deleting it at the revision the settler saw (or, if it still owes
  verdicts, by rewriting it with only its debts). Its owner settles it after a re-issue; any
  replica settles it when the caller's own re-issue of the request is answered there.
- An intent replaced by the same requester becomes a debt of the replica that owned it, carried
  by the entry that replaced it (and by every later write of that entry). A debt is paid by the
  write that removes it from the entry; only the replica whose write won publishes the verdict:
  its owner (superseded, or its re-issue's verdict when it was re-issuing it), any replica that
  answers the caller's own re-issue of it, or any replica once its owner's lease lapsed
  (superseded). A dead owner's debts are therefore paid by the survivors, exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from loguru import logger

from rxmesh.exceptions import JournalError
from rxmesh.ledger._jetstream_entries import Debts, Entry, Owed, key_token, lost_the_race
from rxmesh.ledger._jetstream_view import JetStreamView
from rxmesh.ledger._models import PendingWriteOutcome
from rxmesh.ledger._publish import superseded

__all__ = ["JetStreamDebts", "lapsed_when"]

_RACES = 8
"""Compare-and-set races one settle or payment retries against the newer entry that won."""
_IN_FLIGHT = 500
"""Payments awaiting their acks at once."""


def lapsed_when(owner: str) -> str:
    """When an intent was superseded, said of one whose owner's lease lapsed."""
    return f"after replica {owner}, which owned it, stopped renewing its lease"


class JetStreamDebts(JetStreamView):
    """Settling entries and paying their debts, for a :class:`~rxmesh.ledger.JetStreamLedger`."""

    # ------------------------------------------------------------------------------- debts

    def _owed_seen(self, path: str) -> None:
        """Pay, superseded, what the entry of ``path`` owes for this replica's intents that are
        not being re-issued (a re-issue pays with its own verdict when it is answered)."""
        if path not in self._indebted:
            return
        with self._lock:
            debts = [
                debt
                for debt in self._owing(path)[1]
                if debt.owner == self._owner and not self._busy((path, debt.intent.request_id))
            ]
        for debt in debts:
            self._spawn(self._pay_superseded(debt, "before it was re-issued"), f"paying {path}")

    def _busy(self, mine: tuple[str, str]) -> bool:
        """Whether this replica is re-issuing, settling or paying for that intent already."""
        return mine in self._taken or mine in self._settling or mine in self._paying

    async def _pay_superseded(self, debt: Owed, when: str, owner: str | None = None) -> bool:
        return await self._pay(
            debt.intent.key,
            debt.intent.request_id,
            lambda owed: superseded(self._counts, owed.intent, owed.by, when),
            owner=debt.owner if owner is None else owner,
        )

    async def _pay(
        self,
        key: str,
        request_id: str,
        verdict: Callable[[Owed], PendingWriteOutcome],
        *,
        owner: str | None,
    ) -> bool:
        """Remove the debt for ``request_id`` (owed by ``owner``, or by anyone) from the entry of
        ``key`` by compare-and-set; publish ``verdict(debt)`` if that write won. ``False``: the
        debt is not there (paid by another replica, or never owed) or could not be written."""
        mine = (key, request_id)
        if mine in self._paying:
            return False
        self._paying.add(mine)
        try:
            for _ in range(_RACES):
                with self._lock:
                    entry, owed, revision = self._owing(key)
                debt = next(
                    (
                        d
                        for d in owed
                        if d.intent.request_id == request_id and owner in (None, d.owner)
                    ),
                    None,
                )
                if debt is None:
                    return False
                rest = tuple(d for d in owed if d is not debt)
                if await self._rewrite(key, entry, rest, revision):
                    with self._lock:
                        outcome = verdict(debt)
                    self._publish(outcome)
                    return True
            return False
        except JournalError as exc:
            logger.bind(path=key).warning(
                "the verdict owed for pending write {} (request {}) is not published yet: its "
                "entry could not be rewritten ({}); it is paid on a later try",
                key,
                request_id,
                exc,
            )
            return False
        finally:
            self._paying.discard(mine)

    async def _rewrite(
        self, key: str, entry: Entry | None, owed: tuple[Owed, ...], revision: int
    ) -> bool:
        """Write the entry of ``key`` as ``entry`` owing ``owed`` (deleted when neither is
        left) at ``revision``. ``False``: another write won; the view now holds it.

        Raises:
            JournalError: JetStream did not take the write for another reason.
        """
        name = f"i.{key_token(key)}"
        try:
            if entry is None and not owed:
                await self._kv.delete(name, last=revision)
                written = None
            else:
                intent = None if entry is None else entry.held
                value = self._value(intent, None if entry is None else entry.owner, owed)
                written = await self._kv.update(name, value, last=revision)
        except Exception as exc:
            if not lost_the_race(exc):
                raise JournalError(
                    f"cannot rewrite the JetStream pending-write entry for {key!r}: {exc}",
                    path=self._bucket,
                ) from exc
            try:
                await self._refresh(key)
            except JournalError as reread:  # the next try reads it, or the watch brings it
                logger.bind(path=key).warning("could not re-read {}: {}", key, reread)
            return False
        with self._lock:
            if written is not None and written > self._revisions.get(key, 0):
                self._revisions[key] = written
                if entry is not None:
                    self._put(key, entry.moved(written, owed))
                else:
                    self._put_debts(key, Debts(owed, written))
            elif written is None and self._revisions.get(key, 0) <= revision:
                self._drop(key)  # unless the watch saw a newer write of the key meanwhile
        return True

    async def _pay_lapsed(self, lapsed: set[str]) -> int:
        """Pay, superseded, every debt owed by a replica whose lease lapsed."""
        with self._lock:
            owed = [
                debt
                for key in list(self._indebted)
                for debt in self._owing(key)[1]
                if debt.owner in lapsed
            ]
        gate = asyncio.Semaphore(_IN_FLIGHT)

        async def pay(debt: Owed) -> bool:
            async with gate:
                return await self._pay_superseded(debt, lapsed_when(debt.owner))

        return sum(await asyncio.gather(*(pay(debt) for debt in owed)))

    # ---------------------------------------------------------------------------- settling

    async def _settle_entry(
        self, key: str, entry: Entry, outcome: PendingWriteOutcome, *, anyone: bool
    ) -> None:
        """Settle ``entry``'s intent: remove it at the revision seen; publish the verdict only if
        that write won. Its owner's settle (``anyone`` false) gives up to a replica that took the
        intent over meanwhile (its verdict is the one published); an answer to the caller's own
        re-issue (``anyone``) settles it whoever owns it now."""
        request_id = entry.request_id
        mine = (key, request_id)
        try:
            for _ in range(_RACES):
                try:
                    won = await self._rewrite(key, None, entry.owed, entry.revision)
                except JournalError as exc:
                    self._not_deleted(key, entry, outcome, anyone, exc)
                    return
                if won:
                    with self._lock:
                        self._counts[outcome.verdict] += 1
                    self._publish(outcome)
                    self._owed_seen(key)
                    return
                with self._lock:
                    current = self._view.get(key)
                    if current is not None and current.request_id == request_id:
                        if current.revision <= entry.revision:
                            return  # not re-read: the watch brings the write that won
                        if anyone or current.owner == self._owner:
                            entry = current  # it moved on (a debt beside it paid): again
                            continue
                        logger.bind(path=key, owner=current.owner).warning(
                            "pending write for {} was taken over by another replica while this "
                            "one re-issued it; that replica publishes its verdict",
                            key,
                        )
                        return
                # Replaced while it was re-issued: its verdict is the debt the newer entry
                # carries (this replica's, or its owner's when this answers the caller).
                await self._pay(
                    key,
                    request_id,
                    lambda _debt: self._counted(outcome),
                    owner=None if anyone else self._owner,
                )
                return
            logger.bind(path=key).warning(
                "pending write for {} lost every race to settle it; its owner re-issues it", key
            )
            with self._lock:
                self._settling.discard(mine)
                current = self._view.get(key)
                if current is not None and current.request_id == request_id:
                    self._put(key, current)  # still outstanding
        finally:
            with self._lock:
                if mine not in self._unsettled:
                    self._settling.discard(mine)

    def _counted(self, outcome: PendingWriteOutcome) -> PendingWriteOutcome:
        self._counts[outcome.verdict] += 1
        return outcome

    def _not_deleted(
        self,
        key: str,
        entry: Entry,
        outcome: PendingWriteOutcome,
        anyone: bool,
        exc: Exception,
    ) -> None:
        """The settling write failed for another reason than a lost race (no quorum, a stream
        leader being elected): the answer is known, so it is not re-issued; the write is tried
        again on the lease timer (:meth:`_settle_again`), and the verdict published when one
        wins. Should this replica stop first, the entry is still in the bucket: the replica
        that takes it over re-issues it (its request id makes that idempotent)."""
        with self._lock:
            self._unsettled[(key, entry.request_id)] = (entry, outcome, anyone)
        logger.bind(path=key).error(
            "pending write for {} was answered ({}) but its JetStream entry could not be "
            "deleted ({}); the delete is tried again on the lease timer, and its verdict is "
            "published once it succeeds",
            key,
            outcome.verdict.value,
            exc,
        )

    async def _settle_again(self) -> None:
        """Try again the settling writes JetStream did not take, each at its newest revision."""
        with self._lock:
            unsettled = list(self._unsettled.items())
            self._unsettled.clear()
        for (key, request_id), (entry, outcome, anyone) in unsettled:
            with self._lock:
                current = self._view.get(key)
                if current is not None and current.request_id == request_id:
                    entry = current
            await self._settle_entry(key, entry, outcome, anyone=anyone)
