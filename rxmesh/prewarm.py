"""An import path kept for :mod:`rxmesh.nodetypes.prewarm`, where the pre-warm sweep lives.

Every name here is :mod:`rxmesh.nodetypes.prewarm`'s own; import it from there (the exceptions
the sweep raises are in :mod:`rxmesh.exceptions`).
"""

from rxmesh.nodetypes.prewarm import (
    BUILD_WITNESS_NODE_TYPE,
    BUILD_WITNESS_PREFIX,
    PREWARM_QUERY,
    PreWarmer,
    PreWarmResult,
    StoreBuildWitness,
    default_holder,
    proceed_locally,
)

__all__ = [
    "BUILD_WITNESS_NODE_TYPE",
    "BUILD_WITNESS_PREFIX",
    "PREWARM_QUERY",
    "PreWarmResult",
    "PreWarmer",
    "StoreBuildWitness",
    "default_holder",
    "proceed_locally",
]
