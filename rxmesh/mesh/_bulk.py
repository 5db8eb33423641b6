"""The bulk create, in its phases.

0. Store-free: a path twice, or an entry that fails a string, path or content check, refuses
   the batch naming the first offender (the first entry, in entry order, failing any of them).
1. One batched existence read: existing paths skipped and reported (``already_present``); rows of
   this very request (a verbatim re-issue) answered created, never as this attempt's landing.
2. Every partition's facts read and judged before any is healed.
3. The content rules (no store) — a bad batch heals no partition, but a permission refusal
   outranks them in the answer.
4. The write in windows, each its own transaction; rows skipped by ON CONFLICT are read back
   (ours: an ambiguous commit; else already present).

A fault once a write had started is answered after one probe of what landed (never retried,
:meth:`Bulk.landing`); the terminal arm answers a partial landing as such before the
store-unreachable branch, and records the nodes not created for one re-issue when the store was
away (:meth:`Bulk.record`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from loguru import logger
from reactivex import Observable

from rxmesh.exceptions import InvalidPathError, NodeValidationError
from rxmesh.faults import is_write_outcome_unknown
from rxmesh.mesh._arms import AttemptFacts, Landing
from rxmesh.mesh._core import now, stamp
from rxmesh.mesh._job import Job
from rxmesh.mesh._requests import (
    CHECK_STEP,
    entry_string_checks,
    parse_failure,
    request_id_of,
    request_string_checks,
    stepwise,
    string_checks,
)
from rxmesh.model import AccessContext, MeshNode
from rxmesh.operations import CreateNodesRequest, CreateNodesResponse, RejectionReason

__all__ = ["Bulk", "operation_of"]

T = TypeVar("T")


def operation_of(req: CreateNodesRequest) -> str:
    """The subject of a bulk's answer text."""
    return f"Bulk creation of {len(req.nodes)} node(s)"


@dataclass
class _BulkState(AttemptFacts):
    """One subscription's bulk attempt. ``landed`` is what this attempt wrote (only paths absent
    in phase 1 count); ``earlier`` the rows an earlier attempt of the same request wrote (found
    in phase 1): answered as created, never as a partial landing of this attempt."""

    attempted: list[MeshNode] = field(default_factory=list)
    landed: dict[str, MeshNode] = field(default_factory=dict)
    earlier: dict[str, MeshNode] = field(default_factory=dict)
    already_present: list[str] = field(default_factory=list)


