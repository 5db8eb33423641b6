"""An import path kept for :mod:`rxmesh.nodetypes.census`, where the live record census lives.

Every name here is :mod:`rxmesh.nodetypes.census`'s own; import it from there.
"""

from rxmesh.nodetypes.census import (
    CENSUS_QUERY,
    CensusHealth,
    CensusStatistics,
    LiveRecordCensus,
    QuerySource,
    describe_chain,
)

__all__ = [
    "CENSUS_QUERY",
    "CensusHealth",
    "CensusStatistics",
    "LiveRecordCensus",
    "QuerySource",
    "describe_chain",
]
