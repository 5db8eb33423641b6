"""The mesh: node operations that answer honestly, and the access rules they consult."""

from __future__ import annotations

from rxmesh.mesh._access import (
    VERBS,
    AccessPolicy,
    GrantPolicy,
    PartitionFacts,
    grant_path,
    owner_path,
)
from rxmesh.mesh._mesh import Mesh, NodeTypeValidator, Validator

__all__ = [
    "VERBS",
    "AccessPolicy",
    "GrantPolicy",
    "Mesh",
    "NodeTypeValidator",
    "PartitionFacts",
    "Validator",
    "grant_path",
    "owner_path",
]