class Bulk(Job[CreateNodesRequest, _BulkState, CreateNodesResponse]):
    """One mesh's bulk create."""

    kind = CreateNodesResponse

    def facts(self, req: CreateNodesRequest) -> _BulkState:
        return _BulkState(operation_of(req), "bulk-creating", req.nodes[0].path, req.request_id)

    async def run(self, req: CreateNodesRequest, state: _BulkState) -> CreateNodesResponse:
        """Phase 0 first for a large bulk (its refusal is the answer), then the phases. A
        smaller bulk was checked before its attempt (:meth:`checks`, in one go)."""
        if len(req.nodes) > CHECK_STEP:
            # A step at a time: the same refusals, the same answer, and the loop is never held
            # for the checks of 10,000 nodes.
            refused = await stepwise(self.checks(req))
            if refused is not None:
                return refused
        return await self._bulk(req, state)

    def checks(self, req: CreateNodesRequest) -> Generator[None, None, CreateNodesResponse | None]:
        """Phase 0: the batch's refusal naming its first offender, or ``None``; a stepwise
        check (a step every :data:`CHECK_STEP` nodes: run it with ``in_one_go`` or
        ``stepwise``).

        Each check runs over every entry in turn (the strings, then the duplicates and the
        content), the cheapest order for a valid batch; so the entry a refusing check names
        may come after one that fails a later check. Only then are the entries walked once
        more, each judged by every check in entry order, to name the first of them.
        """
        try:
            yield from string_checks(req)
        except ValueError as exc:  # NodeValidationError and InvalidPathError included
            failure: CreateNodesResponse = _refused(req, exc)
        else:
            refusal = yield from self._refusal(req)
            if refusal is None:
                return None
            failure = refusal
        try:
            request_string_checks(req)
        except ValueError:
            return failure  # the request's own fields, before any entry
        first = yield from self._first_offender(req)
        return failure if first is None else first

    def _first_offender(
        self, req: CreateNodesRequest
    ) -> Generator[None, None, CreateNodesResponse | None]:
        """The refusal naming the first entry that fails any store-free check, each entry
        judged as :meth:`checks` judges it (path, strings, a repeated path, content)."""
        access: AccessContext | None = None
        seen: set[str] = set()
        for index, node in enumerate(req.nodes):
            if index and not index % CHECK_STEP:
                yield
            try:
                entry_string_checks(req, index)
            except ValueError as exc:
                return _refused(req, exc)
            if not index:  # entry 0's created_by may name the requester: a user id by now
                access = self._access(req)
            if node.path in seen:
                return _repeated(req, node.path)
            seen.add(node.path)
            if (refusal := self._entry_refusal(req, node, access)) is not None:
                return refusal
        return None

    def _access(self, req: CreateNodesRequest) -> AccessContext | None:
        if req.access is None and req.nodes[0].created_by:
            return AccessContext(user=req.nodes[0].created_by)
        return req.access

    def _entry_refusal(
        self, req: CreateNodesRequest, node: MeshNode, access: AccessContext | None
    ) -> CreateNodesResponse | None:
        try:
            self._core.fail_fast(node, access)
        except NodeValidationError as exc:
            reason = (
                RejectionReason.INVALID_PATH
                if isinstance(exc, InvalidPathError)
                else RejectionReason.VALIDATION_FAILED
            )
            return CreateNodesResponse.fail(
                req.request_id, reason, f"first invalid entry '{node.path}': {exc}"
            )
        return None

    def _refusal(
        self, req: CreateNodesRequest
    ) -> Generator[None, None, CreateNodesResponse | None]:
        """The duplicates, then every entry's content checks: a refusal, or ``None``."""
        if len({node.path for node in req.nodes}) < len(req.nodes):
            seen: set[str] = set()
            for node in req.nodes:  # name the first path met again
                if node.path in seen:
                    return _repeated(req, node.path)
                seen.add(node.path)
        access = self._access(req)
        for index, node in enumerate(req.nodes):
            if index and not index % CHECK_STEP:
                yield
            if (refusal := self._entry_refusal(req, node, access)) is not None:
                return refusal
        return None

    async def _bulk(self, req: CreateNodesRequest, state: _BulkState) -> CreateNodesResponse:
        core = self._core
        access = core.requester(req.access, req.nodes[0])
        paths = [node.path for node in req.nodes]
        present: dict[str, MeshNode] = await core.ask("read_many", paths)
        todo: list[MeshNode] = [] if present else list(req.nodes)  # none present: all to do
        for node in req.nodes if present else ():
            existing = present.get(node.path)
            if existing is None:
                todo.append(node)
            elif existing.request_id == req.request_id:
                state.earlier[node.path] = existing  # landed by this very request earlier
            else:
                state.already_present.append(node.path)
        content_error: NodeValidationError | None = None
        for node in todo if core.validators or core.node_types is not None else ():
            try:
                core.validate_content(node, access)
            except NodeValidationError as exc:
                content_error = type(exc)(f"entry '{node.path}': {exc}", path=node.path)
                content_error.__cause__ = exc
                break
        judged = [
            await self._partitions.authorise(partition, access, "create", creating=None)
            for partition in _partitions(todo)
        ]
        if content_error is not None:
            raise content_error
        for facts in judged:
            await self._partitions.heal(facts, access, "create", creating=None, heals=state.heals)
        at = now()
        user, request_id = access.user, req.request_id
        stamped = [stamp(node, user, at, request_id) for node in todo]
        by_path = {node.path: node for node in stamped}
        state.attempted = stamped
        if stamped:
            state.write_started = True
            await _drain(
                core.ask_stream("write_many", stamped, req.window),
                lambda window: state.landed.update({p: by_path[p] for p in window.paths}),
            )
        unsettled = [p for p in by_path if p not in state.landed]
        if unsettled:
            # Rows skipped by ON CONFLICT: ours (an ambiguous commit) or someone else's.
            found: dict[str, MeshNode] = await core.ask("read_many", unsettled)
            for path in unsettled:
                row = found.get(path)
                if row is not None and row.request_id == req.request_id:
                    state.landed[path] = row
                else:
                    state.already_present.append(path)
        mine = {**state.earlier, **state.landed} if state.earlier else state.landed
        created = tuple([mine[p] for p in paths if p in mine])
        if core.created.observers:  # nobody watches (a CLI import): no call per node
            for node in created:
                if node.path in state.landed:
                    core.created.on_next(node)
        response = CreateNodesResponse(
            request_id=req.request_id,
            success=True,
            created=created,
            already_present=tuple(state.already_present),
        )
        self._pending.settle_bulk_by_answer(req, response)
        return response

    async def landing(
        self, req: CreateNodesRequest, state: _BulkState, exc: BaseException
    ) -> Landing:
        """What this attempt's writes did: once a write had started, which attempted paths are
        present (one probe, no retry: the terminal arm never retries; a failing probe finds
        nothing); then the answer's lists, and how many of this attempt's own writes landed."""
        if state.write_started:
            unsettled = [n.path for n in state.attempted if n.path not in state.landed]
            if unsettled:
                try:
                    found: dict[str, MeshNode] = await self._core.ask_once("read_many", unsettled)
                except Exception as probe_error:  # noqa: BLE001 - reported, counts as none found
                    logger.bind(event="probe_failed").warning(
                        "landed-probe after a failed bulk write failed ({}): counting none found",
                        probe_error,
                    )
                    found = {}
                # A row of this request's id is this attempt's landing only if its failed write
                # may have run; after a write that never left (refused, not sent), it was written
                # by another attempt of the same request (a concurrent re-issue): answered as
                # created, never as this attempt's partial landing.
                mine = state.landed if is_write_outcome_unknown(exc) else state.earlier
                for path in unsettled:
                    row = found.get(path)
                    if row is not None and row.request_id == req.request_id:
                        mine[path] = row
        landed = sum(1 for n in req.nodes if n.path in state.landed)
        ours = {**state.earlier, **state.landed}  # this request's rows, earlier attempts included
        not_created = _not_created(req, state)
        fields: dict[str, Any] = {
            "created": tuple(ours[n.path] for n in req.nodes if n.path in ours),
            "already_present": tuple(state.already_present),
            "not_created": not_created,
        }
        return Landing(fields, landed, len(not_created))

    async def record(
        self, req: CreateNodesRequest, state: _BulkState
    ) -> tuple[str, dict[str, Any]]:
        not_created = _not_created(req, state)
        if req.reissued_after_unavailable or not not_created:
            return "", {}
        recorded, not_recorded, note = await self._pending.record_bulk(req, not_created)
        return note, {"recorded_for_reissue": recorded, "not_recorded": not_recorded}

    def settle(self, req: CreateNodesRequest, response: CreateNodesResponse) -> None:
        self._pending.settle_bulk_by_answer(req, response)


