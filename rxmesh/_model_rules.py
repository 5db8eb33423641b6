# kept until rxmesh/mesh/_core and rxmesh/providers/_feed are updated
from rxmesh.model._rules import *  # noqa: F403
from rxmesh.model._rules import PLAIN_PATH as PLAIN_PATH
