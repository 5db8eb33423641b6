"""What every job of the mesh is: the work behind one kind of attempt, over what every job works
with (the shared core, the partitions' bootstrap, the pending writes and the one terminal arm).

A job (the create, the bulk, the update, the delete, the move) says how its attempt runs and what
its failure answer needs: what its writes did (:meth:`Job.landing`), the intent an unreachable
attempt records (:meth:`Job.record`) and what a judged answer settles (:meth:`Job.settle`). Its
attempt is an :class:`~rxmesh.mesh._answer.Attempt`, and every fault goes to the terminal arm.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Generic, TypeVar

from rxmesh.mesh._answer import Attempt
from rxmesh.mesh._arms import NOTHING_LANDED, AttemptFacts, Landing, TerminalArm
from rxmesh.mesh._bootstrap import Partitions
from rxmesh.mesh._core import MeshCore
from rxmesh.mesh._pending import PendingWrites
from rxmesh.operations import NodeResponse

__all__ = ["Job"]

Q = TypeVar("Q")
F = TypeVar("F", bound=AttemptFacts)
R = TypeVar("R", bound=NodeResponse)


class Job(Generic[Q, F, R]):
    """A job of one mesh, over the pieces that mesh built once; ``kind`` is its answer's type.

    A subclass defines :meth:`facts`, :meth:`run`, :meth:`record` and :meth:`settle` (and
    :meth:`landing` when its writes can land in part)."""

    kind: type[R]

    def __init__(
        self, core: MeshCore, partitions: Partitions, pending: PendingWrites, arm: TerminalArm
    ) -> None:
        self._core = core
        self._partitions = partitions
        self._pending = pending
        self._arm = arm

    def attempt(self, request: Q) -> Attempt[R]:
        """A fresh attempt of ``request`` (its own facts), for one subscription or one await."""
        return Attempt(self, request, self.facts(request))

    def facts(self, request: Q) -> F:
        """A fresh attempt's facts."""
        raise NotImplementedError

    def run(self, request: Q, facts: F) -> Awaitable[R]:
        """Do the work; the success answer (a refusal or a fault raises)."""
        raise NotImplementedError

    def fault(self, request: Q, facts: F, exc: BaseException) -> Awaitable[R]:
        """The answer to ``exc``: the terminal arm's, never a retry."""
        return self._arm.answer(self, request, facts, exc)

    def backstop(self, facts: F) -> R:
        """The answer of a run that completed without one (a defect)."""
        return self._arm.backstop(self.kind, facts)

    async def landing(self, request: Q, facts: F, exc: BaseException) -> Landing:
        """What this attempt's writes did, for its failure answer: nothing to add by default."""
        return NOTHING_LANDED

    async def record(self, request: Q, facts: F) -> tuple[str, dict[str, Any]]:
        """Record an unreachable attempt's intent; the answer's note and fields."""
        raise NotImplementedError

    def settle(self, request: Q, response: R) -> None:
        """Settle the outstanding intent the judged answer ``response`` keeps."""
        raise NotImplementedError
