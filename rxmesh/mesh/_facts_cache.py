"""Partition facts kept between operations, trusted only while the change feed watches them.

A create in a partition it has seen before needs no facts read: the root, the requester's grant
and the ownership record it read last time still hold, unless the change feed said otherwise.
The rules (docs/answers.md, "Partition facts between operations"):

- Only complete facts are kept (root and ownership record present, and the requester's grant or
  a system-owned partition): a partition that would be healed is always read.
- A commit the feed announces at a partition's root, ownership record or any grant drops every
  entry of that partition; a declared gap drops them all (changes may have been missed).
- Facts are kept only from the first change the cache saw through its own subscription on: a
  read that raced a change (the change arrived while the read was in flight) is not kept.
- Kept facts are used only while the store says its feed is whole
  (:func:`rxmesh.providers._store.feed_is_whole`: the embedded store always, the PostgreSQL
  store while listening, the fault injector while its feed is open); a store that cannot say
  gets no cache. The feed's error or completion turns the cache off.

The window that remains is the feed's own latency: a grant revoked by another process is
honoured from the moment its notification arrives (about a millisecond on loopback), not from
its commit. An operator who needs a revocation to be exact stops the mesh, or uses a policy that
reads its own facts (``Mesh(..., cache_partition_facts=False)``).
"""

from __future__ import annotations

from typing import Any

from loguru import logger
from reactivex import abc

from rxmesh.mesh._access import PartitionFacts, owner_path
from rxmesh.model import SYSTEM_USER, ChangeFeedGap, StoreEvidence, partition_of
from rxmesh.providers import Store
from rxmesh.providers._store import feed_is_whole

__all__ = ["FactsCache"]

def _is_fact_path(path: str) -> str | None:
    """The partition whose facts a change at ``path`` may alter, or ``None``."""
    slash = path.find("/")
    if slash > 0 and not path.startswith("_", slash + 1):
        return None  # the usual announcement: a node's own path (facts are "<p>/_...")
    partition = partition_of(path)
    if path == partition or path == owner_path(partition):
        return partition
    if path.startswith(f"{partition}/_access/"):
        return partition
    return None


class FactsCache:
    """Complete partition facts by ``(partition, user)``, dropped by the change feed."""

    def __init__(self, store: Store, *, enabled: bool = True) -> None:
        self._store = store
        self._enabled = enabled
        self._entries: dict[tuple[str, str], PartitionFacts] = {}
        self._epochs: dict[str, int] = {}
        self._gaps = 0
        self._subscriptions: list[abc.DisposableBase] = []
        self._watching = False
        self._closed = False

    def epoch(self, partition: str) -> tuple[int, int]:
        """A token to pass to :meth:`put`: what the cache had seen when a read began."""
        if not self._watching:
            self._watch()
        return self._gaps, self._epochs.get(partition, 0)

    def get(self, partition: str, user: str) -> PartitionFacts | None:
        """The kept facts, or ``None`` (never kept, dropped, or the feed not trusted now)."""
        if not self._entries:
            return None
        if not self._trusted():
            self._entries.clear()  # what the feed missed meanwhile is unknown: forget it all
            self._gaps += 1
            return None
        return self._entries.get((partition, user))

    def put(self, facts: PartitionFacts, user: str, epoch: tuple[int, int]) -> None:
        """Keep ``facts`` read for ``user`` if complete and nothing changed since ``epoch``."""
        if epoch != (self._gaps, self._epochs.get(facts.partition, 0)) or not self._trusted():
            return
        if facts.root is None or facts.owner_record is None:
            return
        if facts.grant is None and not facts.system_owned and user != SYSTEM_USER:
            return
        self._entries[(facts.partition, user)] = facts

    def close(self) -> None:
        """Stop watching and forget every entry."""
        self._closed = True
        self._off()

    # ------------------------------------------------------------------ the feed

    def _trusted(self) -> bool:
        return self._watching and feed_is_whole(self._store)

    def _watch(self) -> None:
        if not self._enabled or self._closed:
            return
        try:
            # Announced commits carry the path and no row: watching them costs the store no
            # fetch (its ``changes`` stream reads each changed row back).
            evidence = self._store.answers_again.subscribe(
                self._on_evidence, self._on_end, self._on_end
            )
        except Exception as exc:  # noqa: BLE001 - no feed: facts are always read
            logger.bind(event="facts_cache_off").debug("no change feed to watch: {}", exc)
            self._enabled = False
            return
        self._subscriptions = [evidence]
        self._watching = True

    def _on_evidence(self, evidence: StoreEvidence) -> None:
        if isinstance(evidence, ChangeFeedGap):
            self._gaps += 1
            self._entries.clear()
            return
        partition = _is_fact_path(evidence.path)
        if partition is None:
            return
        self._epochs[partition] = self._epochs.get(partition, 0) + 1
        if self._entries:
            for key in [key for key in self._entries if key[0] == partition]:
                del self._entries[key]

    def _on_end(self, *_: Any) -> None:
        self._enabled = False  # a feed that ended watches nothing: read the facts from now on
        self._off()

    def _off(self) -> None:
        self._watching = False
        self._entries.clear()
        subscriptions, self._subscriptions = self._subscriptions, []
        for subscription in subscriptions:
            subscription.dispose()
