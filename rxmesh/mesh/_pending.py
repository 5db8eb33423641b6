"""Pending writes: record an UNAVAILABLE create for one re-issue, and settle an intent the
moment the same request is answered by the store.

Recording can never prevent the answer: whatever it raises is logged and told in the answer's
text (and the response's ``recorded_for_reissue`` / ``not_recorded`` fields). An intent is a
promise to re-issue a request that got no answer: once the same request (its requester, path,
request id and verb) is answered — created, or judged — the promise is kept and the intent
settled, so a later re-issue cannot resurrect a node the caller deleted meanwhile.
Anyone else's answer, whatever request id it carries, settles nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from loguru import logger

from rxmesh._util.collector import collector_paused
from rxmesh.exceptions import JournalError, PendingWriteHeldError
from rxmesh.ledger import Answer, PendingWrite, RecordResult, outcome_of
from rxmesh.mesh._core import MeshCore
from rxmesh.model import AccessContext, MeshNode
from rxmesh.operations import (
    CreateNodeRequest,
    CreateNodeResponse,
    CreateNodesRequest,
    CreateNodesResponse,
    DeleteNodeRequest,
    MoveNodeRequest,
    RejectionReason,
    UpdateNodeRequest,
)

__all__ = ["PendingWrites", "Recorded", "requester_of"]

_VerbRequest = UpdateNodeRequest | DeleteNodeRequest | MoveNodeRequest


@dataclass(frozen=True)
class Recorded:
    """What recording an UNAVAILABLE create did: recorded or not, the answer's note, and why not."""

    recorded: bool
    note: str
    why_not: str = ""


_AN = {"create": "a", "update": "an", "delete": "a", "move": "a"}
_INTENTS_PER_STEP = 500
"""Intents of a bulk built per loop step (each a validated model): a large bulk's recording
never holds the loop for long."""

_RECORDED = Recorded(True, "")
"""Recorded, nothing to add to the answer: one instance for every such intent (a 10,000-node
bulk's results are read back in one loop step, after the journal's durable step)."""

_OFF = Recorded(
    False,
    " It will not be re-issued by rxmesh: this mesh does not record pending writes.",
    "this mesh does not record pending writes",
)


def requester_of(access: AccessContext | None, node: MeshNode | None) -> str:
    """Who an intent is recorded for (and whose own re-issue alone settles it)."""
    if access is not None:
        return access.user
    return (node.created_by if node is not None else None) or "unknown"


