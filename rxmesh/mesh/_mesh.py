"""The mesh: node operations over a store that answer honestly when the store is away.

:class:`Mesh` is a facade: each public method parses its request and hands it to the module that
does that job — :mod:`._create` (the single create), :mod:`._bulk` (the bulk create),
:mod:`._verbs` (update, delete, move), over :mod:`._bootstrap` (a partition's facts and heal),
:mod:`._pending` (recording and settling intents), :mod:`._answer` (one attempt shape, answered
exactly once) and :mod:`._arms` (the one terminal arm). Everything they share is one
:class:`~rxmesh.mesh._core.MeshCore`, whose ``ask`` methods are the one door to the store.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError
from reactivex import Observable, abc

from rxmesh._util.arguments import require_callable
from rxmesh.aio import first_value
from rxmesh.cache import SyncedQueryCache, fold_query_frames
from rxmesh.exceptions import MeshDisposedError
from rxmesh.ledger import PendingWriteLedger, PendingWriteRecovery
from rxmesh.mesh._access import AccessPolicy, GrantPolicy
from rxmesh.mesh._answer import answer_now, answer_once, immediate
from rxmesh.mesh._arms import TerminalArm
from rxmesh.mesh._bootstrap import Partitions
from rxmesh.mesh._bulk import Bulk
from rxmesh.mesh._core import MeshCore, NodeTypeValidator, Validator
from rxmesh.mesh._create import Create
from rxmesh.mesh._facts_cache import FactsCache
from rxmesh.mesh._in_process import BulkInProcess, error_of, parsed, path_of, request_fields
from rxmesh.mesh._job import Job
from rxmesh.mesh._pending import PendingWrites
from rxmesh.mesh._requests import CHECK_STEP, in_one_go, parse, parse_failure, request_id_of
from rxmesh.mesh._verbs import Delete, Move, Update
from rxmesh.mesh._watch import Watching
from rxmesh.model import AccessContext, MeshNode, NodeQuery, QueryFrame
from rxmesh.operations import (
    CreateNodeRequest,
    CreateNodeResponse,
    CreateNodesRequest,
    CreateNodesResponse,
    DeleteNodeRequest,
    MoveNodeRequest,
    NodeOperationResponse,
    NodeResponse,
    UpdateNodeRequest,
)
from rxmesh.operators import DEFAULT_INITIAL_BUDGET, DEFAULT_RETRY_DELAYS, fan_in
from rxmesh.providers import Store

__all__ = ["Mesh", "NodeTypeValidator", "Validator"]

R = TypeVar("R", bound=NodeResponse)


class Mesh(Watching, BulkInProcess):
    """Node operations over a store, each answering exactly once and honestly.

    Args:
        store: where nodes live (an :class:`~rxmesh.providers.InMemoryStore` by default).
        policy: who may do what (default :class:`~rxmesh.mesh.GrantPolicy`).
        validators: content rules run before any write.
        ledger: where UNAVAILABLE creates are recorded for one re-issue (default: a new
            :class:`~rxmesh.ledger.PendingWriteLedger`, journaled when
            ``RXMESH_PENDING_WRITES_DIR`` is set).
        scheduler: the scheduler of the retry ladder's timers (default: the running loop's).
        node_types: resolves node types and validates content (default: any type accepted).
        retry_delays: the retry ladder (default 250/500/1000 ms).
        record_pending_writes: whether the unreachable arm records intents (on by default).
        recover_pending_writes: whether to arm a :class:`~rxmesh.ledger.PendingWriteRecovery`
            on this mesh (on by default): it re-issues recorded intents, once, when the store
            shows it answers again (a declared change-feed gap or an announced commit).
        initial_budget: the Initial gate of live queries, in seconds (default 15).
        cache_partition_facts: keep a partition's complete facts (root, grant, ownership)
            between operations while the store's change feed watches them (on by default;
            docs/answers.md says when a kept fact is dropped).

    Example:
        >>> from rxmesh import Mesh, MeshNode
        >>> from rxmesh.providers import InMemoryStore
        >>> mesh = Mesh(InMemoryStore())
    """

    def __init__(
        self,
        store: Store | None = None,
        *,
        policy: AccessPolicy | None = None,
        validators: Sequence[Validator] = (),
        ledger: PendingWriteLedger | None = None,
        scheduler: abc.SchedulerBase | None = None,
        node_types: NodeTypeValidator | None = None,
        retry_delays: Sequence[float] = DEFAULT_RETRY_DELAYS,
        record_pending_writes: bool = True,
        recover_pending_writes: bool = True,
        initial_budget: float = DEFAULT_INITIAL_BUDGET,
        cache_partition_facts: bool = True,
    ) -> None:
        if store is None:
            from rxmesh.providers.memory import InMemoryStore

            store = InMemoryStore()
        for index, validator in enumerate(validators):
            require_callable(f"validators[{index}]", validator)
        self._core = core = MeshCore(
            store,
            policy=policy if policy is not None else GrantPolicy(),
            validators=tuple(validators),
            ledger=ledger if ledger is not None else PendingWriteLedger(),
            node_types=node_types,
            record_pending_writes=record_pending_writes,
            scheduler=scheduler,
            retry_delays=retry_delays,
        )
        self._owns_ledger = ledger is None
        self._facts = FactsCache(store, enabled=cache_partition_facts)
        partitions = Partitions(core, self._facts)
        pending, arm = PendingWrites(core), TerminalArm(core)
        self._create = Create(core, partitions, pending, arm)
        self._bulk = Bulk(core, partitions, pending, arm)
        self._update = Update(core, partitions, pending, arm)
        self._delete = Delete(core, partitions, pending, arm)
        self._move = Move(core, partitions, pending, arm)
        self._initial_budget = initial_budget
        self.queries: SyncedQueryCache[NodeQuery, QueryFrame] = SyncedQueryCache(
            self.query,
            replay=fold_query_frames,
            scheduler=scheduler,
            open_resumed=lambda query, token: self.query(query, resume_from=token),
        )
        self._disposed = False
        self.recovery: PendingWriteRecovery | None = None
        if recover_pending_writes:
            self.recovery = PendingWriteRecovery(self, self.ledger, scheduler=scheduler).start()

    # ------------------------------------------------------------------ what it holds

    @property
    def store(self) -> Store:
        """Where nodes live."""
        return self._core.store

    @property
    def policy(self) -> AccessPolicy:
        """Who may do what."""
        return self._core.policy

    @property
    def validators(self) -> tuple[Validator, ...]:
        """The content rules run before any write."""
        return self._core.validators

    @property
    def ledger(self) -> PendingWriteLedger:
        """Where UNAVAILABLE creates are recorded for one re-issue."""
        return self._core.ledger

    @property
    def node_types(self) -> NodeTypeValidator | None:
        """Resolves node types and validates content (``None``: any type accepted)."""
        return self._core.node_types

    @property
    def record_pending_writes(self) -> bool:
        """Whether the unreachable arm records intents (``Mesh(record_pending_writes=...)``)."""
        return self._core.record_pending_writes

    @contextlib.contextmanager
    def pending_writes_unrecorded(self) -> Iterator[None]:
        """Within the block, an unreachable answer records no intent (every operation of this
        mesh, as with ``record_pending_writes=False``); the setting it had comes back after it.
        For a drill that shows what a lost intent costs."""
        recording = self._core.record_pending_writes
        self._core.record_pending_writes = False
        try:
            yield
        finally:
            self._core.record_pending_writes = recording

    @property
    def created(self) -> Observable[MeshNode]:
        """Hot stream of nodes this mesh created (published after the write)."""
        return self._core.created

    def dispose(self) -> None:
        """Stop answering: later operations error with :class:`MeshDisposedError`.

        Its cached live queries are released (their subscribers complete) and its kept
        partition facts forgotten. A ledger the mesh made itself (none was passed) is closed
        too; its journal stays.
        """
        self._disposed = True
        self._facts.close()
        self.queries.dispose()  # its cached chains and their upstreams
        if self.recovery is not None:
            self.recovery.dispose()
        if self._owns_ledger:  # a ledger the caller passed in is the caller's to close
            self.ledger.close()
        self._core.created.on_completed()

    def _check_open(self) -> None:
        if self._disposed:
            raise MeshDisposedError("the mesh was disposed")

    # ------------------------------------------------------------------ queries

    def query(self, query: NodeQuery, resume_from: str | None = None) -> Observable[QueryFrame]:
        """A live query (Initial, then deltas), cold: each subscription opens its own upstream.

        The store's stream goes through :func:`~rxmesh.operators.fan_in`: the retry ladder before
        its Initial, and the Initial gate as a bound (``QueryProviderStalledError`` naming the
        store after ``initial_budget`` seconds). Every frame carries the store's
        ``resume_token``; with ``resume_from`` the first frame is a Delta of what changed since
        (``resumed``) or an Initial marked ``reset`` (docs/live-queries.md, "Resume tokens").
        """
        self._check_open()
        return fan_in(
            {self.store.name: self.store.query(query, resume_from)},
            initial_budget=self._initial_budget,
            query=query,
            scheduler=self._core.scheduler,
        )

    def live(self, query: NodeQuery, resume_from: str | None = None) -> Observable[QueryFrame]:
        """A shared live query from the mesh's :class:`~rxmesh.cache.SyncedQueryCache`.

        One upstream per distinct query; a late subscriber first gets the current snapshot; a
        chain that faulted is evicted, so asking again opens a fresh upstream.

        With ``resume_from``: when the shared chain's latest frame carries exactly that token,
        a resumed empty Delta, then the shared chain; otherwise a private upstream resumed from
        the token (:meth:`query` with ``resume_from``), neither shared nor cached, since only
        the store can say what changed since a position the chain is not at.
        """
        self._check_open()
        return self.queries.get(query, resume_from)

    # ------------------------------------------------------------------ node operations

    def _refused(self, kind: type[R], request: object, exc: ValidationError | ValueError) -> R:
        reason, text = parse_failure(exc)
        return kind.fail(request_id_of(request), reason, text)

    def create_node(
        self, request: CreateNodeRequest | Mapping[str, Any] | str | bytes
    ) -> Observable[CreateNodeResponse]:
        """Create one node; the observable answers exactly one :class:`CreateNodeResponse`.

        A classified failure is an answer, never an error. A malformed request (a mapping or JSON
        text that does not validate) is answered INVALID_PATH / VALIDATION_FAILED naming the field.
        """
        self._check_open()
        try:
            req = parse(CreateNodeRequest, request)
        except (ValidationError, ValueError) as exc:
            return immediate(self._refused(CreateNodeResponse, request, exc), "create")
        return answer_once(
            functools.partial(Create.attempt, self._create, req),
            "create",
            req.request_id,
            reissue=req.reissued_after_unavailable,
        )

    async def create(
        self,
        node: MeshNode | Mapping[str, Any],
        *,
        access: AccessContext | None = None,
        request_id: str | None = None,
    ) -> MeshNode:
        """Create ``node`` (a :class:`~rxmesh.model.MeshNode` or a mapping of its fields) and
        return it as stored, or raise one exception type per reason (input the model refuses
        too: :class:`InvalidPathError` / :class:`NodeValidationError`, naming the field).

        ``request_id``: the idempotency key (an HTTP service passes its ``Idempotency-Key``),
        new per call when not given. A re-send with the same key answers what the first answer
        would have been: the node, when this request's row is there (an earlier try, or the
        mesh's own re-issue, landed).

        Raises:
            StoreUnavailableError: UNAVAILABLE (re-send it with the same ``request_id``).
            NodeExistsError: NODE_ALREADY_EXISTS (a row written by another request).
            NodeAccessDeniedError: FORBIDDEN (also a ``PermissionError``).
            InvalidPathError: INVALID_PATH (also a ``ValueError``).
            InvalidNodeTypeError: INVALID_NODE_TYPE (also a ``ValueError``).
            NodeValidationError: VALIDATION_FAILED (also a ``ValueError``).
            NodeOperationError: UNKNOWN (each carries the answer: see :func:`rxmesh.http_status`).
        """
        self._check_open()
        given = request_fields({"node": node, "access": access}, request_id)
        req = parsed(CreateNodeRequest, given, path_of(node))
        # The same attempt create_node runs, awaited directly (no observable in between).
        response = await answer_now(
            functools.partial(Create.attempt, self._create, req),
            "create",
            req.request_id,
            reissue=req.reissued_after_unavailable,
        )
        if response.success and response.node is not None:
            return response.node
        raise error_of(response, req.node.path)

    def create_nodes(
        self, request: CreateNodesRequest | Mapping[str, Any] | str | bytes
    ) -> Observable[CreateNodesResponse]:
        """Create many nodes in windows; the observable answers exactly one response.

        Phases: (0) duplicates and invalid entries refuse the batch naming the first offender;
        (1) one batched existence read, existing paths skipped and reported; (2) bootstrap once per
        partition; (3) validate every node; (4) write in windows, each its own transaction.
        """
        self._check_open()
        try:
            req = parse(CreateNodesRequest, request, check=False)
        except (ValidationError, ValueError) as exc:
            return immediate(self._refused(CreateNodesResponse, request, exc), "create_nodes")
        if len(req.nodes) <= CHECK_STEP:  # a larger bulk is checked in its attempt
            refusal = in_one_go(self._bulk.checks(req))
            if refusal is not None:
                return immediate(refusal, "create_nodes")
        return answer_once(
            functools.partial(Bulk.attempt, self._bulk, req),
            "create_nodes",
            req.request_id,
            reissue=req.reissued_after_unavailable,
        )

    def _verb(
        self,
        verb: str,
        model: type[UpdateNodeRequest] | type[DeleteNodeRequest] | type[MoveNodeRequest],
        request: object,
        job: Job[Any, Any, NodeOperationResponse],
    ) -> Observable[NodeOperationResponse]:
        self._check_open()
        try:
            req = parse(model, request)
        except (ValidationError, ValueError) as exc:
            return immediate(self._refused(NodeOperationResponse, request, exc), verb)
        return answer_once(
            functools.partial(job.attempt, req),
            verb,
            req.request_id,
            reissue=req.reissued_after_unavailable,
        )

    def update_node(
        self, request: UpdateNodeRequest | Mapping[str, Any] | str | bytes
    ) -> Observable[NodeOperationResponse]:
        """Replace the type/content of an existing node; answers one response."""
        return self._verb("update", UpdateNodeRequest, request, self._update)

    def delete_node(
        self, request: DeleteNodeRequest | Mapping[str, Any] | str | bytes
    ) -> Observable[NodeOperationResponse]:
        """Delete a node (not its children); answers one response."""
        return self._verb("delete", DeleteNodeRequest, request, self._delete)

    def move_node(
        self, request: MoveNodeRequest | Mapping[str, Any] | str | bytes
    ) -> Observable[NodeOperationResponse]:
        """Move a node to a free path; answers one response."""
        return self._verb("move", MoveNodeRequest, request, self._move)

    async def _in_process(
        self,
        verb: str,
        model: type[UpdateNodeRequest] | type[DeleteNodeRequest] | type[MoveNodeRequest],
        job: Job[Any, Any, NodeOperationResponse],
        request_id: str | None,
        **fields: Any,
    ) -> MeshNode | None:
        given = request_fields(fields, request_id)
        response = await first_value(self._verb(verb, model, given, job))
        if response.success:
            return response.node
        shown = fields.get("node") or fields.get("path") or fields.get("source") or ""
        raise error_of(response, path_of(shown))

    async def update(
        self,
        node: MeshNode | Mapping[str, Any],
        *,
        access: AccessContext | None = None,
        expected_version: int | None = None,
        request_id: str | None = None,
    ) -> MeshNode:
        """Update ``node`` in place and return it as stored; raises one type per reason.

        ``expected_version``: the version the update is based on (compare-and-set); without it,
        the version this call reads. Another write first raises
        :class:`~rxmesh.exceptions.NodeVersionConflictError` (VERSION_CONFLICT); the other
        reasons raise what :meth:`create` raises for them; ``node`` and ``request_id`` are as
        in :meth:`create`.
        """
        result = await self._in_process(
            "update",
            UpdateNodeRequest,
            self._update,
            request_id,
            node=node,
            access=access,
            expected_version=expected_version,
        )
        assert result is not None  # a successful update always carries the node
        return result

    async def delete(
        self,
        path: str,
        *,
        access: AccessContext | None = None,
        expected_version: int | None = None,
        request_id: str | None = None,
    ) -> None:
        """Delete the node at ``path`` (compare-and-set and ``request_id`` as :meth:`update`);
        raises one exception type per reason."""
        await self._in_process(
            "delete",
            DeleteNodeRequest,
            self._delete,
            request_id,
            path=path,
            access=access,
            expected_version=expected_version,
        )

    async def move(
        self,
        source: str,
        target: str,
        *,
        access: AccessContext | None = None,
        expected_version: int | None = None,
        request_id: str | None = None,
    ) -> MeshNode:
        """Move the node at ``source`` to ``target`` (compare-and-set on the source and
        ``request_id`` as :meth:`update`); raises one exception type per reason."""
        result = await self._in_process(
            "move",
            MoveNodeRequest,
            self._move,
            request_id,
            source=source,
            target=target,
            access=access,
            expected_version=expected_version,
        )
        assert result is not None  # a successful move always carries the node
        return result
