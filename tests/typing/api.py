"""Type-only exercise of the public API of rxmesh.faults and rxmesh.exceptions (checked by mypy).

Never imported by the test suite; ``mypy`` (no arguments) checks it through pyproject's
``[tool.mypy] files``. Every call uses the types the API promises, so a signature change that
would break a user's code breaks this file first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from rxmesh.exceptions import (
    BuildCoordinationUnreachableError,
    DeliveryErrorType,
    DeliveryFailure,
    InvalidNodeTypeError,
    InvalidPathError,
    MeshDisposedError,
    NodeAccessDeniedError,
    NodeExistsError,
    NodeOperationError,
    NodeValidationError,
    QueryProviderStalledError,
    RxMeshError,
    StoreError,
    StorePoolExhaustedError,
    StoreUnavailableError,
)
from rxmesh.faults import (
    MAX_CHAIN_FRAMES,
    NO_ANSWER_IN_TIME_PHRASES,
    TRANSIENT_CONNECT_SQLSTATES,
    describe_may_have_partially_landed,
    describe_not_attempted,
    exception_chain,
    is_cooperative_cancellation,
    is_coordination_unreachable,
    is_db_frame,
    is_no_answer_in_time,
    is_standing_watch_transient,
    is_store_unreachable,
    is_transient_connect_fault,
)

Classifier = Callable[[BaseException | None], bool]

# Every classifier has the one signature, so any of them plugs into a `should_retry=` or
# `is_transient=` hook.
classifiers: tuple[Classifier, ...] = (
    is_transient_connect_fault,
    is_store_unreachable,
    is_cooperative_cancellation,
    is_standing_watch_transient,
    is_no_answer_in_time,
    is_coordination_unreachable,
)

sqlstates: frozenset[str] = TRANSIENT_CONNECT_SQLSTATES
cap: int = MAX_CHAIN_FRAMES
phrases: tuple[str, ...] = NO_ANSWER_IN_TIME_PHRASES


def answer_text(path: str, write_started: bool) -> str:
    operation = f"Node creation at {path!r}"
    if write_started:
        return describe_may_have_partially_landed(operation)
    return describe_not_attempted(operation)


def classify(exc: BaseException | None) -> str:
    if is_store_unreachable(exc):
        return "UNAVAILABLE"
    if is_cooperative_cancellation(exc):
        return "CANCELLED"
    if is_no_answer_in_time(exc):
        return "NO_ANSWER"
    return "WATCH_TRANSIENT" if is_standing_watch_transient(exc) else "UNKNOWN"


def frames_of(exc: BaseException) -> list[BaseException]:
    chain: Iterator[BaseException] = exception_chain(exc)
    return [frame for frame in chain if is_db_frame(frame)]


def build_exceptions() -> list[BaseException]:
    store = StoreError(
        "store 'postgres@db:5432' unreachable",
        sqlstate="08006",
        store="postgres@db:5432",
        transient=True,
        may_have_run=False,
    )
    sqlstate: str | None = store.sqlstate
    transient: bool = store.transient
    may_have_run: bool | None = store.may_have_run
    store_name: str | None = store.store

    pool = StorePoolExhaustedError("this process's pool had no free connection")
    stalled = QueryProviderStalledError(["postgres@db:5432"], 15.0, "NodeType census")
    providers: tuple[str, ...] = stalled.providers
    budget: float = stalled.budget

    nack = DeliveryFailure(DeliveryErrorType.FAILED, "Response did not arrive on time")
    nack_from_text = DeliveryFailure("FORBIDDEN", "Access denied")
    nobody = DeliveryFailure(DeliveryErrorType.NO_RESPONDERS, "no responders on 'admin/build'")
    error_type: DeliveryErrorType = nack.error_type
    message: str = nack.message

    not_found = NodeOperationError("Unexpected error: boom", path="a/b")
    path: str | None = not_found.path

    verbs: list[NodeOperationError] = [
        not_found,
        StoreUnavailableError(describe_not_attempted("Node creation at 'a/b'"), path="a/b"),
        NodeExistsError("a node already exists at 'a/b'", path="a/b"),
        NodeAccessDeniedError("no grant on 'a'", path="a/b"),
        NodeValidationError("content is invalid", path="a/b"),
        InvalidPathError("empty path segment"),
        InvalidNodeTypeError("unknown node type 'Widget'"),
    ]
    as_value_error: ValueError = InvalidPathError("bad path")
    as_permission_error: PermissionError = NodeAccessDeniedError("forbidden")
    rx: list[RxMeshError] = [
        store,
        pool,
        stalled,
        nack,
        nack_from_text,
        nobody,
        BuildCoordinationUnreachableError("admin/build: no answer after 3 attempts"),
        MeshDisposedError("disposed"),
        *verbs,
    ]
    attributes: tuple[object, ...] = (
        sqlstate,
        transient,
        may_have_run,
        store_name,
        providers,
        budget,
        error_type,
        message,
        path,
    )
    assert len(attributes) == 9
    return [*rx, as_value_error, as_permission_error, asyncio.CancelledError(), TimeoutError()]


def verdicts() -> dict[str, str]:
    return {type(exc).__name__: classify(exc) for exc in build_exceptions()} | {
        "None": classify(None),
        "text": answer_text("a/b", write_started=False),
    }


# -- the mesh, the operators, the cache and the ledger, as a program would use them ---------------


async def a_program() -> list[str]:
    """Type-checked use of the public API beyond faults/exceptions (mypy only; never run)."""
    import reactivex

    from rxmesh import (
        AccessContext,
        CreateNodeRequest,
        CreateNodeResponse,
        CreateNodesRequest,
        CreateNodesResponse,
        Mesh,
        MeshNode,
        RejectionReason,
    )
    from rxmesh.aio import first_value
    from rxmesh.cache import SyncedQueryCache
    from rxmesh.health import HealthRegistry, HealthReport, asgi_app
    from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome
    from rxmesh.model import NodeQuery, QueryFrame
    from rxmesh.operators import fan_in, reopen_on_transient_fault, retry_transient_connect
    from rxmesh.providers import InMemoryStore
    from rxmesh.testing import FaultInjectingStore

    store = FaultInjectingStore(InMemoryStore())
    mesh = Mesh(store, ledger=PendingWriteLedger(""), retry_delays=(0.25, 0.5, 1.0))
    node = MeshNode(path="acme/a", node_type="Doc", content={"x": 1})
    response: CreateNodeResponse = await first_value(
        mesh.create_node(CreateNodeRequest(node=node, access=AccessContext(user="alice")))
    )
    created: MeshNode = await mesh.create(node, access=AccessContext(user="alice"))
    many: CreateNodesResponse = await mesh.create_many([node], request_id="k")
    bulk = await first_value(mesh.create_nodes(CreateNodesRequest(nodes=(node,), window=500)))
    query = NodeQuery(partition="acme")
    cache: SyncedQueryCache[NodeQuery, QueryFrame] = SyncedQueryCache(
        lambda q: fan_in({"memory": store.query(q)}, query=q)
    )
    watch: reactivex.Observable[QueryFrame] = reopen_on_transient_fault(lambda: cache.get(query))
    retried: reactivex.Observable[QueryFrame] = store.query(query).pipe(retry_transient_connect())
    outcomes: list[PendingWriteOutcome] = []
    mesh.ledger.outcomes.subscribe(outcomes.append)
    report: HealthReport = await HealthRegistry().report()
    app = asgi_app(HealthRegistry())
    reason: RejectionReason | None = response.rejection_reason
    return [
        created.path,
        str(bulk.success),
        str(many.created),
        str(reason),
        report.to_json(),
        repr(app),
        repr(watch),
        repr(retried),
    ]


async def a_store_awaited_and_observed() -> list[str]:
    """The ``Store`` protocol's verbs, awaited (one attempt per call), and the one adapter that
    makes a verb an observable for a pipeline (a new attempt per subscription)."""
    import reactivex

    from rxmesh.aio import first_value
    from rxmesh.model import MeshNode, WindowCommitted
    from rxmesh.operators import retry_transient_connect
    from rxmesh.providers import InMemoryStore, Store, observe
    from rxmesh.testing import FaultInjectingStore

    store: Store = FaultInjectingStore(InMemoryStore())
    node = MeshNode(path="acme/a", node_type="Doc", content={"x": 1})
    written: MeshNode = await store.write(node)
    found: MeshNode | None = await store.read("acme/a")
    rows: dict[str, MeshNode] = await store.read_many(["acme/a", "acme/b"])
    updated: MeshNode | None = await store.update(node, written.version, written.request_id)
    moved: MeshNode | None = await store.move("acme/a", "acme/b")
    deleted: bool = await store.delete("acme/b")
    windows: reactivex.Observable[WindowCommitted] = store.write_many([node], 500)
    observed: reactivex.Observable[MeshNode | None] = observe(store.read, "acme/a").pipe(
        retry_transient_connect()
    )
    again: MeshNode | None = await first_value(observed)
    kept: reactivex.Observable[MeshNode | None] = observe(
        store.update, node, expected_version=1, request_id="u-1"
    )
    return [
        str(found),
        str(sorted(rows)),
        str(updated),
        str(moved),
        str(deleted),
        repr(windows),
        str(again),
        repr(kept),
    ]


async def postgres_behind_a_pooler() -> list[str]:
    """A PostgresStore behind a transaction pooler, its statistics and its feed's health
    (issue 14's public options), typed as a user writes them."""
    from rxmesh.health import ChangeFeedCheck, HealthCheckResult
    from rxmesh.providers.postgres import (
        TARGET_SESSION_ATTRS,
        ChangeFeedUnverifiedError,
        PostgresStore,
        PostgresStoreStatistics,
    )
    from rxmesh.testing import TemporaryPgBouncer, TemporaryPostgresCluster

    direct = "postgresql://app@127.0.0.1:5432/mesh"
    bouncer = TemporaryPgBouncer("127.0.0.1", 5432, pool_mode="transaction", pool_size=20)
    store = PostgresStore(
        bouncer.dsn(direct), listen_dsn=direct, pooled=None, target_session_attrs="read-write"
    )
    try:
        await store.start()
    except ChangeFeedUnverifiedError as refused:
        return [str(refused), str(refused.pooled), refused.listen_target]
    stats: PostgresStoreStatistics = store.statistics()
    pooled: bool | None = store.pooled
    round_trip: float | None = stats.feed.probe_round_trip
    health: HealthCheckResult = ChangeFeedCheck(store)()
    standby: TemporaryPostgresCluster = TemporaryPostgresCluster().standby()
    return [
        str(pooled),
        str(round_trip),
        health.description,
        standby.dsn,
        str(sorted(TARGET_SESSION_ATTRS)),
    ]


async def a_newcomer_imports_from_the_top_level_alone() -> list[str]:
    """``from rxmesh import ...``: the mesh, its models, both stores and a create's errors."""
    from rxmesh import (
        AccessContext,
        InMemoryStore,
        Mesh,
        MeshNode,
        NodeExistsError,
        NodeQuery,
        PostgresStore,
        QueryFrame,
        StoreUnavailableError,
    )

    stores = (InMemoryStore(), PostgresStore("postgresql://app@127.0.0.1:5432/mesh"))
    mesh = Mesh(stores[0])
    node = MeshNode(path="shop/orders/1", node_type="Order", content={})
    try:
        created: MeshNode = await mesh.create(node, access=AccessContext(user="alice"))
    except (NodeExistsError, StoreUnavailableError) as refused:
        return [refused.reason or ""]
    frame: QueryFrame | None = None
    query = NodeQuery(partition="shop")
    return [created.path, query.partition or "", str(frame)]
