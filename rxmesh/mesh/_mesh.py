"""The mesh: node operations over a store that answer honestly when the store is away."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, TypeVar

from loguru import logger
from pydantic import BaseModel, ValidationError
from reactivex import Observable, abc
from reactivex.disposable import Disposable
from reactivex.subject import Subject

from rxmesh.aio import first_value, from_async
from rxmesh.cache import SyncedQueryCache, fold_query_frames
from rxmesh.exceptions import (
    InvalidPathError,
    MeshDisposedError,
    NodeAccessDeniedError,
    NodeExistsError,
    NodeValidationError,
    StoreConflictError,
)
from rxmesh.faults import (
    describe_may_have_partially_landed,
    is_store_unreachable,
    is_write_outcome_unknown,
)
from rxmesh.ledger import (
    JournalError,
    PendingWrite,
    PendingWriteHeldError,
    PendingWriteLedger,
    PendingWriteRecovery,
    outcome_of,
)
from rxmesh.mesh._access import (
    AccessPolicy,
    GrantPolicy,
    PartitionFacts,
    grant_path,
    owner_path,
)
from rxmesh.mesh._arms import Judgement, annotate, error_for, judge, unreachable_note
from rxmesh.model import (
    MAX_CONTENT_BYTES,
    MAX_LABEL_LENGTH,
    MAX_REQUEST_ID_LENGTH,
    NODE_TYPE_PATTERN,
    SYSTEM_USER,
    AccessContext,
    MeshNode,
    NodeQuery,
    QueryFrame,
    partition_of,
    validate_content,
    validate_label,
    validate_path,
    validate_request_id,
    validate_stored_text,
    validate_user_id,
)
from rxmesh.operations import (
    CreateNodeRequest,
    CreateNodeResponse,
    CreateNodesRequest,
    CreateNodesResponse,
    DeleteNodeRequest,
    MoveNodeRequest,
    NodeOperationResponse,
    RejectionReason,
    UpdateNodeRequest,
)
from rxmesh.operators import (
    DEFAULT_INITIAL_BUDGET,
    DEFAULT_RETRY_DELAYS,
    fan_in,
    retry_transient_connect,
)
from rxmesh.operators._ladder import Ladder
from rxmesh.providers import Store
from rxmesh.providers._store import call

__all__ = ["Mesh", "NodeTypeValidator", "Validator"]

T = TypeVar("T")
R = TypeVar("R", bound=BaseModel)

Validator = Callable[[MeshNode, AccessContext], None]
"""A content rule: raise :class:`~rxmesh.exceptions.NodeValidationError` to refuse a node."""


class NodeTypeValidator(Protocol):
    """Resolves a node's type and validates its content against it (e.g. baked NodeType records).

    Raise :class:`~rxmesh.exceptions.InvalidNodeTypeError` for an unknown type and
    :class:`~rxmesh.exceptions.NodeValidationError` naming the field for bad content.
    """

    def validate(self, node: MeshNode) -> None:
        """Validate ``node`` or raise."""
        ...


_Attempt = tuple[Callable[[], Awaitable[R]], Callable[[BaseException], R], Callable[[], R]]
"""One subscription's work: ``(run, on_fault, backstop)``, built fresh per subscription."""


@dataclass(frozen=True)
class _Recorded:
    """What recording an UNAVAILABLE create did: recorded or not, the answer's note, and why not."""

    recorded: bool
    note: str
    why_not: str = ""


@dataclass
class _BulkState:
    """One subscription's bulk attempt. ``landed`` is what THIS attempt wrote (SPEC §3 counts
    only paths absent in phase 1); ``earlier`` the rows an earlier attempt of the same request
    wrote (found in phase 1): answered as created, never as a partial landing of this attempt."""

    write_started: bool = False
    attempted: list[MeshNode] = field(default_factory=list)
    landed: dict[str, MeshNode] = field(default_factory=dict)
    earlier: dict[str, MeshNode] = field(default_factory=dict)
    already_present: list[str] = field(default_factory=list)
    heals: list[str] = field(default_factory=list)


def _now() -> datetime:
    return datetime.now(UTC)


_Request = (
    CreateNodeRequest | CreateNodesRequest | UpdateNodeRequest | DeleteNodeRequest | MoveNodeRequest
)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_NODE_TYPE = re.compile(NODE_TYPE_PATTERN)
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,40}")
_PATH_FIELDS = (("node", "path"), ("nodes", "path"), ("path",), ("source",), ("target",))


class _Repeated(dict[str, Any]):
    """A decoded JSON object in which ``key`` appeared more than once (the last value kept)."""

    key: str = ""


def _decode_json(text: str | bytes | bytearray) -> tuple[Any, bool]:
    """Decode request JSON as Python's json does, marking every object that repeats a key.

    Returns the value and whether any key repeated; raises ``ValueError`` / ``RecursionError``
    for text Python cannot decode.
    """
    repeated = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal repeated
        decoded = dict(items)
        if len(decoded) == len(items):
            return decoded
        marked, seen = _Repeated(decoded), set()
        for key, _ in items:
            if key in seen:
                marked.key = key
                break
            seen.add(key)
        repeated = True
        return marked

    return json.loads(text, object_pairs_hook=pairs), repeated


