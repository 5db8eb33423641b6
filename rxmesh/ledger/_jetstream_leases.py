"""The leases of the shared JetStream journal: a replica says it is alive on a timer, and takes
over, by compare-and-set, the intents of a replica whose lease lapsed.

A lease lapses when its renewal has not been SEEN for ``lease_ttl`` on this replica's own
monotonic clock: no two machines' clocks are ever compared. A lease deleted (a replica closed)
lapses at once.
"""

from __future__ import annotations

import asyncio
import math

from loguru import logger
from reactivex import Observable, abc

from rxmesh.exceptions import JournalError
from rxmesh.ledger._jetstream_debts import JetStreamDebts
from rxmesh.ledger._jetstream_entries import Entry, key_token

__all__ = ["JetStreamLeases"]

_IN_FLIGHT = 500
"""Claims awaiting their acks at once."""


class JetStreamLeases(JetStreamDebts):
    """Lease renewal and take-over of a :class:`~rxmesh.ledger.JetStreamLedger`."""

    # ------------------------------------------------------------------------------- leases

    async def renew_lease(self, *, strict: bool = False) -> None:
        """Say this replica is alive (the lease timer calls it every third of ``lease_ttl``)."""
        sent = self._clock()
        try:
            await self._kv.put(f"lease.{self._owner}", str(self._lease_ttl).encode())
        except Exception as exc:
            self._writable_since = None
            if strict:
                raise JournalError(
                    f"cannot write the lease of {self._owner!r} in {self._bucket!r}: {exc}",
                    path=self._bucket,
                ) from exc
            logger.bind(owner=self._owner).warning(
                "could not renew the lease of replica {} in {}: {}", self._owner, self._bucket, exc
            )
            return
        if self._writable_since is None:
            self._writable_since = sent
        self._renewed_at = sent
        if self._deferred and self._answering:
            self._deferred = False
            self._adopted.on_next(0)  # the take refused for a stale lease can happen now

    def lapsed(self) -> set[str]:
        """The owners of intents whose lease was not seen renewed within ``lease_ttl`` of the
        journal being writable.

        While the journal takes no writes (no quorum, a leader being elected) nobody can renew,
        so nobody lapses: the time counts from when this replica's own lease writes succeed
        again, and every live replica renews within a third of ``lease_ttl`` of that.
        """
        if self._writable_since is None:
            return set()
        now = self._clock()
        owners = {entry.owner for entry in self._view.values()}
        owners.update(debt.owner for key in self._indebted for debt in self._owing(key)[1])
        owners.discard(self._owner)
        lapsed = set()
        for owner in owners:
            seen = self._leases.get(owner, (0, self._started))[1]
            if seen == -math.inf or now - max(seen, self._writable_since) > self._lease_ttl:
                lapsed.add(owner)  # released (deleted) leases lapse at once
        return lapsed

    async def _still_lapsed(self, owner: str) -> bool:
        """Read the lease itself before taking anything over: a watch that fell behind (its
        server died, this loop was slow) must not make a live replica look dead."""
        from nats.js.errors import KeyDeletedError, KeyNotFoundError

        try:
            entry = await self._kv.get(f"lease.{owner}")
        except KeyDeletedError as exc:
            self._saw_lease(owner, exc.entry.revision or 0, True)
            return True
        except KeyNotFoundError:
            return True
        except Exception as exc:  # noqa: BLE001 - cannot tell: take nothing over this time
            logger.bind(owner=owner).warning("could not read the lease of {}: {}", owner, exc)
            return False
        known = self._leases.get(owner)
        if known is None or entry.revision > known[0]:
            self._saw_lease(owner, entry.revision, False)
            return False
        return True

    async def claim_lapsed(self) -> int:
        """Take over every intent of a replica whose lease lapsed; return how many this won.

        Each is rewritten with this replica as owner at the revision seen: of two replicas
        claiming one entry, exactly one succeeds. Those won are re-issued like this replica's own
        (announced on :attr:`adopted` if its store answers now). The verdicts such a replica
        owes for intents replaced while it owned them are published (superseded), each by the
        one replica whose write removes it from its entry. This replica's own debts whose
        payment failed are tried again, and so are its settling writes that failed.
        """
        from nats.js.errors import KeyWrongLastSequenceError

        for key in list(self._indebted):
            self._owed_seen(key)
        await self._settle_again()
        lapsed = {owner for owner in self.lapsed() if await self._still_lapsed(owner)}
        if not lapsed or self._closed:
            return 0
        targets = [(key, entry) for key, entry in list(self._view.items()) if entry.owner in lapsed]
        gate = asyncio.Semaphore(_IN_FLIGHT)
        won = 0

        async def claim(key: str, entry: Entry) -> None:
            nonlocal won
            async with gate:
                try:
                    revision = await self._kv.update(
                        f"i.{key_token(key)}",
                        self._value(entry.held, owed=entry.owed),
                        last=entry.revision,
                    )
                except KeyWrongLastSequenceError:
                    # Another replica claimed it first (or it was settled or replaced): see
                    # what it is now, so the next tick does not try again.
                    try:
                        await self._refresh(key)
                    except JournalError as exc:  # unread: the next tick tries again
                        logger.bind(path=key).warning(
                            "could not read the pending write for {} after losing its claim: {}",
                            key,
                            exc,
                        )
                    return
                except Exception as exc:  # noqa: BLE001 - the next tick claims it again
                    logger.bind(path=key).warning(
                        "could not claim the pending write for {}: {}", key, exc
                    )
                    return
            with self._lock:
                if revision >= self._revisions.get(key, 0):  # else the watch saw newer
                    self._revisions[key] = revision
                    self._put(key, entry.moved(revision, entry.owed, owner=self._owner))
                self._counts["claimed"] += 1
                won += 1

        await asyncio.gather(*(claim(key, entry) for key, entry in targets))
        await self._pay_lapsed(lapsed)
        if won:
            logger.bind(owner=self._owner, lapsed=sorted(lapsed)).warning(
                "replica {} took over {} pending write(s) of {} (lease lapsed); {}",
                self._owner,
                won,
                ", ".join(sorted(lapsed)),
                "re-issuing them now: its store answers"
                if self._answering
                else "they are re-issued on its store's next evidence",
            )
            if self._answering:
                self._adopted.on_next(won)
        return won

    async def _renew_forever(self) -> None:
        # A liveness timer: it says this replica is alive and notices one that is not. It never
        # asks the store anything.
        while not self._closed:
            await asyncio.sleep(self._lease_ttl / 3)
            await self.renew_lease()
            try:
                await self.claim_lapsed()
            except Exception as exc:  # noqa: BLE001 - logged; the next tick tries again
                logger.opt(exception=exc).error("claiming lapsed pending writes failed: {}", exc)

    @property
    def adopted(self) -> Observable[int]:
        """Hot stream: intents were taken over from a dead replica while this replica's store
        answers; their re-issue should start now (the count taken over)."""
        subject = self._adopted

        def subscribe(
            observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            return subject.subscribe(observer, scheduler=scheduler)

        return Observable(subscribe)

    @property
    def owner(self) -> str:
        """This replica's name in the bucket."""
        return self._owner

    @property
    def bucket(self) -> str:
        """The KV bucket's name."""
        return self._bucket

    # ------------------------------------------------------------------------------ closing

    def close(self) -> None:
        """Stop recording; the rest of the shutdown is :meth:`aclose` (scheduled if not awaited)."""
        self._closed = True
        if not self._loop.is_closed():
            self._spawn(self.aclose(), "closing the JetStream ledger")

    async def aclose(self, *, release: bool = True) -> None:
        """Stop the lease timer and the watch, let settled entries' deletes finish, and
        (``release``) delete this replica's lease so others take over its intents at once.
        Intents it still owns stay in the bucket. Idempotent."""
        self._closed = True
        if self._renewing is not None:
            self._renewing.cancel()
        pending = [task for task in self._tasks if task is not asyncio.current_task()]
        if pending:
            await asyncio.wait(pending, timeout=self._timeout)
        if self._watcher is not None:
            watcher, self._watcher = self._watcher, None
            try:
                await watcher.stop()
            except Exception as exc:  # noqa: BLE001 - closing: nothing depends on it
                logger.debug("stopping the JetStream watch failed: {}", exc)
        if self._watching is not None:
            self._watching.cancel()
        if release and not getattr(self._client, "is_closed", True):
            try:
                await self._kv.delete(f"lease.{self._owner}")
            except Exception as exc:  # noqa: BLE001 - the lease lapses by itself
                logger.debug("releasing the lease of {} failed: {}", self._owner, exc)
        if self._owns_client and not getattr(self._client, "is_closed", True):
            try:
                await self._client.close()
            except Exception as exc:  # noqa: BLE001 - the server went away: closed all the same
                logger.debug("closing the NATS connection of {} failed: {}", self._owner, exc)
