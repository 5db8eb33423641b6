# kept until rxmesh/providers/postgres is updated
from rxmesh._util.path_order import *  # noqa: F403
