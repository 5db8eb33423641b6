"""rxmesh: a reactive data mesh on RxPY that answers honestly when its store cannot be reached.

The names below are imported lazily, so ``import rxmesh`` stays cheap and never needs asyncpg.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from loguru import logger

logger.disable("rxmesh")

if TYPE_CHECKING:
    from rxmesh.http import http_status
    from rxmesh.mesh import Mesh
    from rxmesh.model import AccessContext, MeshNode
    from rxmesh.operations import (
        CreateNodeRequest,
        CreateNodeResponse,
        CreateNodesRequest,
        CreateNodesResponse,
        RejectionReason,
        Verdict,
    )

__all__ = [
    "AccessContext",
    "CreateNodeRequest",
    "CreateNodeResponse",
    "CreateNodesRequest",
    "CreateNodesResponse",
    "Mesh",
    "MeshNode",
    "RejectionReason",
    "Verdict",
    "http_status",
]

__version__ = "0.1.0"

_HOMES = {
    "Mesh": "rxmesh.mesh",
    "MeshNode": "rxmesh.model",
    "AccessContext": "rxmesh.model",
    "CreateNodeRequest": "rxmesh.operations",
    "CreateNodeResponse": "rxmesh.operations",
    "CreateNodesRequest": "rxmesh.operations",
    "CreateNodesResponse": "rxmesh.operations",
    "RejectionReason": "rxmesh.operations",
    "Verdict": "rxmesh.operations",
    "http_status": "rxmesh.http",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rxmesh' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
