"""Update, delete and move: each reads before it heals, and ends in the same terminal arm.

Every read comes first (the node, the partition's facts, a move's target partition) and only
then a heal: a refused verb writes nothing. A partition seen new authorises no verb on a node
there (``absent`` is the "no node" refusal, from that snapshot).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from rxmesh.exceptions import NodeExistsError, NodeValidationError, StoreConflictError
from rxmesh.mesh._answer import Attempt, AttemptFacts, TerminalArm
from rxmesh.mesh._bootstrap import Partitions
from rxmesh.mesh._core import MeshCore
from rxmesh.model import MeshNode, partition_of, validate_path
from rxmesh.operations import (
    DeleteNodeRequest,
    MoveNodeRequest,
    NodeOperationResponse,
    UpdateNodeRequest,
)

__all__ = ["Verbs"]

_Run = Callable[[AttemptFacts], Awaitable[MeshNode | None]]


class Verbs:
    """One mesh's update, delete and move."""

    def __init__(self, core: MeshCore, partitions: Partitions, arm: TerminalArm) -> None:
        self._core = core
        self._partitions = partitions
        self._arm = arm

    def _attempt(
        self, request_id: str, operation: str, doing: str, path: str, run: _Run
    ) -> Callable[[], Attempt[NodeOperationResponse]]:
        """Per subscription, fresh facts; ``run(facts)`` does the work, appending to
        ``facts.heals`` the system records it wrote (so an UNAVAILABLE answer can name them)."""
        arm = self._arm

        def attempt() -> Attempt[NodeOperationResponse]:
            facts = AttemptFacts(operation, doing, path, request_id)

            async def answer() -> NodeOperationResponse:
                node = await run(facts)
                return NodeOperationResponse(request_id=request_id, success=True, node=node)

            return (
                answer,
                lambda exc: arm.answer(NodeOperationResponse, exc, facts),
                lambda: arm.backstop(NodeOperationResponse, facts),
            )

        return attempt

    def update(self, req: UpdateNodeRequest) -> Callable[[], Attempt[NodeOperationResponse]]:
        """Replace the type/content of an existing node."""
        core, node = self._core, req.node

        async def run(facts: AttemptFacts) -> MeshNode | None:
            validate_path(node.path)  # reserved records are not updated, not even by the system
            access = core.requester(req.access, node)
            core.fail_fast(node, access)
            missing = f"no node at '{node.path}' to update"
            if await core.ask("read", node.path) is None:
                raise NodeValidationError(missing, path=node.path)
            await self._partitions.authorise(
                node.partition, access, "update", creating=node.path, absent=missing
            )
            core.validate_content(node, access)
            updated: MeshNode | None = await core.ask("update", node)
            if updated is None:
                raise NodeValidationError(missing, path=node.path)
            return updated

        return self._attempt(
            req.request_id, f"Node update at '{node.path}'", "updating", node.path, run
        )

    def delete(self, req: DeleteNodeRequest) -> Callable[[], Attempt[NodeOperationResponse]]:
        """Delete a node (not its children)."""
        core, path = self._core, req.path

        async def run(facts: AttemptFacts) -> MeshNode | None:
            access = core.requester(req.access, None)
            missing = f"no node at '{path}' to delete"
            await self._partitions.authorise(
                partition_of(path), access, "delete", creating=path, absent=missing
            )
            if not await core.ask("delete", path):
                raise NodeValidationError(missing, path=path)
            return None

        return self._attempt(req.request_id, f"Node deletion at '{path}'", "deleting", path, run)

    def move(self, req: MoveNodeRequest) -> Callable[[], Attempt[NodeOperationResponse]]:
        """Move a node to a free path."""
        core, source, target = self._core, req.source, req.target

        async def run(facts: AttemptFacts) -> MeshNode | None:
            access = core.requester(req.access, None)
            source_partition, target_partition = partition_of(source), partition_of(target)
            missing = f"no node at '{source}' to move"
            await self._partitions.authorise(
                source_partition, access, "move", creating=target, absent=missing
            )
            if await core.ask("read", source) is None:
                raise NodeValidationError(missing, path=source)
            if target_partition != source_partition:
                partition = await self._partitions.authorise(
                    target_partition, access, "move", creating=target
                )
                await self._partitions.heal(
                    partition, access, "move", creating=target, heals=facts.heals
                )
            try:
                moved: MeshNode | None = await core.ask("move", source, target)
            except StoreConflictError as exc:
                raise NodeExistsError(f"a node already exists at '{target}'", path=target) from exc
            if moved is None:
                raise NodeValidationError(missing, path=source)
            return moved

        return self._attempt(
            req.request_id, f"Node move from '{source}' to '{target}'", "moving", source, run
        )
