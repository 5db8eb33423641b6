"""An import path kept for :mod:`rxmesh.nodetypes.census`, where the live record census lives.

Every name here is :mod:`rxmesh.nodetypes.census`'s own; import it from there.
"""

from rxmesh.nodetypes.census import CENSUS_QUERY as CENSUS_QUERY
from rxmesh.nodetypes.census import CensusHealth as CensusHealth
from rxmesh.nodetypes.census import CensusStatistics as CensusStatistics
from rxmesh.nodetypes.census import LiveRecordCensus as LiveRecordCensus
from rxmesh.nodetypes.census import QuerySource as QuerySource
from rxmesh.nodetypes.census import describe_chain as describe_chain

__all__: list[str] = []  # the names are exported by their home only
