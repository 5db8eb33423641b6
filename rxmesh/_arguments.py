# kept until rxmesh/mesh/_mesh is updated
from rxmesh._util.arguments import *  # noqa: F403
