"""An import path kept for :mod:`rxmesh.nodetypes.prewarm`, where the pre-warm sweep lives.

Every name here is :mod:`rxmesh.nodetypes.prewarm`'s own; import it from there (the exceptions
the sweep raises are in :mod:`rxmesh.exceptions`).
"""

from rxmesh.nodetypes.prewarm import BUILD_WITNESS_NODE_TYPE as BUILD_WITNESS_NODE_TYPE
from rxmesh.nodetypes.prewarm import BUILD_WITNESS_PREFIX as BUILD_WITNESS_PREFIX
from rxmesh.nodetypes.prewarm import PREWARM_QUERY as PREWARM_QUERY
from rxmesh.nodetypes.prewarm import PreWarmer as PreWarmer
from rxmesh.nodetypes.prewarm import PreWarmResult as PreWarmResult
from rxmesh.nodetypes.prewarm import StoreBuildWitness as StoreBuildWitness
from rxmesh.nodetypes.prewarm import default_holder as default_holder
from rxmesh.nodetypes.prewarm import proceed_locally as proceed_locally

__all__: list[str] = []  # the names are exported by their home only