def _not_created(req: CreateNodesRequest, state: _BulkState) -> tuple[MeshNode, ...]:
    """The entries neither this request's rows (this attempt's or an earlier one's) nor already
    present."""
    return tuple(
        n
        for n in req.nodes
        if n.path not in state.landed
        and n.path not in state.earlier
        and n.path not in state.already_present
    )


def _refused(req: CreateNodesRequest, exc: ValueError) -> CreateNodesResponse:
    """A string check's refusal, as the answer to a malformed request states it."""
    reason, text = parse_failure(exc)
    return CreateNodesResponse.fail(request_id_of(req), reason, text)


def _repeated(req: CreateNodesRequest, path: str) -> CreateNodesResponse:
    return CreateNodesResponse.fail(
        req.request_id,
        RejectionReason.INVALID_PATH,
        f"path '{path}' appears more than once in the batch",
    )


def _partitions(nodes: list[MeshNode]) -> list[str]:
    """``sorted({node.partition for node in nodes})``; one ``startswith`` a node while they
    share the first one's partition (a window of an import usually has one)."""
    if not nodes:
        return []
    first = nodes[0].partition
    under = first + "/"
    if all(node.path.startswith(under) or node.path == first for node in nodes):
        return [first]
    return sorted({node.partition for node in nodes})


async def _drain(source: Observable[T], on_item: Callable[[T], None]) -> None:
    """Subscribe to ``source`` until it completes, calling ``on_item`` for each item."""
    # The future is held through a list emptied at the end: a failed one holds its error, whose
    # traceback holds this frame, so keeping it here would be a cycle for the GC (a late call
    # of the callbacks then finds nothing to settle).
    waiting: list[asyncio.Future[None]] = [asyncio.get_running_loop().create_future()]

    def on_error(exc: Exception) -> None:
        for done in waiting:
            if not done.done():
                done.set_exception(exc)

    def on_completed() -> None:
        for done in waiting:
            if not done.done():
                done.set_result(None)

    subscription = source.subscribe(on_item, on_error, on_completed)
    try:
        await waiting[0]
    finally:
        subscription.dispose()
        waiting.clear()
