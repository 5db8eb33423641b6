"""The single create, top to bottom.

1. Store-free checks: the requester, then the path (with the requester's reserved rights), the
   type/content presence and size.
2. In a partition whose complete facts are kept (the change feed watches them), no read at all:
   the policy and the content rules decide on the kept facts, and the INSERT's conflict is the
   existence check (a refusal first reads the path, as "already exists" outranks it).
   Otherwise one read: the existence check and the partition's facts together (one round trip, one
   snapshot). A row of this very request is an ambiguous commit that landed: answered created.
   Any other row: NODE_ALREADY_EXISTS, which outranks every later refusal.
3. The content rules (no store), then the partition's bootstrap: a permission refusal outranks a
   content refusal, and bad content heals nothing.
4. The write, through the ladder; each failed try is judged for the arm (may it have landed?).

A fault anywhere goes to the terminal arm (:class:`~rxmesh.mesh._arms.TerminalArm`), which
records the intent when the store was away (:meth:`Create.record`).
"""

from __future__ import annotations

from rxmesh.exceptions import (
    NodeAccessDeniedError,
    NodeExistsError,
    NodeValidationError,
    StoreConflictError,
)
from rxmesh.mesh._access import PartitionFacts
from rxmesh.mesh._arms import AttemptFacts
from rxmesh.mesh._core import now, stamp
from rxmesh.mesh._job import Job
from rxmesh.model import AccessContext, MeshNode
from rxmesh.operations import CreateNodeRequest, CreateNodeResponse

__all__ = ["Create", "operation_of"]


def operation_of(req: CreateNodeRequest) -> str:
    """The subject of a create's answer text."""
    return f"Node creation at '{req.node.path}'"


class Create(Job[CreateNodeRequest, AttemptFacts, CreateNodeResponse]):
    """One mesh's single create."""

    kind = CreateNodeResponse

    def facts(self, req: CreateNodeRequest) -> AttemptFacts:
        return AttemptFacts(operation_of(req), "creating", req.node.path, req.request_id)

    async def run(self, req: CreateNodeRequest, facts: AttemptFacts) -> CreateNodeResponse:
        node = await self._create(req, facts)
        self._core.created.on_next(node)
        response = CreateNodeResponse.created(req.request_id, node)
        self._pending.settle_by_answer(req, req.node, response)
        return response

    async def record(
        self, req: CreateNodeRequest, facts: AttemptFacts
    ) -> tuple[str, dict[str, object]]:
        if req.reissued_after_unavailable:  # a re-issue is never recorded again
            return "", {}
        access = self._core.requester_or_none(req.access, req.node)
        outcome = await self._pending.record(req.node, access, req.request_id, "create")
        return outcome.note, {"recorded_for_reissue": outcome.recorded}

    def settle(self, req: CreateNodeRequest, response: CreateNodeResponse) -> None:
        self._pending.settle_by_answer(req, req.node, response)

    async def _create(self, req: CreateNodeRequest, facts: AttemptFacts) -> MeshNode:
        core, node = self._core, req.node
        access = core.requester(req.access, node)
        core.fail_fast(node, access)
        known = self._partitions.cached(node.partition, access.user)
        if known is not None:
            return await self._create_known(req, access, known, facts)
        partition, found = await self._partitions.facts(node.partition, access.user, node.path)
        existing = found.get(node.path)
        if existing is not None:
            return _exists(req, existing)
        content_error: NodeValidationError | None = None
        try:
            core.validate_content(node, access)
        except NodeValidationError as exc:
            content_error = exc
        await self._partitions.bootstrap(
            node.partition,
            access,
            "create",
            creating=node.path,
            heals=facts.heals,
            heal=content_error is None,
            facts=partition,
        )
        if content_error is not None:
            raise content_error
        return await self._write(req, access, facts)

    async def _create_known(
        self,
        req: CreateNodeRequest,
        access: AccessContext,
        known: PartitionFacts,
        facts: AttemptFacts,
    ) -> MeshNode:
        """A create in a partition whose complete facts are kept: no facts read, and the
        INSERT's conflict is the existence check. A refusal that "already exists" would outrank
        reads the path first, so the answer is the one a fresh read would give."""
        node = req.node
        try:
            self._partitions.check_may(known, access, "create", node.path)
            self._core.validate_content(node, access)
        except (NodeAccessDeniedError, NodeValidationError):
            existing: MeshNode | None = await self._core.ask("read", node.path)
            if existing is not None:
                return _exists(req, existing)
            raise
        return await self._write(req, access, facts)

    async def _write(
        self, req: CreateNodeRequest, access: AccessContext, facts: AttemptFacts
    ) -> MeshNode:
        """The INSERT, through the ladder; a row already there is read to tell whose it is. Each
        failed try is told to the facts: may this write have landed?"""
        core, node = self._core, req.node
        stamped = stamp(node, access.user, now(), req.request_id)
        try:
            written: MeshNode = await core.ask("write", stamped, failed=facts.write_failed)
            return written
        except StoreConflictError as exc:
            existing: MeshNode | None = await core.ask("read", node.path)
            if existing is not None and existing.request_id == req.request_id:
                return existing  # an ambiguous commit of this very request, seen by its retry
            raise NodeExistsError(
                f"a node already exists at '{node.path}' (written by another request)",
                path=node.path,
            ) from exc


def _exists(req: CreateNodeRequest, existing: MeshNode) -> MeshNode:
    """A row at the path: this request's own (an ambiguous commit that landed), else a refusal."""
    if existing.request_id == req.request_id:
        return existing
    raise NodeExistsError(f"a node already exists at '{req.node.path}'", path=req.node.path)
