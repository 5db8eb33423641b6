"""A partition's bootstrap: read its facts, authorise a verb on them, heal a clean absence.

Three rules, each load-bearing (docs/answers.md):

1. The facts (root, the requester's grant, the ownership record) are read in one store call, one
   snapshot: a concurrent heal is seen whole or not at all. Every read fault propagates; nothing
   is healed after a failed read.
2. A partition seen new authorises nothing but its own claim: a verb that needs an existing node
   there is answered "no node" from that snapshot, whatever another request creates later.
3. The claim is re-read, never assumed: another user may have opened the partition in between.

Complete facts are kept between operations while the change feed watches them
(:class:`~rxmesh.mesh._facts_cache.FactsCache`): a create in a known partition reads nothing.
"""

from __future__ import annotations

from loguru import logger

from rxmesh.exceptions import NodeAccessDeniedError, NodeValidationError, StoreConflictError
from rxmesh.mesh._access import PartitionFacts, grant_path, owner_path
from rxmesh.mesh._core import MeshCore, now
from rxmesh.mesh._facts_cache import FactsCache
from rxmesh.model import SYSTEM_USER, AccessContext, MeshNode

__all__ = ["Partitions"]


class Partitions:
    """The bootstrap of one mesh's partitions (see the module docstring for its rules)."""

    def __init__(self, core: MeshCore, cache: FactsCache) -> None:
        self._core = core
        self._cache = cache

    def cached(self, partition: str, user: str) -> PartitionFacts | None:
        """The facts kept for ``user`` in ``partition`` (see the cache's rules), or ``None``."""
        return self._cache.get(partition, user)

    async def facts(
        self, partition: str, user: str, *also: str
    ) -> tuple[PartitionFacts, dict[str, MeshNode]]:
        """Root, grant and ownership record — and the paths ``also`` names — read together in
        one store call (one snapshot); every read fault propagates. Returns the facts and every
        node found."""
        root, grant, owner = partition, grant_path(partition, user), owner_path(partition)
        epoch = self._cache.epoch(partition)
        found: dict[str, MeshNode] = await self._core.ask("read_many", [*also, root, grant, owner])
        facts = PartitionFacts(partition, found.get(root), found.get(grant), found.get(owner))
        self._cache.put(facts, user, epoch)
        return facts, found

    async def write_system(self, node: MeshNode, heals: list[str]) -> None:
        """Write a system record; a record already there counts as success (a heal race).

        A record this attempt did write is appended to ``heals``: an answer that would say
        "Nothing was written" names it instead.
        """
        stamped = node.model_copy(
            update={"created_by": SYSTEM_USER, "created_at": now(), "version": 1}
        )
        try:
            await self._core.ask("write", stamped)
        except StoreConflictError:
            logger.bind(path=node.path).debug("system record '{}' already exists", node.path)
            return
        heals.append(node.path)

    async def bootstrap(
        self,
        partition: str,
        access: AccessContext,
        verb: str,
        *,
        creating: str | None,
        heals: list[str],
        heal: bool = True,
        absent: str | None = None,
        facts: PartitionFacts | None = None,
    ) -> PartitionFacts:
        """Authorise ``verb`` in ``partition`` and, with ``heal``, heal a clean absence."""
        facts = await self.authorise(
            partition, access, verb, creating=creating, absent=absent, facts=facts
        )
        if heal:
            facts = await self.heal(facts, access, verb, creating=creating, heals=heals)
        return facts

    async def authorise(
        self,
        partition: str,
        access: AccessContext,
        verb: str,
        *,
        creating: str | None,
        absent: str | None = None,
        facts: PartitionFacts | None = None,
    ) -> PartitionFacts:
        """Read the partition's facts (unless ``facts`` were just read) and decide; writes
        nothing (every read fault propagates).

        A partition seen new authorises nothing but its own claim (:meth:`heal`): a verb that
        needs an existing node there (``absent`` is its refusal) is answered "no node" from this
        snapshot. Deciding it on the policy's "may open a partition" would let a user with no
        rights act on a node another user creates in the partition meanwhile.

        Raises :class:`NodeAccessDeniedError` when the policy refuses ``verb``.
        """
        if facts is None:
            facts = self._cache.get(partition, access.user)
        if facts is None:
            facts, _ = await self.facts(partition, access.user)
        if facts.is_new:
            if absent is not None:
                raise NodeValidationError(absent, path=creating)
            if not self._core.policy.may_open_partition(access, partition):
                raise NodeAccessDeniedError(
                    f"'{access.user}' may not open the new partition '{partition}'",
                    path=creating,
                )
            return facts
        self.check_may(facts, access, verb, creating)
        return facts

    def check_may(
        self, facts: PartitionFacts, access: AccessContext, verb: str, creating: str | None
    ) -> None:
        """Refuse ``verb`` (FORBIDDEN) unless the policy allows it on ``facts``."""
        if not self._core.policy.may(access, verb, facts):
            raise NodeAccessDeniedError(
                f"'{access.user}' holds no grant to {verb} in partition '{facts.partition}'",
                path=creating,
            )

    async def heal(
        self,
        facts: PartitionFacts,
        access: AccessContext,
        verb: str,
        *,
        creating: str | None,
        heals: list[str],
    ) -> PartitionFacts:
        """Heal what a clean read found absent (never after a failed read: the read raised):
        claim a new partition and re-read its facts, then the root and the requester's grant."""
        partition = facts.partition
        if facts.is_new:
            await self.write_system(
                MeshNode(
                    path=owner_path(partition), node_type="Owner", content={"owner": access.user}
                ),
                heals,
            )
            # Read the facts again rather than assume the claim won: another user may have opened
            # the partition in between (their ownership record stands; ours was refused as
            # "already exists"), and must not be handed a grant in someone else's partition.
            facts, _ = await self.facts(partition, access.user)
            self.check_may(facts, access, verb, creating)
        if facts.root is None and creating != partition:
            await self.write_system(
                MeshNode(path=partition, node_type="Partition", content={}), heals
            )
        if facts.grant is None and not facts.system_owned and not access.is_system:
            await self.write_system(
                MeshNode(
                    path=grant_path(partition, access.user),
                    node_type="Grant",
                    content={"permissions": ["*"]},
                ),
                heals,
            )
        return facts
