"""Issue 32: a connection pooler that refuses before any server is reached says "nothing ran".

A throwaway PostgreSQL (never the shared one: it is stopped) behind a PgBouncer of this module's
own, transaction pooling. Once the server is gone, PgBouncer's logins to it fail, and it answers
a client's next statement by closing the client with "server login has been failing, try again
later (server_login_retry)": asyncpg reports that as the connection closed in the middle of the
call (08003), which alone would leave the write's outcome unknown. No server was reached, so the
store says so: unreachable, ``may_have_run=False``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from rxmesh.exceptions import StoreError
from rxmesh.faults import is_store_unreachable, is_write_outcome_unknown
from rxmesh.providers.postgres import PostgresStore
from rxmesh.testing import TemporaryPgBouncer, TemporaryPostgresCluster
from tests.conftest import IN_CI, throwaway_cluster
from tests.providers.postgres.kinds import doc

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WAIT = 20.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[TemporaryPostgresCluster]:
    with throwaway_cluster() as server:
        yield server


@pytest.fixture
async def bouncer(cluster: TemporaryPostgresCluster) -> AsyncIterator[TemporaryPgBouncer]:
    try:
        # A long login retry: once a login failed, every statement is refused at once.
        pooler = TemporaryPgBouncer("127.0.0.1", cluster.port, settings={"server_login_retry": 60})
    except FileNotFoundError as exc:
        if IN_CI:
            pytest.fail(f"CI needs pgbouncer (.ci/run installs it): {exc}")
        pytest.skip(f"pgbouncer is not installed: {exc}")
    await asyncio.to_thread(pooler.start)
    try:
        yield pooler
    finally:
        await asyncio.to_thread(pooler.cleanup)


async def _write_error(store: PostgresStore, path: str) -> Exception:
    with pytest.raises(Exception) as failed:
        await asyncio.wait_for(store.write(doc(path)), WAIT)
    return failed.value


async def test_a_write_the_pooler_refused_before_any_server_was_reached_wrote_nothing(
    cluster: TemporaryPostgresCluster, bouncer: TemporaryPgBouncer
) -> None:
    """Fails at 1d389e8 because the pooler's refusal passed through as the raw 08003 ("the
    connection was closed in the middle of operation"), which the one rule reads as "the
    statement may have run": an outcome_unknown answer for a write that certainly wrote
    nothing. The negative control first: a write that DID reach a server (its backend is
    terminated while it waits on a lock) stays unknown."""
    store = PostgresStore(
        bouncer.dsn(cluster.dsn),
        listen_dsn=cluster.dsn,
        pooled=True,
        min_size=2,
        command_timeout=10.0,
        heartbeat_interval=60.0,  # no probe between the steps: the writes meet the pooler
    )
    await store.start()
    stopped = False
    try:
        await asyncio.wait_for(store.write(doc("pr/seed")), WAIT)
        direct = await asyncpg.connect(cluster.dsn, timeout=5)
        try:
            locker = direct.transaction()
            await locker.start()
            await direct.execute(
                f'LOCK TABLE "{store.schema_of("pr")}".nodes IN ACCESS EXCLUSIVE MODE'
            )
            blocked = asyncio.ensure_future(_write_error(store, "pr/blocked"))
            async with asyncio.timeout(WAIT):
                while not (  # noqa: ASYNC110 - the server's pace
                    # This test's own write waiting (an INSERT into its schema), not the change
                    # feed's fetch of the seed's row, which the same lock can hold too.
                    pid := await direct.fetchval(
                        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND query LIKE $1 AND pid <> pg_backend_pid() LIMIT 1",
                        f"INSERT INTO %{store.schema_of('pr')}%",
                    )
                ):
                    await asyncio.sleep(0.02)
            await direct.fetchval("SELECT pg_terminate_backend($1)", pid)
            reached = await blocked
            await locker.rollback()
        finally:
            await direct.close()
        assert is_store_unreachable(reached), repr(reached)
        assert is_write_outcome_unknown(reached), repr(reached)  # it reached a server

        await asyncio.to_thread(cluster.stop, "fast")
        stopped = True
        primer = await asyncpg.connect(bouncer.dsn(cluster.dsn), timeout=5, statement_cache_size=0)
        try:  # the pooler's first login to the stopped server fails
            with pytest.raises((asyncpg.PostgresError, TimeoutError)):
                await primer.fetchval("SELECT 1", timeout=3)
        finally:
            primer.terminate()

        refused = await _write_error(store, "pr/refused")
        assert isinstance(refused, StoreError), repr(refused)
        assert "server login has been failing" in str(refused), repr(refused)
        assert "before any server was reached" in str(refused)
        assert is_store_unreachable(refused)
        assert refused.may_have_run is False
        assert not is_write_outcome_unknown(refused)
    finally:
        await store.close()
        if stopped:
            await asyncio.to_thread(cluster.start)
