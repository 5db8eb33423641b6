"""The fault matrix: every verb against every fault, each cell asserting the SPEC's answer.

One test per fault (a row): the fault is put in place, the seven verbs run CONCURRENTLY against
it (so a row costs one retry ladder, not seven), the fault is lifted, and each cell is judged on
its own (answer reason, message phrases, log level, pending write recorded or not). Every write
verb answered UNAVAILABLE is recorded (update, delete and move carry their basis,
``expected_version`` and ``expected_request_id``) and, once the fault is lifted, re-issued once
with one verdict: the update, delete and move LANDED, by compare-and-set on that basis (issue
18). The table of cells is printed at the end of the run (tests/reliability/conftest.py).

Real faults (PostgreSQL, nothing simulated): refused connect, connect timeout, reset mid-stream
and stall mid-query through a FaultProxy in front of a private database on the shared server;
``pg_terminate_backend`` (57P01) limited to that database; a server restart and
``max_connections`` exhaustion (53300) on a private TemporaryPostgresCluster. The non-transient
controls are real asyncpg (or Python) exception instances injected at the store boundary by
``FaultInjectingStore(PostgresStore)``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import asyncpg
import asyncpg.exceptions as pgexc
import pytest
from pydantic import ValidationError

from rxmesh import Mesh, MeshNode
from rxmesh.aio import first_value
from rxmesh.faults import is_store_unreachable
from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome
from rxmesh.model import NodeQuery, QueryFrame
from rxmesh.operations import (
    CreateNodeRequest,
    CreateNodesRequest,
    DeleteNodeRequest,
    MoveNodeRequest,
    RejectionReason,
    UpdateNodeRequest,
    Verdict,
)
from rxmesh.operators import reopen_on_transient_fault
from rxmesh.providers.postgres import PostgresStore, quote_identifier
from rxmesh.testing import (
    FaultInjectingStore,
    FaultProxy,
    TemporaryPgBouncer,
    TemporaryPostgresCluster,
)
from tests.conftest import IN_CI, session_prefix
from tests.helpers import ALICE, LogRecords
from tests.reliability.conftest import MATRIX, VERBS

pytestmark = pytest.mark.postgres

LADDER = (0.01, 0.01, 0.01)
WAIT = 20.0
"""Bound on any one wait in a row (a row normally takes a few seconds)."""

STORE_OPTIONS: dict[str, Any] = {
    "min_size": 1,
    "max_size": 10,
    "connect_timeout": 0.5,
    "command_timeout": 1.0,
    "heartbeat_interval": 0.2,
    "heartbeat_timeout": 0.5,
    "reconnect_backoff": (0.05, 0.1, 0.2),
    "acquire_timeout": 5.0,
}


# -- the faults -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """A row: how the fault is made, and which answer the SPEC requires."""

    name: str
    how: str  # "real" / "injected" and the mechanism
    expect: str  # "unavailable" | "unknown" | "cancelled"
    error: Callable[[], BaseException] | None = None  # injected rows only


def _cancel_with_timeout() -> BaseException:
    exc = asyncio.CancelledError()
    exc.__cause__ = TimeoutError("the caller's time box fired")
    return exc


def _deserialization_error() -> BaseException:
    try:
        MeshNode.model_validate({"path": 42, "content": "not a mapping"})
    except ValidationError as exc:
        return exc
    raise AssertionError("the model accepted a malformed row")


INFRA = [
    Fault("connect refused", "real: proxy refuses", "unavailable"),
    Fault("connect timeout", "real: proxy accepts, never answers", "unavailable"),
    Fault("reset mid-stream", "real: proxy RST during the call", "unavailable"),
    Fault("stall mid-query", "real: proxy stops forwarding", "unavailable"),
    Fault("pg_terminate_backend (57P01)", "real: terminate own backends", "unavailable"),
    Fault("server restart", "real: private cluster stopped", "unavailable"),
    Fault("too many connections (53300)", "real: private cluster full", "unavailable"),
]
CONTROLS = [
    Fault(
        "42P01 undefined table",
        "injected: asyncpg",
        "unknown",
        lambda: pgexc.UndefinedTableError('relation "nodes" does not exist'),
    ),
    Fault(
        "23505 unique violation",
        "injected: asyncpg",
        "unknown",
        lambda: pgexc.UniqueViolationError("duplicate key value violates unique constraint"),
    ),
    Fault(
        "42601 syntax error",
        "injected: asyncpg",
        "unknown",
        lambda: pgexc.PostgresSyntaxError('syntax error at or near "SELEC"'),
    ),
    Fault(
        "42501 insufficient privilege",
        "injected: asyncpg",
        "unknown",
        lambda: pgexc.InsufficientPrivilegeError("permission denied for table nodes"),
    ),
    Fault(
        "57014 query cancelled",
        "injected: asyncpg",
        "unknown",
        lambda: pgexc.QueryCanceledError("canceling statement due to statement timeout"),
    ),
    Fault(
        "40001 serialization failure",
        "injected: asyncpg",
        "unknown",
        lambda: pgexc.SerializationError("could not serialize access"),
    ),
    Fault("deserialization error", "injected: pydantic", "unknown", _deserialization_error),
    Fault(
        "cooperative cancellation", "injected: CancelledError", "cancelled", asyncio.CancelledError
    ),
    Fault(
        "cancellation carrying a timeout",
        "injected: CancelledError<-TimeoutError",
        "unknown",
        _cancel_with_timeout,
    ),
]
POOLER = " behind PgBouncer"
"""Suffix of the rows run through a real PgBouncer (transaction pooling): the store's pool goes
through the pooler, its LISTEN connection straight to the server (``listen_dsn``), and the fault
is made between them and the server (the pooler itself keeps running, as in production)."""
POOLED = [
    Fault(f"connect refused{POOLER}", "real: server refuses the pooler", "unavailable"),
    Fault(f"reset mid-stream{POOLER}", "real: RST pooler<->server mid-call", "unavailable"),
    Fault(f"stall mid-query{POOLER}", "real: pooler<->server stops", "unavailable"),
    Fault(
        f"pg_terminate_backend (57P01){POOLER}",
        "real: terminate the pooler's backends",
        "unavailable",
    ),
]
REQUIRED = {
    "unavailable": "UNAVAILABLE, ERROR, every write recorded, one verdict each",
    "unknown": "UNKNOWN, ERROR, nothing recorded",
    "cancelled": "UNAVAILABLE (cancelled), DEBUG, nothing recorded",
}
for _fault in (*INFRA, *POOLED, *CONTROLS):
    MATRIX.rows[_fault.name] = _fault.how
    MATRIX.expected[_fault.name] = REQUIRED[_fault.expect]


# -- one row ----------------------------------------------------------------------------------


@dataclass
class Watch:
    """A standing watch (reopen_on_transient_fault over the mesh's query) and what it saw."""

    frames: list[QueryFrame] = field(default_factory=list)
    reopens: list[BaseException] = field(default_factory=list)
    error: BaseException | None = None
    completed: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def on_next(self, frame: QueryFrame) -> None:
        self.frames.append(frame)
        self.changed.set()

    def on_error(self, error: BaseException) -> None:
        self.error = error
        self.changed.set()

    def on_reopen(self, error: BaseException, attempt: int, delay: float) -> None:
        self.reopens.append(error)
        self.changed.set()

    async def until(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

    def saw(self, path: str) -> bool:
        return any(node.path == path for frame in self.frames for node in frame.nodes)


@dataclass
class Row:
    """A mesh over one store, seeded in partition ``p``, and what each verb answered."""

    mesh: Mesh
    p: str
    outcomes: list[PendingWriteOutcome] = field(default_factory=list)
    answers: dict[str, Any] = field(default_factory=dict)
    watch: Watch = field(default_factory=Watch)
    seeds: dict[str, str | None] = field(default_factory=dict)

    @property
    def paths(self) -> dict[str, str]:
        p = self.p
        return {
            "create": f"{p}/c",
            "bulk create": f"{p}/b1",
            "update": f"{p}/u",
            "delete": f"{p}/d",
            "move": f"{p}/m",
        }

    def on_outcome(self, outcome: PendingWriteOutcome) -> None:
        self.outcomes.append(outcome)
        self.watch.changed.set()

    def recorded(self, path: str) -> bool:
        ledger = self.mesh.ledger
        held = {i.path for i in (*ledger.pending(), *ledger.in_flight())}
        return path in held or any(o.intent.path == path for o in self.outcomes)

    async def seed(self) -> None:
        for name in ("u", "d", "m"):
            node = MeshNode(path=f"{self.p}/{name}", content={"v": 0})
            self.seeds[name] = (await self.mesh.create(node, access=ALICE)).request_id

    def basis(self, name: str) -> dict[str, Any]:
        """The seed's version and request id: the whole basis, recorded even when no read
        answers (an expected version alone names no write: it is not)."""
        return {"expected_version": 1, "expected_request_id": self.seeds[name]}

    def open_watch(self) -> contextlib.AbstractContextManager[None]:
        watch = self.watch
        source = reopen_on_transient_fault(
            lambda: self.mesh.query(NodeQuery(path_prefix=self.p)),
            backoff=(0.1,),
            max_consecutive=1000,
            on_reopen=watch.on_reopen,
        )
        subscription = source.subscribe(watch.on_next, watch.on_error, self._completed)

        @contextlib.contextmanager
        def held() -> Any:
            try:
                yield
            finally:
                subscription.dispose()

        return held()

    def _completed(self) -> None:
        self.watch.completed = True
        self.watch.changed.set()

    async def run_verbs(self) -> None:
        """Run the six one-shot verbs concurrently; each answer (or error) is kept."""
        p, mesh = self.p, self.mesh

        async def keep(verb: str, work: Awaitable[Any]) -> None:
            try:
                self.answers[verb] = await work
            except BaseException as exc:
                self.answers[verb] = exc
                if isinstance(exc, asyncio.CancelledError):
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():
                        raise

        node = MeshNode(path=f"{p}/c", content={"v": 1})
        bulk = [MeshNode(path=f"{p}/b1", content={"v": 1}), MeshNode(path=f"{p}/b2", content={})]
        async with asyncio.timeout(WAIT):
            await asyncio.gather(
                keep(
                    "create",
                    first_value(mesh.create_node(CreateNodeRequest(node=node, access=ALICE))),
                ),
                keep(
                    "bulk create",
                    first_value(mesh.create_nodes(CreateNodesRequest(nodes=bulk, access=ALICE))),
                ),
                keep(
                    "update",
                    first_value(
                        mesh.update_node(
                            UpdateNodeRequest(
                                node=MeshNode(path=f"{p}/u", content={"v": 2}),
                                access=ALICE,
                                **self.basis("u"),  # the seed's: the basis of its intent
                            )
                        )
                    ),
                ),
                keep(
                    "delete",
                    first_value(
                        mesh.delete_node(
                            DeleteNodeRequest(path=f"{p}/d", access=ALICE, **self.basis("d"))
                        )
                    ),
                ),
                keep(
                    "move",
                    first_value(
                        mesh.move_node(
                            MoveNodeRequest(
                                source=f"{p}/m", target=f"{p}/m2", access=ALICE, **self.basis("m")
                            )
                        )
                    ),
                ),
                keep("query", first_value(mesh.query(NodeQuery(path_prefix=p)))),
            )


def _mesh(store: Any) -> Mesh:
    # Each row puts its fault before the create's first store call, a read of the partition's
    # facts: "Nothing was written" is then the honest text. With the facts kept between
    # operations that first call is the INSERT, and a fault there may have landed: that cell
    # is tests/reliability/test_kept_facts.py.
    return Mesh(
        store,
        retry_delays=LADDER,
        ledger=PendingWriteLedger(journal_dir=None),
        cache_partition_facts=False,
    )


@contextlib.asynccontextmanager
async def _row(store: Any, p: str) -> AsyncIterator[Row]:
    mesh = _mesh(store)
    row = Row(mesh, p)
    subscription = mesh.ledger.outcomes.subscribe(row.on_outcome)
    try:
        yield row
    finally:
        subscription.dispose()
        mesh.dispose()


# -- judging a cell ---------------------------------------------------------------------------


def _logs_for(records: LogRecords, path: str) -> list[dict[str, object]]:
    return [r for r in records if isinstance(r["extra"], dict) and r["extra"].get("path") == path]


def judge_cell(
    fault: Fault, verb: str, row: Row, records: LogRecords, injected: BaseException | None
) -> str | None:
    """None when the cell holds, else what is wrong."""
    answer = row.answers.get(verb)
    if verb == "query":
        if not isinstance(answer, BaseException):
            return f"the one-shot query answered {answer!r} instead of erroring"
        if fault.expect == "unavailable":
            return None if is_store_unreachable(answer) else f"not unreachable: {answer!r}"
        if is_store_unreachable(answer):
            return f"a control read as unreachable: {answer!r}"
        if type(answer) is not type(injected):
            return f"the query surfaced {answer!r}, not the injected {injected!r}"
        return None
    if isinstance(answer, BaseException) or answer is None:
        return f"the verb raised instead of answering: {answer!r}"
    path = row.paths[verb]
    logs = _logs_for(records, path)
    error = answer.error or ""
    if answer.success:
        return f"answered success: {answer!r}"
    creates = verb in ("create", "bulk create")
    if fault.expect == "unavailable":
        if answer.rejection_reason is not RejectionReason.UNAVAILABLE:
            return f"reason {answer.rejection_reason}: {error}"
        for phrase in ("unreachable", "Nothing was written", "same node id"):
            if phrase not in error:
                return f"message lacks {phrase!r}: {error}"
        if "Unexpected error" in error:
            return f"message says Unexpected error: {error}"
        if not any(
            r["level"] == "ERROR" and r["extra"].get("event") == "store_unreachable"  # type: ignore[union-attr]
            for r in logs
        ):
            return f"no ERROR store_unreachable log for {path}"
        if not answer.recorded_for_reissue or not row.recorded(path):
            return f"pending write recorded={row.recorded(path)} for {verb}"
        verdicts = [o.verdict for o in row.outcomes if o.intent.path == path]
        if not creates and verdicts != [Verdict.LANDED]:  # re-issued once, by compare-and-set
            return f"{verb}: verdicts {verdicts}, not exactly one LANDED"
        return None
    if row.recorded(path):
        return "a pending write was recorded for a judged/cancelled answer"
    if any(r["extra"].get("event") == "store_unreachable" for r in logs):  # type: ignore[union-attr]
        return "logged as store_unreachable"
    if fault.expect == "cancelled":
        if answer.rejection_reason is not RejectionReason.UNAVAILABLE:
            return f"reason {answer.rejection_reason}: {error}"
        if "was cancelled before it completed" not in error:
            return f"message: {error}"
        if not any(
            r["level"] == "DEBUG" and r["extra"].get("event") == "cancelled"  # type: ignore[union-attr]
            for r in logs
        ):
            return "no DEBUG 'cancelled' log"
        if any(r["level"] == "ERROR" for r in logs):
            return "a cancellation was logged at ERROR"
        return None
    if answer.rejection_reason is not RejectionReason.UNKNOWN:
        return f"reason {answer.rejection_reason}: {error}"
    if "Unexpected error" not in error or type(injected).__name__ not in error:
        return f"message does not name the error: {error}"
    if not any(
        r["level"] == "ERROR" and r["extra"].get("event") == "unexpected"  # type: ignore[union-attr]
        for r in logs
    ):
        return "no ERROR 'unexpected' log"
    return None


def judge_watch(fault: Fault, row: Row, injected: BaseException | None) -> str | None:
    watch = row.watch
    if fault.expect == "unavailable":
        if watch.error is not None:
            return f"the watch ended on {watch.error!r}"
        if fault.name.removesuffix(POOLER) != "reset mid-stream" and not watch.reopens:
            return "the watch never re-opened"
        if not any(frame.nodes for frame in watch.frames):
            return "no reading after the store came back"
        return None
    if watch.reopens:
        return f"a control re-opened the watch {len(watch.reopens)} time(s)"
    if watch.error is None or type(watch.error) is not type(injected):
        return f"the watch ended with {watch.error!r}, not {injected!r}"
    return None


def settle_row(fault: Fault, row: Row, records: LogRecords, injected: BaseException | None) -> None:
    failures = []
    for verb in VERBS:
        if verb == "standing watch":
            problem = judge_watch(fault, row, injected)
        else:
            problem = judge_cell(fault, verb, row, records, injected)
        MATRIX.cells[(fault.name, verb)] = problem is None
        if problem is not None:
            MATRIX.notes[(fault.name, verb)] = problem
            failures.append(f"{verb}: {problem}")
    assert not failures, f"{fault.name}: " + "; ".join(failures)


async def _recovered(row: Row, fault: Fault) -> None:
    """After the fault is lifted: the watch reads again and the pending create lands once."""
    if fault.expect != "unavailable":
        return
    create = row.paths["create"]
    await row.watch.until(lambda: row.watch.saw(create) or row.watch.error is not None)
    await row.watch.until(lambda: any(o.intent.path == create for o in row.outcomes))
    landed = [o for o in row.outcomes if o.intent.path == create]
    assert [o.verdict for o in landed] == [Verdict.LANDED], landed
    verbs = [row.paths[verb] for verb in ("update", "delete", "move")]
    await row.watch.until(lambda: all(any(o.intent.path == p for o in row.outcomes) for p in verbs))
    store = row.mesh.store
    after = {p: await store.read(p) for p in (*verbs, f"{row.p}/m2")}
    assert after[row.paths["update"]] is not None
    assert after[row.paths["update"]].content == {"v": 2}, after  # the re-issue's write
    assert after[row.paths["delete"]] is None and after[row.paths["move"]] is None, after
    assert after[f"{row.p}/m2"] is not None, after


# -- the proxied private database -------------------------------------------------------------


def _prefix() -> str:
    return session_prefix("r")


@contextlib.asynccontextmanager
async def _proxied_store(dsn: str) -> AsyncIterator[tuple[PostgresStore, FaultProxy]]:
    target = urlparse(dsn)
    async with FaultProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        store = PostgresStore(proxy.dsn(dsn), schema_prefix=_prefix(), **STORE_OPTIONS)
        await store.start()
        try:
            yield store, proxy
        finally:
            await proxy.restore()
            await store.close()


async def _lift(proxy: FaultProxy) -> None:
    await proxy.restore()
    proxy.unstall()


async def _terminating(dsn: str, stop: asyncio.Event) -> int:
    """Terminate this database's backends that wait on a lock, until ``stop``; returns count."""
    database = urlparse(dsn).path.lstrip("/")
    conn = await asyncpg.connect(dsn, timeout=5.0, command_timeout=5.0)
    killed = 0
    try:
        while not stop.is_set():
            killed += await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = $1 AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'",
                database,
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.02):
                    await stop.wait()
    finally:
        await conn.close()
    return killed


@contextlib.asynccontextmanager
async def _pooled_store(dsn: str) -> AsyncIterator[tuple[PostgresStore, FaultProxy]]:
    """The store through a PgBouncer of its own; the proxy stands between the server and both
    the pooler and the store's direct LISTEN connection (the server's network)."""
    target = urlparse(dsn)
    async with FaultProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        with TemporaryPgBouncer(proxy.host, proxy.port, settings={"server_login_retry": 0}) as pb:
            options = {**STORE_OPTIONS, "command_timeout": 0.5}  # four time boxes per verb
            store = PostgresStore(
                pb.dsn(dsn), schema_prefix=_prefix(), listen_dsn=proxy.dsn(dsn), **options
            )
            await store.start()
            try:
                assert store.pooled is True
                yield store, proxy
            finally:
                await proxy.restore()
                proxy.unstall()
                await store.close()


async def _infrastructure_row(
    fault: Fault, row: Row, store: PostgresStore, proxy: FaultProxy, private_db: str
) -> None:
    """Put the fault in place, run the verbs, lift it, and wait for the recovery."""
    await row.seed()
    mechanism = fault.name.removesuffix(POOLER)
    if mechanism == "reset mid-stream":
        with row.open_watch():
            await row.watch.until(lambda: bool(row.watch.frames))
            proxy.stall()
            verbs = asyncio.create_task(row.run_verbs())
            await asyncio.sleep(0.3)  # every verb's first statement is now in flight
            proxy.refuse()
            proxy.reset()
            proxy.unstall()
            await verbs
            await _lift(proxy)
            await _recovered(row, fault)
    elif mechanism.startswith("pg_terminate_backend"):
        admin = await asyncpg.connect(private_db, timeout=5.0)
        stop = asyncio.Event()
        try:
            tx = admin.transaction()
            await tx.start()
            await admin.execute(
                f"LOCK TABLE {quote_identifier(store.schema_of('p'))}.nodes"
                " IN ACCESS EXCLUSIVE MODE"
            )
            killer = asyncio.create_task(_terminating(private_db, stop))
            with row.open_watch():
                await row.run_verbs()
                await row.watch.until(lambda: bool(row.watch.reopens))
                stop.set()
                assert await killer > 0
                await tx.rollback()
                # The feed never broke, so no gap is declared: the next commit anyone makes
                # is the evidence (recovery never polls). Make one.
                await row.mesh.create(MeshNode(path="p/evidence", content={}), access=ALICE)
                await _recovered(row, fault)
        finally:
            stop.set()
            await admin.close()
    else:
        if mechanism == "connect refused":
            proxy.refuse()
            proxy.reset()
        elif mechanism == "connect timeout":
            proxy.stall()  # new connections are accepted and never answered
            proxy.reset()
        else:
            proxy.stall()  # open connections stop answering mid-query
        with row.open_watch():
            await row.run_verbs()
            await row.watch.until(lambda: bool(row.watch.reopens))
            await _lift(proxy)
            await _recovered(row, fault)


@pytest.mark.parametrize("fault", INFRA[:5], ids=lambda f: f.name)
async def test_an_infrastructure_fault_on_the_shared_server_answers_unavailable(
    fault: Fault, private_db: str, log_records: LogRecords
) -> None:
    async with _proxied_store(private_db) as (store, proxy), _row(store, "p") as row:
        await _infrastructure_row(fault, row, store, proxy, private_db)
    settle_row(fault, row, log_records, None)


@pytest.mark.parametrize("fault", POOLED, ids=lambda f: f.name)
async def test_an_infrastructure_fault_behind_a_transaction_pooler_answers_unavailable(
    fault: Fault, private_db: str, log_records: LogRecords
) -> None:
    """The same rows through a real PgBouncer in transaction mode: every cell's answer is the
    direct connection's (UNAVAILABLE, ERROR, the create recorded and re-issued once)."""
    try:
        async with _pooled_store(private_db) as (store, proxy), _row(store, "p") as row:
            await _infrastructure_row(fault, row, store, proxy, private_db)
    except FileNotFoundError as exc:  # no pgbouncer binary
        if IN_CI:
            pytest.fail(f"CI needs pgbouncer (.ci/run installs it): {exc}")
        pytest.skip(f"pgbouncer is not installed: {exc}")
    settle_row(fault, row, log_records, None)


# -- the private cluster ----------------------------------------------------------------------


async def _fill(dsn: str) -> list[asyncpg.Connection]:
    """Take every connection slot from the store: terminate its backends and open fillers until
    the cluster answers 53300 and none of the store's backends is left. Returns the fillers."""
    admin = await asyncpg.connect(dsn, timeout=5.0, command_timeout=5.0)
    fillers: list[asyncpg.Connection] = [admin]
    mine = "FROM pg_stat_activity WHERE application_name LIKE 'rxmesh%'"
    for _ in range(200):
        await admin.fetchval(f"SELECT count(pg_terminate_backend(pid)) {mine}")
        try:
            fillers.append(await asyncpg.connect(dsn, timeout=5.0))
        except pgexc.TooManyConnectionsError:
            if not await admin.fetchval(f"SELECT count(*) {mine}"):
                # A pool connection still in its startup when the cluster filled shows its
                # application_name only once started: look again a moment later (the pool
                # restores its floor in the background; one such connection made the watch's
                # query succeed and the row wait for a re-open that never came, once in CI).
                await asyncio.sleep(0.1)
                if not await admin.fetchval(f"SELECT count(*) {mine}"):
                    return fillers
    raise AssertionError("could not take every connection slot from the store")


@pytest.mark.parametrize("fault", INFRA[5:], ids=lambda f: f.name)
async def test_an_infrastructure_fault_on_a_private_cluster_answers_unavailable(
    fault: Fault, cluster: TemporaryPostgresCluster, log_records: LogRecords
) -> None:
    # The feed waits 0.5 s before re-connecting: the window in which the cluster is filled.
    options = {**STORE_OPTIONS, "max_size": 3, "reconnect_backoff": (0.5,)}
    store = PostgresStore(cluster.dsn, schema_prefix=_prefix(), **options)
    await store.start()
    fillers: list[asyncpg.Connection] = []
    try:
        async with _row(store, "p") as row:
            await row.seed()
            if fault.name == "server restart":
                await asyncio.to_thread(cluster.stop, "fast")
            else:
                fillers = await _fill(cluster.dsn)
            with row.open_watch():
                await row.run_verbs()
                await row.watch.until(lambda: bool(row.watch.reopens))
                if fault.name == "server restart":
                    await asyncio.to_thread(cluster.start)
                else:
                    for conn in fillers:
                        await conn.close()
                    fillers = []
                await _recovered(row, fault)
    finally:
        for conn in fillers:
            await conn.close()
        await store.close()
    settle_row(fault, row, log_records, None)


# -- the non-transient controls, injected at the store boundary -------------------------------


def _control_rows() -> list[Any]:
    return list(CONTROLS)


@pytest.mark.parametrize("fault", _control_rows(), ids=lambda f: f.name)
async def test_a_non_transient_control_is_never_answered_unavailable_nor_recorded(
    fault: Fault, private_db: str, log_records: LogRecords
) -> None:
    assert fault.error is not None
    injected = fault.error()
    inner = PostgresStore(private_db, schema_prefix=_prefix(), **STORE_OPTIONS)
    await inner.start()
    store = FaultInjectingStore(inner)
    try:
        async with _row(store, "p") as row:
            await row.seed()
            store.refuse_reads_as_unreachable(fault.error)  # any factory: here, the control
            store.refuse_writes_as_unreachable(fault.error)
            with row.open_watch():
                await row.run_verbs()
                await row.watch.until(lambda: row.watch.error is not None)
            store.restore()
            nodes = await first_value(inner.query(NodeQuery(path_prefix="p")))
    finally:
        await inner.close()
    settle_row(fault, row, log_records, injected)
    # Nothing was written: the seeded rows are exactly as they were.
    seeded = ["p", "p/_access/alice", "p/_owner", "p/d", "p/m", "p/u"]
    assert sorted(n.path for n in nodes.nodes) == seeded
    assert all(n.content == {"v": 0} for n in nodes.nodes if n.path in ("p/d", "p/m", "p/u"))
