# kept until rxmesh/providers/postgres and rxmesh/mesh/_pending is updated
from rxmesh._util.collector import *  # noqa: F403
