"""What every job of the mesh works with: the shared core, the partitions' bootstrap, the
pending writes and the one terminal arm (the create, the bulk and the verbs are jobs)."""

from __future__ import annotations

from rxmesh.mesh._answer import TerminalArm
from rxmesh.mesh._bootstrap import Partitions
from rxmesh.mesh._core import MeshCore
from rxmesh.mesh._pending import PendingWrites

__all__ = ["Job"]


class Job:
    """A job of one mesh, over the pieces that mesh built once."""

    def __init__(
        self, core: MeshCore, partitions: Partitions, pending: PendingWrites, arm: TerminalArm
    ) -> None:
        self._core = core
        self._partitions = partitions
        self._pending = pending
        self._arm = arm