class PendingWrites:
    """One mesh's recording and settling of pending writes, over its ledger."""

    def __init__(self, core: MeshCore) -> None:
        self._core = core

    def _intent(
        self,
        node: MeshNode,
        access: AccessContext | None,
        request_id: str,
        origin: Literal["create", "create_nodes"],
    ) -> PendingWrite:
        return PendingWrite(
            node=node,
            requester=requester_of(access, node),
            access=access,
            request_id=request_id,
            origin=origin,
        )

    def _refused(
        self,
        exc: BaseException,
        node: MeshNode,
        request_id: str,
        *,
        log: bool,
        verb: str = "create",
    ) -> Recorded:
        """Why an intent was not recorded, told in the answer (and logged, with ``log``)."""
        path = node.path
        if isinstance(exc, PendingWriteHeldError):
            if log:
                logger.bind(event="pending_write_held", path=path, request_id=request_id).warning(
                    "pending write for '{}' (request {}) not recorded: {}", path, request_id, exc
                )
            return Recorded(
                False,
                f" It will not be re-issued by rxmesh: {_AN[verb]} {verb} of this path by another "
                "requester is already pending; re-issue this request yourself once the store "
                "answers again.",
                f"another requester's {verb} of this path is already pending",
            )
        if log:
            logger.bind(event="journal_failed", path=path, error_type=type(exc).__name__).opt(
                exception=exc
            ).error(
                "pending write for '{}' could NOT be recorded: {}: {}",
                path,
                type(exc).__name__,
                exc,
            )
        why = f"{type(exc).__name__}: {exc}"
        return Recorded(
            False,
            f" The pending write could NOT be journaled ({why}); it will not be re-issued.",
            why,
        )

    async def record(
        self,
        node: MeshNode,
        access: AccessContext | None,
        request_id: str,
        origin: Literal["create", "create_nodes"],
    ) -> Recorded:
        """Record an UNAVAILABLE create for one re-issue; returns once the intent is durable.

        The recording step can never prevent the answer: whatever it raises (a journal that
        cannot be written, a value the journal cannot encode, a defect) is logged at ERROR and
        the answer says the write will not be re-issued. Another requester's outstanding intent
        for the same path is never displaced; this one is then not recorded, and says so. The
        journal's durable step runs off the event loop, in a group with every record made
        meanwhile (:meth:`~rxmesh.ledger.PendingWriteLedger.record_durably`).
        """
        if not self._core.record_pending_writes:
            return _OFF
        try:
            await self._core.ledger.record_durably(self._intent(node, access, request_id, origin))
        except Exception as exc:  # noqa: BLE001 - logged at ERROR and told in the answer
            return self._refused(exc, node, request_id, log=True)
        return Recorded(True, "")

    async def record_intent(
        self, build: Callable[[], PendingWrite], path: str, verb: str
    ) -> Recorded:
        """Record an UNAVAILABLE update, delete or move (``build()``: its intent, with its
        basis) for one re-issue, like :meth:`record`: the answer leaves whatever recording
        raises (building the intent included)."""
        if not self._core.record_pending_writes:
            return _OFF
        request_id = ""
        try:
            intent = build()
            request_id = intent.request_id
            await self._core.ledger.record_durably(intent)
        except Exception as exc:  # noqa: BLE001 - logged at ERROR and told in the answer
            return self._refused(exc, MeshNode(path=path), request_id, log=True, verb=verb)
        return Recorded(True, "")

    def settle_by_answer(
        self,
        req: CreateNodeRequest | CreateNodesRequest,
        node: MeshNode,
        response: CreateNodeResponse,
    ) -> None:
        """The caller's own re-issue of a recorded request was answered: settle the intent now.

        An intent is a promise to re-issue a request that got no answer. Once the same request
        (same requester, path, request id and verb) is answered by the store — created, or
        judged — that promise is kept; re-issuing it later could resurrect a node the caller
        deleted meanwhile. Anyone else's answer settles nothing, whatever request id
        it carries. The recovery's own re-issues settle themselves.
        """
        if not req.reissued_after_unavailable:
            first = req.node if isinstance(req, CreateNodeRequest) else req.nodes[0]
            self.settle_key_by_answer(node.path, req, node, response, first=first)

    def settle_key_by_answer(
        self,
        key: str,
        req: CreateNodeRequest | CreateNodesRequest | _VerbRequest,
        node: MeshNode | None,
        response: Answer,
        *,
        first: MeshNode | None = None,
    ) -> None:
        """:meth:`settle_by_answer` for the intent with ``key`` (:attr:`PendingWrite.key`: the
        path and the verb): an update's, delete's or move's own re-issue by the caller settles it
        the same way. ``node``: the request's node (``None``: a delete's or move's); ``first``:
        the node its requester is resolved with, when not ``node`` (a bulk's first)."""
        intent = self._core.ledger.outstanding(key, req.request_id)
        if intent is None:
            return
        access = self._core.requester_or_none(req.access, first or node)
        if intent.requester != requester_of(access, node):
            return  # another requester's request: it answers for itself, never for this intent
        outcome = outcome_of(intent, response)
        outcome = outcome.model_copy(
            update={"detail": f"{outcome.detail} (the caller's own re-issue was answered)".strip()}
        )
        try:
            self._core.ledger.settle_if_outstanding(intent, outcome)
        except JournalError:
            pass  # settled and published; the failed delete was logged at ERROR by the ledger

    def settle_bulk_by_answer(self, req: CreateNodesRequest, response: CreateNodesResponse) -> None:
        """:meth:`settle_by_answer` for each node of a bulk the store answered."""
        if req.reissued_after_unavailable:
            return
        if not self._core.ledger.anything_outstanding():
            return  # nothing outstanding to settle: no per-node answer is built (a large bulk)
        created = {node.path: node for node in response.created}
        present = set(response.already_present)
        for node in req.nodes:
            if node.path in created:
                answer = CreateNodeResponse.created(req.request_id, created[node.path])
            elif node.path in present:
                answer = CreateNodeResponse.fail(
                    req.request_id,
                    RejectionReason.NODE_ALREADY_EXISTS,
                    f"a node already exists at '{node.path}'",
                )
            elif response.rejection_reason is not None:
                answer = CreateNodeResponse.fail(
                    req.request_id, response.rejection_reason, response.error or ""
                )
            else:
                continue
            self.settle_by_answer(req, node, answer)

    async def record_bulk(
        self, req: CreateNodesRequest, not_created: tuple[MeshNode, ...]
    ) -> tuple[tuple[str, ...], tuple[str, ...], str]:
        """Record every node of an unreachable bulk that did not land, in one durable step;
        say which were not.

        Returns the paths recorded, the paths not recorded, and the note for the answer: counts
        and reasons in the text, the lists in the response. Failures are logged once (the first,
        with its traceback) and summarised, not once per node.
        """
        outcomes = await self._record_all(req, not_created)
        recorded: list[str] = []
        refused: dict[str, list[str]] = {}  # why -> paths
        first: Recorded | None = None
        for node, outcome in zip(not_created, outcomes, strict=True):
            if outcome.recorded:
                recorded.append(node.path)
                continue
            first = first or outcome
            refused.setdefault(outcome.why_not, []).append(node.path)
        not_recorded = tuple(p for paths in refused.values() for p in paths)
        total = len(not_created)
        if not not_recorded:
            return tuple(recorded), (), ""
        if total == 1 and first is not None:
            return (), not_recorded, first.note  # one node: the single create's text
        reasons = "; ".join(
            f"{len(paths)} because {why} (first: '{paths[0]}')" for why, paths in refused.items()
        )
        if len(not_recorded) > 1:
            logger.bind(
                event="journal_failed", recorded=len(recorded), not_recorded=len(not_recorded)
            ).error(
                "{}: {} of {} pending write(s) recorded, {} NOT recorded: {}",
                f"Bulk creation of {len(req.nodes)} node(s)",
                len(recorded),
                total,
                len(not_recorded),
                reasons,
            )
        note = (
            f" {len(recorded)} of the {total} node(s) not created were recorded for one re-issue "
            f"(listed in recorded_for_reissue); {len(not_recorded)} could NOT be recorded and "
            f"will not be re-issued (listed in not_recorded): {reasons}."
        )
        return tuple(recorded), not_recorded, note

    async def _record_all(
        self, req: CreateNodesRequest, nodes: tuple[MeshNode, ...]
    ) -> list[Recorded]:
        """One :class:`Recorded` per node, in order (the first refusal logged in detail)."""
        if not self._core.record_pending_writes:
            return [_OFF] * len(nodes)
        access = self._core.requester_or_none(req.access, req.nodes[0])
        outcomes: list[Recorded | None] = [None] * len(nodes)
        intents: list[PendingWrite] = []
        built: list[int] = []
        logged = False
        for start in range(0, len(nodes), _INTENTS_PER_STEP):
            if start:
                await asyncio.sleep(0)  # a large bulk never holds the loop
            with collector_paused():  # none of a step's intents is garbage (rxmesh._util.collector)
                for index in range(start, min(start + _INTENTS_PER_STEP, len(nodes))):
                    node = nodes[index]
                    try:
                        intents.append(self._intent(node, access, req.request_id, "create_nodes"))
                    except Exception as exc:  # noqa: BLE001 - logged at ERROR, told in the answer
                        outcomes[index] = self._refused(exc, node, req.request_id, log=not logged)
                        logged = True
                        continue
                    built.append(index)
        try:
            results: list[RecordResult | Exception] = [
                *(await self._core.ledger.record_many_durably(intents))
            ]
        except Exception as exc:  # noqa: BLE001 - the ledger closed: none of them recorded
            results = [exc] * len(intents)
        for index, result in zip(built, results, strict=True):
            if isinstance(result, BaseException):
                outcomes[index] = self._refused(
                    result, nodes[index], req.request_id, log=not logged
                )
                logged = True
            else:
                outcomes[index] = _RECORDED
        return [outcome if outcome is not None else _OFF for outcome in outcomes]
