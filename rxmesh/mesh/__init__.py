"""The mesh: node operations that answer honestly, and the access rules they consult.

The layout (one module per job; docs/architecture.md draws it): ``_mesh`` the facade;
``_requests`` parsing; ``_create``, ``_bulk`` and ``_verbs`` the jobs, on ``_job``; ``_answer``
the one attempt shape, driven to one answer; ``_arms`` the terminal arm; ``_pending`` recording
and settling intents; ``_bootstrap`` and ``_facts_cache`` a partition's facts; ``_access`` grants
and ownership; ``_core`` what every job shares, the store's one door among it; ``_watch`` the
re-opened live query; ``_in_process`` the awaitable verbs' request and error.
"""

from __future__ import annotations

from rxmesh.mesh._access import (
    VERBS as VERBS,
)
from rxmesh.mesh._access import AccessPolicy as AccessPolicy
from rxmesh.mesh._access import GrantPolicy, grant_path, owner_path
from rxmesh.mesh._access import (
    PartitionFacts as PartitionFacts,
)
from rxmesh.mesh._mesh import Mesh
from rxmesh.mesh._mesh import NodeTypeValidator as NodeTypeValidator
from rxmesh.mesh._mesh import Validator as Validator

__all__ = [
    "GrantPolicy",
    "Mesh",
    "grant_path",
    "owner_path",
]
