"""rxmesh: a reactive data mesh on RxPY that answers honestly when its store cannot be reached.

The names here are what a program needs to start: the mesh, its nodes, queries and requests, the
two stores and the errors a node operation raises. They are imported lazily, so ``import rxmesh``
stays cheap and never needs asyncpg (``PostgresStore`` imports it when first touched).

The layout, top to bottom (docs/architecture.md draws it and says which way imports point):
``rxmesh.mesh`` the node operations; ``rxmesh.ledger`` pending writes; ``rxmesh.cache`` the
synced-query cache; ``rxmesh.operators`` the retry ladder and fan-in; ``rxmesh.providers`` the
stores. Under them all: ``faults`` (the one rule), ``exceptions`` (the tree), ``model``,
``operations`` (requests, responses), ``instrumentation``. Beside the flow: ``health``,
``nodetypes`` (with its ``census`` and ``prewarm``), ``messaging``, ``diagnosis``, ``aio``,
``web`` and ``http`` (for services), ``logs`` (to the standard library's logging), ``importer``,
``drill``, ``cli``, ``testing``. A name starting with ``_`` is private
(``rxmesh._util`` holds the helpers several packages share); each public module lists in
``__all__`` what a program constructs, calls or catches, and keeps what it only receives
(statistics, reports, events) importable and documented beside them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from loguru import logger

logger.disable("rxmesh")

if TYPE_CHECKING:
    from rxmesh.exceptions import (
        InvalidNodeTypeError,
        InvalidPathError,
        NodeAccessDeniedError,
        NodeExistsError,
        NodeOperationError,
        NodeValidationError,
        NodeVersionConflictError,
        RxMeshError,
        StoreUnavailableError,
    )
    from rxmesh.http import http_status
    from rxmesh.mesh import Mesh
    from rxmesh.model import AccessContext, MeshNode, NodeQuery, QueryFrame
    from rxmesh.operations import (
        CreateNodeRequest,
        CreateNodeResponse,
        CreateNodesRequest,
        CreateNodesResponse,
        RejectionReason,
        Verdict,
    )
    from rxmesh.providers.memory import InMemoryStore
    from rxmesh.providers.postgres import PostgresStore

__all__ = [
    "AccessContext",
    "CreateNodeRequest",
    "CreateNodeResponse",
    "CreateNodesRequest",
    "CreateNodesResponse",
    "InMemoryStore",
    "InvalidNodeTypeError",
    "InvalidPathError",
    "Mesh",
    "MeshNode",
    "NodeAccessDeniedError",
    "NodeExistsError",
    "NodeOperationError",
    "NodeQuery",
    "NodeValidationError",
    "NodeVersionConflictError",
    "PostgresStore",
    "QueryFrame",
    "RejectionReason",
    "RxMeshError",
    "StoreUnavailableError",
    "Verdict",
    "http_status",
]

__version__ = "0.1.0"

_HOMES = {
    "Mesh": "rxmesh.mesh",
    "MeshNode": "rxmesh.model",
    "AccessContext": "rxmesh.model",
    "NodeQuery": "rxmesh.model",
    "QueryFrame": "rxmesh.model",
    "CreateNodeRequest": "rxmesh.operations",
    "CreateNodeResponse": "rxmesh.operations",
    "CreateNodesRequest": "rxmesh.operations",
    "CreateNodesResponse": "rxmesh.operations",
    "RejectionReason": "rxmesh.operations",
    "Verdict": "rxmesh.operations",
    "http_status": "rxmesh.http",
    "InMemoryStore": "rxmesh.providers.memory",
    "PostgresStore": "rxmesh.providers.postgres",
    # what a node operation raises (the awaitable verbs; a refusal's reason names the class)
    "RxMeshError": "rxmesh.exceptions",
    "NodeOperationError": "rxmesh.exceptions",
    "StoreUnavailableError": "rxmesh.exceptions",
    "NodeExistsError": "rxmesh.exceptions",
    "NodeVersionConflictError": "rxmesh.exceptions",
    "NodeAccessDeniedError": "rxmesh.exceptions",
    "NodeValidationError": "rxmesh.exceptions",
    "InvalidPathError": "rxmesh.exceptions",
    "InvalidNodeTypeError": "rxmesh.exceptions",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rxmesh' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
