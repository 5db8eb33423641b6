# kept until rxmesh/providers/postgres and rxmesh/mesh/_core is updated
from rxmesh._util.trusted import *  # noqa: F403
