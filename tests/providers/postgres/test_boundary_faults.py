"""Real faults at the PostgresStore boundary, each classified by rxmesh.faults (and its controls).

Faults are produced for real: a closed port, a socket that never answers, a TCP proxy that resets
or stalls, lock waits, and raw server errors. Nothing here stops the shared server.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import asyncpg
import asyncpg.exceptions as pgexc
import pytest
from reactivex import operators as ops

from rxmesh.aio import first_value
from rxmesh.exceptions import StoreError, StorePoolExhaustedError
from rxmesh.faults import is_transient_connect_fault, is_write_outcome_unknown
from rxmesh.model import MeshNode, NodeQuery
from rxmesh.providers.postgres import PostgresStore
from rxmesh.testing import FaultProxy
from tests.providers.postgres.kinds import drop_schemas, started, unique_prefix

pytestmark = pytest.mark.postgres

WAIT = 5.0


@pytest.fixture
def prefix(pg_dsn: str) -> str:
    return unique_prefix()


@pytest.fixture
async def cleanup(pg_dsn: str, prefix: str) -> AsyncIterator[None]:
    yield
    await drop_schemas(pg_dsn, prefix)


@pytest.fixture
async def proxy(pg_dsn: str) -> AsyncIterator[FaultProxy]:
    from urllib.parse import urlparse

    target = urlparse(pg_dsn)
    async with FaultProxy(target.hostname or "127.0.0.1", target.port or 5432) as running:
        yield running


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # closed again: nothing listens there


async def _seed(store: PostgresStore, partition: str, count: int) -> None:
    nodes = [
        MeshNode(path=f"{partition}/n{i:05d}", content={"pad": "x" * 200}, version=1)
        for i in range(count)
    ]
    await first_value(store.write_many(nodes).pipe(ops.to_list()), timeout=WAIT)


# -- connect faults are transient ----------------------------------------------------------


async def test_a_refused_connect_is_a_transient_08001_store_error() -> None:
    store = PostgresStore(f"postgresql://postgres@127.0.0.1:{_closed_port()}/x", connect_timeout=1)
    async with asyncio.timeout(WAIT):
        with pytest.raises(StoreError) as caught:
            await store.start()
    assert caught.value.sqlstate == "08001"
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)
    assert is_transient_connect_fault(caught.value)
    assert "password" not in str(caught.value)


async def test_a_listener_that_never_answers_is_a_transient_08001_after_connect_timeout() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes the handshake; nobody ever reads or answers
    try:
        port = silent.getsockname()[1]
        store = PostgresStore(f"postgresql://postgres@127.0.0.1:{port}/x", connect_timeout=0.3)
        async with asyncio.timeout(WAIT):
            with pytest.raises(StoreError) as caught:
                await store.start()
    finally:
        silent.close()
    assert caught.value.sqlstate == "08001"
    assert isinstance(caught.value.__cause__, TimeoutError)
    assert is_transient_connect_fault(caught.value)


async def test_a_refused_reconnect_of_a_started_store_is_transient(
    pg_dsn: str, proxy: FaultProxy, prefix: str, cleanup: None
) -> None:
    async with started(proxy.dsn(pg_dsn), prefix, connect_timeout=1) as store:
        assert await asyncio.wait_for(store.read("p/a"), WAIT) is None
        proxy.refuse()
        proxy.reset()  # pooled connections die; the pool must connect again, and is refused
        errors: list[BaseException] = []
        for _ in range(3):  # the first call may still meet the dead connection (CDNE 08003)
            with pytest.raises(Exception) as caught:
                await asyncio.wait_for(store.read("p/a"), WAIT)
            errors.append(caught.value)
            if isinstance(caught.value, StoreError):
                break
        assert all(is_transient_connect_fault(e) for e in errors), errors
        refused = errors[-1]
        assert isinstance(refused, StoreError)
        assert refused.sqlstate == "08001"
        assert isinstance(refused.__cause__, ConnectionRefusedError)
        await proxy.restore()
        assert await asyncio.wait_for(store.read("p/a"), WAIT) is None  # healed


# -- connection lost during a call ---------------------------------------------------------


async def test_a_reset_while_a_query_streams_rows_is_transient(
    pg_dsn: str, proxy: FaultProxy, prefix: str, cleanup: None
) -> None:
    async with started(proxy.dsn(pg_dsn), prefix) as store:
        await _seed(store, "big", 3000)
        proxy.reset_after_server_bytes(64 * 1024)  # mid-way through ~700 kB of rows
        with pytest.raises(Exception) as caught:
            await first_value(store.query(NodeQuery(partition="big")), timeout=WAIT)
    error = caught.value
    assert isinstance(error, pgexc.ConnectionDoesNotExistError | StoreError), repr(error)
    assert is_transient_connect_fault(error)


async def test_a_stall_past_command_timeout_is_transient_and_drops_the_connection(
    pg_dsn: str, proxy: FaultProxy, prefix: str, cleanup: None
) -> None:
    async with started(proxy.dsn(pg_dsn), prefix, command_timeout=0.4, connect_timeout=0.5) as s:
        assert await asyncio.wait_for(s.read("p/a"), WAIT) is None
        proxy.stall()
        with pytest.raises(StoreError) as caught:
            await asyncio.wait_for(s.read("p/a"), WAIT)
        proxy.unstall()
    assert caught.value.sqlstate is None
    assert caught.value.transient is True
    assert isinstance(caught.value.__cause__, TimeoutError)
    assert is_transient_connect_fault(caught.value)


async def test_an_ambiguous_commit_that_landed_is_recognised_by_its_request_id(
    pg_dsn: str, proxy: FaultProxy, prefix: str, cleanup: None
) -> None:
    path = "amb/landed-0001"
    node = MeshNode(path=path, content={"k": 1}, version=1, request_id="req-amb")
    async with started(proxy.dsn(pg_dsn), prefix) as store:
        await asyncio.wait_for(store.write(node.model_copy(update={"path": "amb/warm"})), WAIT)
        proxy.reset_after_client_sends(path.encode())  # the INSERT goes out, its reply does not
        with pytest.raises(Exception) as caught:
            await asyncio.wait_for(store.write(node), WAIT)
        assert is_transient_connect_fault(caught.value), repr(caught.value)
        direct = await asyncpg.connect(pg_dsn)
        try:
            landed = await direct.fetchval(
                f'SELECT request_id FROM "{store.schema_of("amb")}".nodes WHERE path = $1', path
            )
        finally:
            await direct.close()
        assert landed == "req-amb"  # the server committed what the client never heard about
        again = await asyncio.wait_for(store.write(node), WAIT)
        assert again.request_id == "req-amb"
        assert again.content == {"k": 1}


# -- answered, not unreachable: negative controls ------------------------------------------


async def _locked(pg_dsn: str, table: str, path: str) -> tuple[asyncpg.Connection, object]:
    holder = await asyncpg.connect(pg_dsn)
    tx = holder.transaction()
    await tx.start()
    await holder.execute(f"SELECT 1 FROM {table} WHERE path = $1 FOR UPDATE", path)
    return holder, tx


async def test_a_command_timeout_on_a_usable_connection_is_the_store_not_answering_in_time(
    pg_dsn: str, prefix: str, cleanup: None
) -> None:
    """rxmesh's own time box is "the store did not answer in time": a DB frame (sqlstate None)
    around the TimeoutError, which the one rule calls unreachable, even though the connection
    still answers afterwards. (It was minted as a 57014 verdict until issue 13: a loop stall then
    answered UNKNOWN. Only a server-sent 57014 is a verdict; see
    tests/reliability/test_process_stall.py for that falsifier.)"""
    async with started(pg_dsn, prefix, command_timeout=0.3) as store:
        node = MeshNode(path="slow/a", version=1)
        await asyncio.wait_for(store.write(node), WAIT)
        holder, tx = await _locked(pg_dsn, f'"{store.schema_of("slow")}".nodes', "slow/a")
        try:
            with pytest.raises(StoreError) as caught:
                await asyncio.wait_for(store.update(node), WAIT)
        finally:
            await tx.rollback()  # type: ignore[attr-defined]
            await holder.close()
        assert caught.value.sqlstate is None
        assert isinstance(caught.value.__cause__, TimeoutError)
        assert "did not answer in time" in str(caught.value)
        assert "stayed usable" in str(caught.value)
        assert is_transient_connect_fault(caught.value)
        assert await asyncio.wait_for(store.read("slow/a"), WAIT) is not None  # still usable


async def test_an_exhausted_pool_is_back_pressure_naming_this_process_pool(
    pg_dsn: str, prefix: str, cleanup: None
) -> None:
    store = PostgresStore(
        pg_dsn,
        schema_prefix=prefix,
        min_size=1,
        max_size=1,
        acquire_timeout=0.2,
        command_timeout=3,
    )
    async with store:
        node = MeshNode(path="busy/a", version=1)
        await asyncio.wait_for(store.write(node), WAIT)
        holder, tx = await _locked(pg_dsn, f'"{store.schema_of("busy")}".nodes', "busy/a")
        try:
            blocked = asyncio.ensure_future(asyncio.wait_for(store.update(node), WAIT))
            await asyncio.sleep(0.05)  # let it take the only connection
            with pytest.raises(StorePoolExhaustedError) as caught:
                await asyncio.wait_for(store.read("busy/a"), WAIT)
        finally:
            await tx.rollback()  # type: ignore[attr-defined]
            await holder.close()
        assert (await blocked) is not None
    assert "this process's connection pool" in str(caught.value)
    assert isinstance(caught.value.__cause__, TimeoutError)
    assert is_transient_connect_fault(caught.value)


async def test_raw_server_refusals_are_not_transient(
    pg_dsn: str, prefix: str, cleanup: None
) -> None:
    async with started(pg_dsn, prefix) as store:
        await asyncio.wait_for(store.write(MeshNode(path="ctl/a", version=1)), WAIT)
        table = f'"{store.schema_of("ctl")}".nodes'
    conn = await asyncpg.connect(pg_dsn)
    other = await asyncpg.connect(pg_dsn)
    refusals: dict[str, BaseException] = {}
    try:
        for sqlstate, statement in [
            ("42P01", "SELECT * FROM rxmesh_no_such_table"),
            ("23505", f"INSERT INTO {table} (path) VALUES ('ctl/a')"),
            ("42601", "SELEC 1"),
        ]:
            with pytest.raises(pgexc.PostgresError) as caught:
                await conn.execute(statement)
            refusals[sqlstate] = caught.value
        await conn.execute("SET statement_timeout = '50ms'")
        with pytest.raises(pgexc.QueryCanceledError) as cancelled:
            await conn.execute("SELECT pg_sleep(2)")
        refusals["57014"] = cancelled.value
        await conn.execute("RESET statement_timeout")
        with pytest.raises(pgexc.SerializationError) as serialization:
            async with conn.transaction(isolation="repeatable_read"):
                await conn.fetchval(f"SELECT version FROM {table} WHERE path = 'ctl/a'")
                await other.execute(f"UPDATE {table} SET version = 7 WHERE path = 'ctl/a'")
                await conn.execute(f"UPDATE {table} SET version = 8 WHERE path = 'ctl/a'")
        refusals["40001"] = serialization.value
    finally:
        await conn.close()
        await other.close()
    for sqlstate, error in refusals.items():
        assert error.sqlstate == sqlstate  # type: ignore[attr-defined]
        assert not is_transient_connect_fault(error), sqlstate
        wrapped = StoreError("boundary", sqlstate=None)
        wrapped.__cause__ = error
        assert not is_transient_connect_fault(wrapped), sqlstate


async def test_a_missing_partition_reads_as_absent_but_other_errors_propagate(
    pg_dsn: str, prefix: str, cleanup: None
) -> None:
    async with started(pg_dsn, prefix) as store:
        assert await asyncio.wait_for(store.read("nowhere/a"), WAIT) is None
        await asyncio.wait_for(store.write(MeshNode(path="gone/a", version=1)), WAIT)
        conn = await asyncpg.connect(pg_dsn)
        try:
            # The table is there but unreadable for another reason: that is no absence.
            await conn.execute(
                f'ALTER TABLE "{store.schema_of("gone")}".nodes ALTER COLUMN content '
                "TYPE text USING content::text"
            )
            await conn.execute(
                f'ALTER TABLE "{store.schema_of("gone")}".nodes RENAME COLUMN node_type TO t'
            )
        finally:
            await conn.close()
        with pytest.raises(pgexc.UndefinedColumnError) as caught:
            await asyncio.wait_for(store.read("gone/a"), WAIT)
        assert not is_transient_connect_fault(caught.value)


# -- issue 14: a read-only server, and no host matching target_session_attrs ------------------


async def test_a_25006_at_the_boundary_is_not_evaluated_and_the_text_names_the_standby(
    pg_dsn: str,
) -> None:
    """A REAL 25006 (a read-only transaction on the shared server): mapped at the boundary to a
    transient DB frame, never sent through raw, with may_have_run=False (nothing ran, so
    "Nothing was written" is true). The wording depends on what the server says it is. Negative
    control: a raw 25006 is refused by the one rule, so the mapping is what decides."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        with pytest.raises(pgexc.ReadOnlySQLTransactionError) as caught:
            async with conn.transaction(readonly=True):
                await conn.execute("CREATE TEMP TABLE rxmesh_never (a int)")
    finally:
        await conn.close()
    raw = caught.value
    assert not is_transient_connect_fault(raw)  # the one rule itself is unchanged
    store = PostgresStore(pg_dsn)
    for in_recovery, phrase in ((True, "standby in recovery"), (None, "refuses writes")):
        with pytest.raises(StoreError) as mapped:
            store._connections.raise_at_boundary(
                raw, operation="writing 'a/b'", stage="query", in_recovery=in_recovery
            )
        error = mapped.value
        assert error.__cause__ is raw
        assert (error.sqlstate, error.may_have_run) == ("08000", False)
        assert is_transient_connect_fault(error)
        assert not is_write_outcome_unknown(error)
        assert phrase in str(error)
        assert "target_session_attrs='read-write'" in str(error)


async def test_no_host_matching_target_session_attrs_is_a_transient_08001(pg_dsn: str) -> None:
    """The shared server is a primary: asking for a standby finds no host. A REAL
    TargetServerAttributeNotMatched (an asyncpg client error, no sqlstate) becomes 08001: the
    store could not be reached (during a failover there may be no primary for a moment)."""
    store = PostgresStore(pg_dsn, target_session_attrs="standby", connect_timeout=2.0)
    async with asyncio.timeout(WAIT):
        with pytest.raises(StoreError) as caught:
            await store.start()
    assert caught.value.sqlstate == "08001"
    assert isinstance(caught.value.__cause__, pgexc.TargetServerAttributeNotMatched)
    assert is_transient_connect_fault(caught.value)
    assert "target_session_attrs='standby'" in str(caught.value)