def _walk(data: object) -> Iterator[tuple[tuple[str | int, ...], object]]:
    """Every value of a decoded JSON document with its location, depth-first, without recursion."""
    stack: list[tuple[tuple[str | int, ...], object]] = [((), data)]
    while stack:
        location, value = stack.pop()
        yield location, value
        if isinstance(value, dict):
            stack.extend(((*location, key), item) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend(((*location, i), item) for i, item in reversed(list(enumerate(value))))


def _where(location: Sequence[object], empty: str = "request") -> str:
    """A field location as text (``access.user``, ``nodes.0.path``), safe to print and bounded."""
    parts = [
        str(part) if isinstance(part, int) or _PLAIN_KEY.fullmatch(str(part)) else repr(part)[:42]
        for part in location
    ]
    text = ".".join(parts) or empty
    return text if len(text) <= 120 else text[:117] + "..."


def _holds_lone_surrogate(data: object) -> bool:
    for _, value in _walk(data):
        if isinstance(value, str) and _LONE_SURROGATE.search(value):
            return True
        if isinstance(value, dict) and any(_LONE_SURROGATE.search(key) for key in value):
            return True
    return False


def _parse_json(model: type[R], text: str | bytes | bytearray) -> R:
    """Build a request from JSON text: refuse a repeated key (naming it and where) before
    pydantic's parser, which would silently keep the last one."""
    try:
        data, repeated = _decode_json(text)
    except (ValueError, RecursionError):
        return model.model_validate_json(text)  # not JSON: pydantic's error says where and why
    if repeated:
        location, key = next(
            ((loc, v.key) for loc, v in _walk(data) if isinstance(v, _Repeated)), ((), "?")
        )
        raise NodeValidationError(
            f"{_where(location)}: the key {_shown_key(key)} appears more than once "
            "(JSON text may not repeat a key)"
        )
    try:
        return model.model_validate_json(text)
    except ValidationError:
        if not _holds_lone_surrogate(data):
            raise
    # pydantic's JSON parser cannot read a lone surrogate, so it cannot say where one is:
    # validate the decoded value as a mapping is validated, so the refusal names the field.
    return model.model_validate(data)


def _shown_key(key: str) -> str:
    text = repr(key)
    return text if len(text) <= 42 else text[:39] + "..."


def _check_strings(req: BaseModel) -> None:
    """Refuse, naming the field, a string no store can keep or the mesh must not pass on.

    The models refuse these already; this re-checks, cheaply, what a construction that skips
    validation (``model_construct``, ``model_copy(update=...)``) let through, and adds the one
    rule a stored row does not obey: a ``created_by`` that names the requester (``access`` is
    absent) is a user id. Elsewhere a node's ``created_by`` and ``request_id`` are ignored (the
    mesh stamps its own) and need only be storable (they reach the journal), so a node read back
    from a store can be sent again. A path's reserved segments are the system's, as in
    ``_fail_fast``, which judges content later (still before any store call).
    """
    if not isinstance(req, _Request):
        return
    validate_request_id(req.request_id, field="request_id")
    if req.access is not None:
        validate_user_id(req.access.user, field="access.user")
        if req.access.on_behalf_of is not None:
            validate_label(req.access.on_behalf_of, field="access.on_behalf_of")
    if isinstance(req, CreateNodesRequest):
        nodes = [(f"nodes.{index}", node) for index, node in enumerate(req.nodes)]
    elif isinstance(req, CreateNodeRequest | UpdateNodeRequest):
        nodes = [("node", req.node)]
    else:
        nodes = []
    paths = [(f"{where}.path", node.path) for where, node in nodes]
    if isinstance(req, DeleteNodeRequest):
        paths = [("path", req.path)]
    elif isinstance(req, MoveNodeRequest):
        paths = [("source", req.source), ("target", req.target)]
    # The requester, as the verbs resolve it: the access, else the (first) node's created_by.
    requester = req.access.user if req.access is not None else None
    if requester is None and nodes:
        requester = nodes[0][1].created_by
    for where, path in paths:
        try:
            validate_path(path, allow_reserved=requester == SYSTEM_USER)
        except InvalidPathError as exc:
            raise InvalidPathError(f"{where}: {exc}", path=exc.path) from exc
    for index, (where, node) in enumerate(nodes):
        if node.created_by is not None and index == 0 and req.access is None:
            validate_user_id(node.created_by, field=f"{where}.created_by")
        elif node.created_by is not None:
            validate_stored_text(
                node.created_by, field=f"{where}.created_by", max_length=MAX_LABEL_LENGTH
            )
        if node.request_id is not None:
            validate_stored_text(
                node.request_id, field=f"{where}.request_id", max_length=MAX_REQUEST_ID_LENGTH
            )
        if node.node_type is not None and (
            not isinstance(node.node_type, str) or not _NODE_TYPE.fullmatch(node.node_type)
        ):
            raise NodeValidationError(
                f"{where}.node_type: {_shown_key(str(node.node_type))} is not a node type name "
                "(a letter, then letters, digits, '_ . : -'; at most 128 characters)"
            )


def _parse(model: type[R], request: object) -> R:
    """Build a request from a model, a mapping or JSON text and check its strings.

    Raises ``ValidationError`` (the model refused it) or :class:`NodeValidationError` /
    :class:`InvalidPathError` naming the field (a repeated JSON key, a string rule).
    """
    req: R
    if isinstance(request, model):
        req = request
    elif isinstance(request, str | bytes | bytearray):
        req = _parse_json(model, request)
    else:
        req = model.model_validate(request)
    _check_strings(req)
    return req


def _parse_failure(error: ValidationError | ValueError) -> tuple[RejectionReason, str]:
    """Map a malformed request to INVALID_PATH or VALIDATION_FAILED, naming the field."""
    if isinstance(error, InvalidPathError):
        return RejectionReason.INVALID_PATH, str(error)
    if isinstance(error, NodeValidationError):
        return RejectionReason.VALIDATION_FAILED, str(error)
    if not isinstance(error, ValidationError):
        return RejectionReason.VALIDATION_FAILED, f"malformed request: {error}"
    problems = []
    reason = RejectionReason.VALIDATION_FAILED
    items = error.errors(include_url=False)
    for item in items:
        if item["type"] == "too_short" and item["loc"] == ("nodes",) and len(items) > 1:
            continue  # pydantic's echo of an entry refused below: "at least 1 item, not 0"
        fields = tuple(part for part in item["loc"] if not isinstance(part, int))
        if fields in _PATH_FIELDS:
            reason = RejectionReason.INVALID_PATH
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "json_invalid":
            problems.append(f"request is not valid JSON: {message}")
        else:
            problems.append(f"{_where(item['loc'])}: {message}")
    return reason, "; ".join(problems)


def _request_id_of(request: object) -> str:
    """The id to answer a refused request with: its own when that is a valid id, else unknown."""
    value: object = None
    if isinstance(request, BaseModel):
        value = getattr(request, "request_id", None)
    elif isinstance(request, Mapping):
        value = request.get("request_id")
    elif isinstance(request, str | bytes | bytearray):
        try:
            data, _ = _decode_json(request)
        except (ValueError, RecursionError):  # refused already; the id is only a courtesy
            data = None
        if isinstance(data, dict) and not (
            isinstance(data, _Repeated) and data.key == "request_id"
        ):
            value = data.get("request_id")
    try:
        return validate_request_id(value)
    except NodeValidationError:
        return "unknown"


class Mesh:
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
    ) -> None:
        if store is None:
            from rxmesh.providers.memory import InMemoryStore

            store = InMemoryStore()
        for index, validator in enumerate(validators):
            if not callable(validator):
                raise TypeError(f"validators[{index}] must be callable, got {validator!r}")
        self.store: Store = store
        self.policy: AccessPolicy = policy if policy is not None else GrantPolicy()
        self.validators: tuple[Validator, ...] = tuple(validators)
        self.ledger: PendingWriteLedger = ledger if ledger is not None else PendingWriteLedger()
        self._owns_ledger = ledger is None
        self.node_types = node_types
        self.record_pending_writes = record_pending_writes
        self._scheduler = scheduler
        self._ladder = Ladder.of(tuple(retry_delays))
        self._retry = retry_transient_connect(tuple(retry_delays), scheduler=scheduler)
        self._initial_budget = initial_budget
        self.queries: SyncedQueryCache[NodeQuery, QueryFrame] = SyncedQueryCache(
            self.query, replay=fold_query_frames, scheduler=scheduler
        )
        self._created: Subject[MeshNode] = Subject()
        self._disposed = False
        self.recovery: PendingWriteRecovery | None = None
        if recover_pending_writes:
            self.recovery = PendingWriteRecovery(self, self.ledger, scheduler=scheduler).start()

    # ------------------------------------------------------------------ plumbing

    @property
    def created(self) -> Observable[MeshNode]:
        """Hot stream of nodes this mesh created (published after the write)."""
        return self._created

    def dispose(self) -> None:
        """Stop answering: later operations error with :class:`MeshDisposedError`.

        A ledger the mesh made itself (none was passed) is closed too; its journal stays.
        """
        self._disposed = True
        if self.recovery is not None:
            self.recovery.dispose()
        if self._owns_ledger:  # a ledger the caller passed in is the caller's to close
            self.ledger.close()
        self._created.on_completed()

    def _check_open(self) -> None:
        if self._disposed:
            raise MeshDisposedError("the mesh was disposed")

    async def _ask(self, operation: str, *args: Any) -> Any:
        """One store call (``"read"``, ``"write"``, ...) through the retry ladder: the only place
        the mesh retries. Awaits the store's coroutine twin when it has one (no observable
        machinery on the way), else its observable method (:func:`rxmesh.providers.call`)."""
        store = self.store
        return await self._ladder.call(
            lambda: call(store, operation, *args), scheduler=self._scheduler
        )

    def query(self, query: NodeQuery) -> Observable[QueryFrame]:
        """A live query (Initial, then deltas), cold: each subscription opens its own upstream.

        The store's stream goes through :func:`~rxmesh.operators.fan_in`: the retry ladder before
        its Initial, and the Initial gate as a bound (``QueryProviderStalledError`` naming the
        store after ``initial_budget`` seconds).
        """
        self._check_open()
        return fan_in(
            {self.store.name: self.store.query(query)},
            initial_budget=self._initial_budget,
            query=query,
            scheduler=self._scheduler,
        )

    def live(self, query: NodeQuery) -> Observable[QueryFrame]:
        """A shared live query from the mesh's :class:`~rxmesh.cache.SyncedQueryCache`.

        One upstream per distinct query; a late subscriber first gets the current snapshot; a
        chain that faulted is evicted, so asking again opens a fresh upstream.
        """
        self._check_open()
        return self.queries.get(query)

    def _answer_once(self, attempt: Callable[[], _Attempt[R]]) -> Observable[R]:
        """Per subscription, build a fresh attempt (its own state) and run it; answer exactly one
        item, classified on any fault."""

        def subscribe(
            observer: abc.ObserverBase[R], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            run, on_fault, backstop = attempt()
            answered = False

            def answer(response: R) -> None:
                nonlocal answered
                if answered:
                    return
                answered = True
                observer.on_next(response)
                observer.on_completed()

            def on_error(exc: Exception) -> None:
                answer(on_fault(exc))

            def on_completed() -> None:
                if not answered:
                    answer(backstop())

            subscription = from_async(run).subscribe(answer, on_error, on_completed)
            return Disposable(subscription.dispose)

        return Observable(subscribe)

    async def _answer_now(self, attempt: Callable[[], _Attempt[R]]) -> R:
        """:meth:`_answer_once` for an in-process caller: the attempt awaited directly, with the
        same classification (a cancellation from inside is answered; the caller's own
        cancellation propagates: nobody is left to answer)."""
        run, on_fault, _ = attempt()
        try:
            return await run()
        except asyncio.CancelledError as cancelled:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return on_fault(cancelled)
        except Exception as exc:  # noqa: BLE001 - classified and answered, never dropped
            return on_fault(exc)

    def _requester(self, access: AccessContext | None, node: MeshNode | None) -> AccessContext:
        if access is not None:
            return access
        if node is not None and node.created_by:
            return AccessContext(user=node.created_by)
        raise NodeAccessDeniedError(
            "the request names no requester (neither access nor node.created_by)"
        )

    def _fail_fast(self, node: MeshNode, access: AccessContext | None) -> None:
        """Checks that need no store: path (reserved segments are the system's), type/content
        presence, content size."""
        is_system = access is not None and access.is_system
        validate_path(node.path, allow_reserved=is_system)
        if node.node_type is None and node.content is None:
            raise NodeValidationError(
                f"node '{node.path}' has neither a node_type nor content", path=node.path
            )
        if node.content is not None:
            validate_content(node.path, node.content)
            size = len(json.dumps(node.content, ensure_ascii=False, allow_nan=False).encode())
            if size > MAX_CONTENT_BYTES:
                raise NodeValidationError(
                    f"node '{node.path}': content is {size} bytes; at most {MAX_CONTENT_BYTES}",
                    path=node.path,
                )

    def _validate_content(self, node: MeshNode, access: AccessContext) -> None:
        for validator in self.validators:
            validator(node, access)
        if self.node_types is not None and node.node_type is not None:
            self.node_types.validate(node)

    # ------------------------------------------------------------------ partitions

    async def _facts(
        self, partition: str, user: str, *also: str
    ) -> tuple[PartitionFacts, dict[str, MeshNode]]:
        """Root, grant and ownership record — and the paths ``also`` names — read together in
        ONE store call (one snapshot: a concurrent heal is seen whole or not at all); every read
        fault propagates. Returns the facts and every node found."""
        root, grant, owner = partition, grant_path(partition, user), owner_path(partition)
        found: dict[str, MeshNode] = await self._ask("read_many", [*also, root, grant, owner])
        facts = PartitionFacts(partition, found.get(root), found.get(grant), found.get(owner))
        return facts, found

    async def _write_system(self, node: MeshNode, heals: list[str]) -> None:
        """Write a system record; a record already there counts as success (a heal race).

        A record this attempt did write is appended to ``heals``: an answer that would say
        "Nothing was written" names it instead.
        """
        stamped = node.model_copy(
            update={"created_by": SYSTEM_USER, "created_at": _now(), "version": 1}
        )
        try:
            await self._ask("write", stamped)
        except StoreConflictError:
            logger.bind(path=node.path).debug("system record '{}' already exists", node.path)
            return
        heals.append(node.path)

    async def _bootstrap(
        self,
        partition: str,
        access: AccessContext,
        verb: str,
        *,
        creating: str | None,
        heals: list[str],
        heal: bool = True,
        absent: str | None = None,
        facts: PartitionFacts | None = None,
    ) -> PartitionFacts:
        """Authorise ``verb`` in ``partition`` and, with ``heal``, heal a clean absence."""
        facts = await self._authorise(
            partition, access, verb, creating=creating, absent=absent, facts=facts
        )
        if heal:
            facts = await self._heal(facts, access, verb, creating=creating, heals=heals)
        return facts

    async def _authorise(
        self,
        partition: str,
        access: AccessContext,
        verb: str,
        *,
        creating: str | None,
        absent: str | None = None,
        facts: PartitionFacts | None = None,
    ) -> PartitionFacts:
        """Read the partition's facts (unless ``facts`` were just read) and decide; writes
        nothing (every read fault propagates).

        A partition seen NEW authorises nothing but its own claim (:meth:`_heal`): a verb that
        needs an existing node there (``absent`` is its refusal) is answered "no node" from this
        snapshot, whatever another request creates later. Deciding it on the policy's "may open
        a partition" would let a user with no rights act on a node another user creates in the
        partition meanwhile (the delete race of issue 20).

        Raises :class:`NodeAccessDeniedError` when the policy refuses ``verb``.
        """
        if facts is None:
            facts, _ = await self._facts(partition, access.user)
        if facts.is_new:
            if absent is not None:
                raise NodeValidationError(absent, path=creating)
            if not self.policy.may_open_partition(access, partition):
                raise NodeAccessDeniedError(
                    f"'{access.user}' may not open the new partition '{partition}'",
                    path=creating,
                )
            return facts
        self._check_may(facts, access, verb, creating)
        return facts

    def _check_may(
        self, facts: PartitionFacts, access: AccessContext, verb: str, creating: str | None
    ) -> None:
        if not self.policy.may(access, verb, facts):
            raise NodeAccessDeniedError(
                f"'{access.user}' holds no grant to {verb} in partition '{facts.partition}'",
                path=creating,
            )

    async def _heal(
        self,
        facts: PartitionFacts,
        access: AccessContext,
        verb: str,
        *,
        creating: str | None,
        heals: list[str],
    ) -> PartitionFacts:
        """Heal what a clean read found absent (never after a failed read: the read raised):
        claim a new partition and re-read its facts, then the root and the requester's grant."""
        partition = facts.partition
        if facts.is_new:
            await self._write_system(
                MeshNode(
                    path=owner_path(partition), node_type="Owner", content={"owner": access.user}
                ),
                heals,
            )
            # Read the facts again rather than assume the claim won: another user may have opened
            # the partition in between (their ownership record stands; ours was refused as
            # "already exists"), and must not be handed a grant in someone else's partition.
            facts, _ = await self._facts(partition, access.user)
            self._check_may(facts, access, verb, creating)
        if facts.root is None and creating != partition:
            await self._write_system(
                MeshNode(path=partition, node_type="Partition", content={}), heals
            )
        if facts.grant is None and not facts.system_owned and not access.is_system:
            await self._write_system(
                MeshNode(
                    path=grant_path(partition, access.user),
                    node_type="Grant",
                    content={"permissions": ["*"]},
                ),
                heals,
            )
        return facts

    # ------------------------------------------------------------------ pending writes

    def _record(
        self,
        node: MeshNode,
        access: AccessContext | None,
        request_id: str,
        origin: Literal["create", "create_nodes"],
        *,
        log: bool = True,
    ) -> _Recorded:
        """Record an UNAVAILABLE create for one re-issue.

        The recording step can never prevent the answer: whatever it raises (a journal that
        cannot be written, a value the journal cannot encode, a defect) is logged at ERROR and
        the answer says the write will not be re-issued. Another requester's outstanding intent
        for the same path is never displaced; this one is then not recorded, and says so.
        ``log=False``: the caller reports failures itself (a bulk summarises them).
        """
        if not self.record_pending_writes:
            return _Recorded(
                False,
                " It will not be re-issued by rxmesh: this mesh does not record pending writes.",
                "this mesh does not record pending writes",
            )
        requester = access.user if access is not None else (node.created_by or "unknown")
        try:
            intent = PendingWrite(
                node=node, requester=requester, access=access, request_id=request_id, origin=origin
            )
            self.ledger.record(intent)
        except PendingWriteHeldError as exc:
            if log:
                logger.bind(
                    event="pending_write_held", path=node.path, request_id=request_id
                ).warning(
                    "pending write for '{}' (request {}) not recorded: {}",
                    node.path,
                    request_id,
                    exc,
                )
            return _Recorded(
                False,
                " It will not be re-issued by rxmesh: a create of this path by another "
                "requester is already pending; re-issue this request yourself once the store "
                "answers again.",
                "another requester's create of this path is already pending",
            )
        except Exception as exc:  # noqa: BLE001 - logged at ERROR and told in the answer
            if log:
                logger.bind(
                    event="journal_failed", path=node.path, error_type=type(exc).__name__
                ).opt(exception=exc).error(
                    "pending write for '{}' could NOT be recorded: {}: {}",
                    node.path,
                    type(exc).__name__,
                    exc,
                )
            why = f"{type(exc).__name__}: {exc}"
            return _Recorded(
                False,
                f" The pending write could NOT be journaled ({why}); it will not be re-issued.",
                why,
            )
        return _Recorded(True, "")

    # ------------------------------------------------------------------ create

    def create_node(
        self, request: CreateNodeRequest | Mapping[str, Any] | str | bytes
    ) -> Observable[CreateNodeResponse]:
        """Create one node; the observable answers exactly one :class:`CreateNodeResponse`.

        A classified failure is an answer, never an error. A malformed request (a mapping or JSON
        text that does not validate) is answered INVALID_PATH / VALIDATION_FAILED naming the field.
        """
        self._check_open()
        try:
            req = _parse(CreateNodeRequest, request)
        except (ValidationError, ValueError) as exc:
            reason, text = _parse_failure(exc)
            return self._immediate(CreateNodeResponse.fail(_request_id_of(request), reason, text))

        access = req.access
        operation = f"Node creation at '{req.node.path}'"
        return self._answer_once(lambda: self._create_attempt(req, access, operation))

    def _create_attempt(
        self, req: CreateNodeRequest, access: AccessContext | None, operation: str
    ) -> _Attempt[CreateNodeResponse]:
        write_failures: list[Exception] = []  # this subscription's write attempts that failed
        heals: list[str] = []  # the system records this subscription's attempt wrote

        def on_fault(exc: BaseException) -> CreateNodeResponse:
            verdict = self._judge(exc, operation, "creating", req.node.path, heals)
            error = verdict.error
            unknown = verdict.unreachable and any(map(is_write_outcome_unknown, write_failures))
            if unknown:
                # An attempt's connection died after the INSERT left: it may have committed.
                error = verdict.annotate(describe_may_have_partially_landed(operation))
            recorded = False
            if verdict.unreachable and not req.reissued_after_unavailable:
                outcome = self._record(
                    req.node, access or self._maybe(req), req.request_id, "create"
                )
                recorded = outcome.recorded
                error += outcome.note
            response = CreateNodeResponse(
                request_id=req.request_id,
                success=False,
                rejection_reason=verdict.reason,
                error=error,
                outcome_unknown=unknown,
                recorded_for_reissue=recorded,
            )
            if verdict.judged:
                self._settle_by_answer(req, req.node.path, response)
            return response

        def backstop() -> CreateNodeResponse:
            return CreateNodeResponse.fail(
                req.request_id, RejectionReason.UNKNOWN, f"{operation} completed without an answer"
            )

        async def run() -> CreateNodeResponse:
            node = await self._create_one(req, write_failures, heals)
            self._created.on_next(node)
            response = CreateNodeResponse.created(req.request_id, node)
            self._settle_by_answer(req, node.path, response)
            return response

        return run, on_fault, backstop

    def _maybe(self, req: CreateNodeRequest) -> AccessContext | None:
        try:
            return self._requester(req.access, req.node)
        except NodeAccessDeniedError:
            return None

    def _immediate(self, response: R) -> Observable[R]:
        async def run() -> R:
            return response

        return self._answer_once(lambda: (run, lambda exc: response, lambda: response))

    def _judge(
        self, exc: BaseException, operation: str, doing: str, path: str, heals: Sequence[str] = ()
    ) -> Judgement:
        return judge(
            exc, operation=operation, doing=doing, path=path, store=self.store.name, written=heals
        )

    def _settle_by_answer(
        self,
        req: CreateNodeRequest | CreateNodesRequest,
        path: str,
        response: CreateNodeResponse,
    ) -> None:
        """The caller's own re-issue of a recorded request was answered: settle the intent now.

        An intent is a promise to re-issue a request that got no answer. Once the same request
        (same path and request id) is answered by the store — created, or judged — that promise is
        kept; re-issuing it later could resurrect a node the caller deleted meanwhile (issue 20).
        The recovery's own re-issues settle themselves.
        """
        if req.reissued_after_unavailable:
            return
        intent = self.ledger.outstanding(path, req.request_id)
        if intent is None:
            return
        outcome = outcome_of(intent, response)
        outcome = outcome.model_copy(
            update={"detail": f"{outcome.detail} (the caller's own re-issue was answered)".strip()}
        )
        try:
            self.ledger.settle_if_outstanding(intent, outcome)
        except JournalError:
            pass  # settled and published; the failed delete was logged at ERROR by the ledger

    async def _create_one(
        self, req: CreateNodeRequest, write_failures: list[Exception], heals: list[str]
    ) -> MeshNode:
        node = req.node
        access = self._requester(req.access, node)
        self._fail_fast(node, access)  # the path rules too, with the requester's reserved rights
        # The existence check and the partition's facts in ONE read (one round trip, one
        # snapshot); "already exists" still outranks every later refusal, as the chain's order says.
        facts, found = await self._facts(node.partition, access.user, node.path)
        existing = found.get(node.path)
        if existing is not None:
            if existing.request_id == req.request_id:
                return existing  # an ambiguous commit that did land: this request created it
            raise NodeExistsError(f"a node already exists at '{node.path}'", path=node.path)
        # Content rules need no store; run them first so bad input writes nothing (not even a
        # partition heal), but let a permission refusal outrank them, as the chain's order says.
        content_error: NodeValidationError | None = None
        try:
            self._validate_content(node, access)
        except NodeValidationError as exc:
            content_error = exc
        await self._bootstrap(
            node.partition,
            access,
            "create",
            creating=node.path,
            heals=heals,
            heal=content_error is None,
            facts=facts,
        )
        if content_error is not None:
            raise content_error
        stamped = node.model_copy(
            update={
                "created_by": access.user,
                "created_at": _now(),
                "version": max(1, node.version),
                "request_id": req.request_id,
            }
        )
        store = self.store

        async def write() -> MeshNode:
            try:
                written: MeshNode = await call(store, "write", stamped)
            except Exception as failure:
                write_failures.append(failure)  # judged by the arm: may this write have landed?
                raise
            return written

        try:
            return await self._ladder.call(write, scheduler=self._scheduler)
        except StoreConflictError as exc:
            raise NodeExistsError(
                f"a node already exists at '{node.path}' (written by another request)",
                path=node.path,
            ) from exc

    async def create(self, node: MeshNode, *, access: AccessContext | None = None) -> MeshNode:
        """Create ``node`` and return it as stored, or raise one exception type per reason.

        Raises:
            StoreUnavailableError: UNAVAILABLE (re-issuing the same node is meaningful).
            NodeExistsError: NODE_ALREADY_EXISTS.
            NodeAccessDeniedError: FORBIDDEN (also a ``PermissionError``).
            InvalidPathError: INVALID_PATH (also a ``ValueError``).
            InvalidNodeTypeError: INVALID_NODE_TYPE (also a ``ValueError``).
            NodeValidationError: VALIDATION_FAILED (also a ``ValueError``).
            NodeOperationError: UNKNOWN.
        """
        self._check_open()
        try:
            req = _parse(CreateNodeRequest, CreateNodeRequest(node=node, access=access))
        except (ValidationError, ValueError) as exc:
            reason, text = _parse_failure(exc)
            raise error_for(reason, text, node.path) from exc
        operation = f"Node creation at '{req.node.path}'"
        # The same attempt create_node runs, awaited directly (no observable in between).
        response = await self._answer_now(
            lambda: self._create_attempt(req, req.access, operation)
        )
        if response.success and response.node is not None:
            return response.node
        raise error_for(response.rejection_reason, response.error, node.path)

    # ------------------------------------------------------------------ bulk create

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
            req = _parse(CreateNodesRequest, request)
        except (ValidationError, ValueError) as exc:
            reason, text = _parse_failure(exc)
            return self._immediate(
                CreateNodesResponse(
                    request_id=_request_id_of(request),
                    success=False,
                    rejection_reason=reason,
                    error=text,
                )
            )
        refusal = self._bulk_phase0(req)
        if refusal is not None:
            return self._immediate(refusal)
        operation = f"Bulk creation of {len(req.nodes)} node(s)"
        return self._answer_once(lambda: self._bulk_attempt(req, operation))

    def _bulk_attempt(
        self, req: CreateNodesRequest, operation: str
    ) -> _Attempt[CreateNodesResponse]:
        state = _BulkState()  # this subscription's phases: what was attempted, what landed

        async def run() -> CreateNodesResponse:
            try:
                return await self._bulk(req, state)
            except asyncio.CancelledError as cancelled:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # the subscriber left: nobody to answer
                # The very exception, chain and all: a cancellation carrying a timeout is a fault.
                return await self._bulk_fault(req, state, operation, cancelled)
            except Exception as exc:  # noqa: BLE001 - classified and answered, never dropped
                return await self._bulk_fault(req, state, operation, exc)

        def on_fault(exc: BaseException) -> CreateNodesResponse:
            return self._bulk_answer(req, state, operation, exc)

        def backstop() -> CreateNodesResponse:
            return CreateNodesResponse(
                request_id=req.request_id,
                success=False,
                rejection_reason=RejectionReason.UNKNOWN,
                error=f"{operation} completed without an answer",
            )

        return run, on_fault, backstop

    def _bulk_phase0(self, req: CreateNodesRequest) -> CreateNodesResponse | None:
        seen: set[str] = set()
        for node in req.nodes:
            if node.path in seen:
                return CreateNodesResponse(
                    request_id=req.request_id,
                    success=False,
                    rejection_reason=RejectionReason.INVALID_PATH,
                    error=f"path '{node.path}' appears more than once in the batch",
                )
            seen.add(node.path)
        access = req.access
        if access is None and req.nodes[0].created_by:
            access = AccessContext(user=req.nodes[0].created_by)
        for node in req.nodes:
            try:
                self._fail_fast(node, access)
            except NodeValidationError as exc:
                reason = (
                    RejectionReason.INVALID_PATH
                    if isinstance(exc, InvalidPathError)
                    else RejectionReason.VALIDATION_FAILED
                )
                return CreateNodesResponse(
                    request_id=req.request_id,
                    success=False,
                    rejection_reason=reason,
                    error=f"first invalid entry '{node.path}': {exc}",
                )
        return None

    async def _bulk(self, req: CreateNodesRequest, state: _BulkState) -> CreateNodesResponse:
        first = req.nodes[0]
        access = self._requester(req.access, first)
        paths = [node.path for node in req.nodes]
        present: dict[str, MeshNode] = await self._ask("read_many", paths)
        todo: list[MeshNode] = []
        for node in req.nodes:
            existing = present.get(node.path)
            if existing is None:
                todo.append(node)
            elif existing.request_id == req.request_id:
                state.earlier[node.path] = existing  # landed by this very request earlier
            else:
                state.already_present.append(node.path)
        # Phase 3's checks need no store: run them first so a bad batch heals no partition, but
        # let a permission refusal (phase 2) outrank them in the answer, as the phases' order says.
        content_error: NodeValidationError | None = None
        for node in todo:
            try:
                self._validate_content(node, access)
            except NodeValidationError as exc:
                content_error = type(exc)(f"entry '{node.path}': {exc}", path=node.path)
                content_error.__cause__ = exc
                break
        # Every partition's facts are read and judged before any is healed: a failed read or a
        # refusal in one partition must not leave another one claimed.
        judged = [
            await self._authorise(partition, access, "create", creating=None)
            for partition in sorted({node.partition for node in todo})
        ]
        if content_error is not None:
            raise content_error
        for facts in judged:
            await self._heal(facts, access, "create", creating=None, heals=state.heals)
        now = _now()
        stamped = [
            node.model_copy(
                update={
                    "created_by": access.user,
                    "created_at": now,
                    "version": max(1, node.version),
                    "request_id": req.request_id,
                }
            )
            for node in todo
        ]
        by_path = {node.path: node for node in stamped}
        state.attempted = stamped
        if stamped:
            state.write_started = True
            await self._drain(
                self.store.write_many(stamped, req.window).pipe(self._retry),
                lambda window: state.landed.update({p: by_path[p] for p in window.paths}),
            )
        unsettled = [p for p in by_path if p not in state.landed]
        if unsettled:
            # Rows skipped by ON CONFLICT: ours (an ambiguous commit) or someone else's.
            found: dict[str, MeshNode] = await self._ask("read_many", unsettled)
            for path in unsettled:
                row = found.get(path)
                if row is not None and row.request_id == req.request_id:
                    state.landed[path] = row
                else:
                    state.already_present.append(path)
        mine = {**state.earlier, **state.landed}
        created = tuple(mine[p] for p in paths if p in mine)
        for node in created:
            if node.path in state.landed:
                self._created.on_next(node)
        response = CreateNodesResponse(
            request_id=req.request_id,
            success=True,
            created=created,
            already_present=tuple(state.already_present),
        )
        self._settle_bulk_by_answer(req, response)
        return response

    async def _drain(self, source: Observable[T], on_item: Callable[[T], None]) -> None:
        """Subscribe to ``source`` until it completes, calling ``on_item`` for each item."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def on_error(exc: Exception) -> None:
            if not done.done():
                done.set_exception(exc)

        def on_completed() -> None:
            if not done.done():
                done.set_result(None)

        subscription = source.subscribe(on_item, on_error, on_completed)
        try:
            await done
        finally:
            subscription.dispose()

    async def _bulk_fault(
        self, req: CreateNodesRequest, state: _BulkState, operation: str, exc: BaseException
    ) -> CreateNodesResponse:
        """Arm 0: once a write had started, probe which attempted paths are present now."""
        if state.write_started:
            unsettled = [n.path for n in state.attempted if n.path not in state.landed]
            if unsettled:
                try:
                    # No retry here: a terminal arm never retries; a failing probe finds nothing.
                    found = await call(self.store, "read_many", unsettled)
                except Exception as probe_error:  # noqa: BLE001 - reported, counts as none found
                    logger.bind(event="probe_failed").warning(
                        "landed-probe after a failed bulk write failed ({}): counting none found",
                        probe_error,
                    )
                    found = {}
                for path in unsettled:
                    row = found.get(path)
                    if row is not None and row.request_id == req.request_id:
                        state.landed[path] = row
        return self._bulk_answer(req, state, operation, exc)

    def _bulk_answer(
        self, req: CreateNodesRequest, state: _BulkState, operation: str, exc: BaseException
    ) -> CreateNodesResponse:
        landed = tuple(n for n in req.nodes if n.path in state.landed)
        mine = {**state.earlier, **state.landed}  # this request's rows, earlier attempts included
        created_rows = tuple(mine[n.path] for n in req.nodes if n.path in mine)
        not_created = tuple(
            n for n in req.nodes if n.path not in mine and n.path not in state.already_present
        )
        unreachable = is_store_unreachable(exc)
        recorded: tuple[str, ...] = ()
        not_recorded: tuple[str, ...] = ()
        journal_note = ""
        if unreachable and not req.reissued_after_unavailable and not_created:
            recorded, not_recorded, journal_note = self._record_bulk(req, not_created)
        diagnosis = unreachable_note()[0] if unreachable and landed else ""
        if landed:
            logger.bind(
                event="partial_landing",
                store=self.store.name,
                created=len(landed),
                not_created=len(not_created),
                error_type=type(exc).__name__,
            ).error(
                "{} PARTIALLY LANDED: {} created, {} not created, after {}: {}",
                operation,
                len(landed),
                len(not_created),
                type(exc).__name__,
                exc,
            )
            return CreateNodesResponse(
                request_id=req.request_id,
                success=False,
                created=created_rows,
                already_present=tuple(state.already_present),
                not_created=not_created,
                rejection_reason=RejectionReason.UNKNOWN,
                error=annotate(
                    f"{operation} partially landed: {len(landed)} created, {len(not_created)} "
                    f"not created ({type(exc).__name__}: {exc}). "
                    + describe_may_have_partially_landed(operation),
                    diagnosis,
                )
                + journal_note,
                recorded_for_reissue=recorded,
                not_recorded=not_recorded,
            )
        verdict = self._judge(exc, operation, "bulk-creating", req.nodes[0].path, state.heals)
        error = verdict.error
        if verdict.unreachable and state.write_started:
            error = verdict.annotate(describe_may_have_partially_landed(operation))
        response = CreateNodesResponse(
            request_id=req.request_id,
            success=False,
            created=created_rows,
            already_present=tuple(state.already_present),
            not_created=not_created,
            rejection_reason=verdict.reason,
            error=error + (journal_note if verdict.unreachable else ""),
            recorded_for_reissue=recorded,
            not_recorded=not_recorded,
        )
        if verdict.judged:
            self._settle_bulk_by_answer(req, response)
        return response

    def _settle_bulk_by_answer(
        self, req: CreateNodesRequest, response: CreateNodesResponse
    ) -> None:
        """:meth:`_settle_by_answer` for each node of a bulk the store answered."""
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
            self._settle_by_answer(req, node.path, answer)

    def _record_bulk(
        self, req: CreateNodesRequest, not_created: tuple[MeshNode, ...]
    ) -> tuple[tuple[str, ...], tuple[str, ...], str]:
        """Record every node of an unreachable bulk that did not land; say which were not.

        Returns the paths recorded, the paths not recorded, and the note for the answer: counts
        and reasons in the text, the lists in the response. Failures are logged once (the first,
        with its traceback) and summarised, not once per node.
        """
        access = req.access or self._maybe(CreateNodeRequest(node=req.nodes[0]))
        recorded: list[str] = []
        refused: dict[str, list[str]] = {}  # why -> paths
        first: _Recorded | None = None
        for node in not_created:
            outcome = self._record(
                node, access, req.request_id, "create_nodes", log=first is None
            )
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

    # ------------------------------------------------------------------ update / delete / move

    def _verb(
        self,
        request_id: str,
        operation: str,
        doing: str,
        path: str,
        run: Callable[[list[str]], Awaitable[MeshNode | None]],
    ) -> Observable[NodeOperationResponse]:
        """Answer a verb once per subscription; ``run(heals)`` does its work, appending to
        ``heals`` the system records it wrote (so an UNAVAILABLE answer can name them)."""

        def attempt() -> _Attempt[NodeOperationResponse]:
            heals: list[str] = []  # this subscription's heal writes

            def on_fault(exc: BaseException) -> NodeOperationResponse:
                verdict = self._judge(exc, operation, doing, path, heals)
                return NodeOperationResponse(
                    request_id=request_id,
                    success=False,
                    rejection_reason=verdict.reason,
                    error=verdict.error,
                )

            def backstop() -> NodeOperationResponse:
                return NodeOperationResponse(
                    request_id=request_id,
                    success=False,
                    rejection_reason=RejectionReason.UNKNOWN,
                    error=f"{operation} completed without an answer",
                )

            async def answer() -> NodeOperationResponse:
                node = await run(heals)
                return NodeOperationResponse(request_id=request_id, success=True, node=node)

            return answer, on_fault, backstop

        return self._answer_once(attempt)

    def update_node(
        self, request: UpdateNodeRequest | Mapping[str, Any] | str | bytes
    ) -> Observable[NodeOperationResponse]:
        """Replace the type/content of an existing node; answers one response."""
        self._check_open()
        try:
            req = _parse(UpdateNodeRequest, request)
        except (ValidationError, ValueError) as exc:
            return self._refused(request, exc)
        node = req.node

        async def run(heals: list[str]) -> MeshNode | None:
            validate_path(node.path)
            access = self._requester(req.access, node)
            self._fail_fast(node, access)
            missing = f"no node at '{node.path}' to update"
            existing: MeshNode | None = await self._ask("read", node.path)
            if existing is None:
                raise NodeValidationError(missing, path=node.path)
            await self._authorise(
                node.partition, access, "update", creating=node.path, absent=missing
            )
            self._validate_content(node, access)
            updated: MeshNode | None = await self._ask("update", node)
            if updated is None:
                raise NodeValidationError(f"no node at '{node.path}' to update", path=node.path)
            return updated

        return self._verb(
            req.request_id, f"Node update at '{node.path}'", "updating", node.path, run
        )

    def delete_node(
        self, request: DeleteNodeRequest | Mapping[str, Any] | str | bytes
    ) -> Observable[NodeOperationResponse]:
        """Delete a node (not its children); answers one response."""
        self._check_open()
        try:
            req = _parse(DeleteNodeRequest, request)
        except (ValidationError, ValueError) as exc:
            return self._refused(request, exc)
        path = req.path

        async def run(heals: list[str]) -> MeshNode | None:
            access = self._requester(req.access, None)
            validate_path(path, allow_reserved=access.is_system)
            missing = f"no node at '{path}' to delete"
            await self._authorise(
                partition_of(path), access, "delete", creating=path, absent=missing
            )
            if not await self._ask("delete", path):
                raise NodeValidationError(missing, path=path)
            return None

        return self._verb(req.request_id, f"Node deletion at '{path}'", "deleting", path, run)

    def move_node(
        self, request: MoveNodeRequest | Mapping[str, Any] | str | bytes
    ) -> Observable[NodeOperationResponse]:
        """Move a node to a free path; answers one response."""
        self._check_open()
        try:
            req = _parse(MoveNodeRequest, request)
        except (ValidationError, ValueError) as exc:
            return self._refused(request, exc)
        source, target = req.source, req.target

        async def run(heals: list[str]) -> MeshNode | None:
            access = self._requester(req.access, None)
            validate_path(source, allow_reserved=access.is_system)
            validate_path(target, allow_reserved=access.is_system)
            source_partition, target_partition = partition_of(source), partition_of(target)
            missing = f"no node at '{source}' to move"
            # Every read first — the source's partition, the source, the target's partition —
            # and only then heal a new target partition: a refused move writes nothing.
            await self._authorise(
                source_partition, access, "move", creating=target, absent=missing
            )
            if await self._ask("read", source) is None:
                raise NodeValidationError(missing, path=source)
            if target_partition != source_partition:
                facts = await self._authorise(target_partition, access, "move", creating=target)
                await self._heal(facts, access, "move", creating=target, heals=heals)
            try:
                moved: MeshNode | None = await self._ask("move", source, target)
            except StoreConflictError as exc:
                raise NodeExistsError(f"a node already exists at '{target}'", path=target) from exc
            if moved is None:
                raise NodeValidationError(f"no node at '{source}' to move", path=source)
            return moved

        return self._verb(
            req.request_id, f"Node move from '{source}' to '{target}'", "moving", source, run
        )

    def _refused(
        self, request: object, exc: ValidationError | ValueError
    ) -> Observable[NodeOperationResponse]:
        reason, text = _parse_failure(exc)
        return self._immediate(
            NodeOperationResponse(
                request_id=_request_id_of(request),
                success=False,
                rejection_reason=reason,
                error=text,
            )
        )

    async def _in_process(
        self, source: Observable[NodeOperationResponse], path: str
    ) -> MeshNode | None:
        response = await first_value(source)
        if response.success:
            return response.node
        raise error_for(response.rejection_reason, response.error, path)

    async def update(self, node: MeshNode, *, access: AccessContext | None = None) -> MeshNode:
        """Update ``node`` in place and return it as stored; raises one type per reason."""
        result = await self._in_process(
            self.update_node(UpdateNodeRequest(node=node, access=access)), node.path
        )
        assert result is not None  # a successful update always carries the node
        return result

    async def delete(self, path: str, *, access: AccessContext | None = None) -> None:
        """Delete the node at ``path``; raises one exception type per reason."""
        await self._in_process(self.delete_node(DeleteNodeRequest(path=path, access=access)), path)

    async def move(
        self, source: str, target: str, *, access: AccessContext | None = None
    ) -> MeshNode:
        """Move the node at ``source`` to ``target``; raises one exception type per reason."""
        result = await self._in_process(
            self.move_node(MoveNodeRequest(source=source, target=target, access=access)), source
        )
        assert result is not None  # a successful move always carries the node
        return result
