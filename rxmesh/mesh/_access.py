"""Access: grants and ownership records kept in the store, and the policy that reads them.

A partition ``P`` keeps its system records beside its nodes:

- ``P/_owner`` — the ownership record, content ``{"owner": "<user>"}`` (``"system"`` for a
  system-owned partition);
- ``P/_access/<user>`` — a grant, content ``{"permissions": ["create", "update", ...]}`` or
  ``["*"]`` for every verb.

The policy decides from these facts; the mesh reads them (and every read fault propagates:
a failed read is never an absent record).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rxmesh.model import SYSTEM_USER, AccessContext, MeshNode

__all__ = [
    "VERBS",
    "AccessPolicy",
    "GrantPolicy",
    "PartitionFacts",
    "grant_path",
    "owner_of",
    "owner_path",
    "permissions_of",
]

VERBS = ("create", "update", "delete", "move")
"""The verbs a grant can name."""


def grant_path(partition: str, user: str) -> str:
    """Where a user's grant for ``partition`` lives."""
    return f"{partition}/_access/{user}"


def owner_path(partition: str) -> str:
    """Where the ownership record of ``partition`` lives."""
    return f"{partition}/_owner"


def owner_of(record: MeshNode | None) -> str | None:
    """The owner named by an ownership record, or ``None``."""
    if record is None or not isinstance(record.content, dict):
        return None
    owner = record.content.get("owner")
    return owner if isinstance(owner, str) else None


def permissions_of(grant: MeshNode | None) -> frozenset[str]:
    """The verbs a grant node allows (``"*"`` means all)."""
    if grant is None or not isinstance(grant.content, dict):
        return frozenset()
    permissions = grant.content.get("permissions")
    if not isinstance(permissions, list):
        return frozenset()
    return frozenset(p for p in permissions if isinstance(p, str))


@dataclass(frozen=True)
class PartitionFacts:
    """What the mesh read about a partition before acting in it (all three read together)."""

    partition: str
    root: MeshNode | None
    grant: MeshNode | None
    owner_record: MeshNode | None

    @property
    def owner(self) -> str | None:
        """The partition's owner, or ``None`` when no ownership record exists."""
        return owner_of(self.owner_record)

    @property
    def is_new(self) -> bool:
        """True when neither the root nor an ownership record exists (clean reads)."""
        return self.root is None and self.owner_record is None

    @property
    def system_owned(self) -> bool:
        """True when the partition belongs to the system identity."""
        return self.owner == SYSTEM_USER


class AccessPolicy(Protocol):
    """Decides whether a requester may act; consulted after the facts were read."""

    def may(self, access: AccessContext, verb: str, facts: PartitionFacts) -> bool:
        """Whether ``access`` may perform ``verb`` in the partition described by ``facts``."""
        ...

    def may_open_partition(self, access: AccessContext, partition: str) -> bool:
        """Whether ``access`` may create a new partition (and so become its owner)."""
        ...


class GrantPolicy:
    """The default policy: the system may do anything; an owner may do anything in its partition;
    others need a grant naming the verb (or ``"*"``).

    Args:
        open_partitions: whether any named user may open a new partition (becoming its owner).
    """

    def __init__(self, *, open_partitions: bool = True) -> None:
        self.open_partitions = open_partitions

    def may(self, access: AccessContext, verb: str, facts: PartitionFacts) -> bool:
        """See :class:`AccessPolicy`."""
        if access.is_system or (facts.owner is not None and facts.owner == access.user):
            return True
        allowed = permissions_of(facts.grant)
        return "*" in allowed or verb in allowed

    def may_open_partition(self, access: AccessContext, partition: str) -> bool:
        """See :class:`AccessPolicy`."""
        return access.is_system or self.open_partitions
