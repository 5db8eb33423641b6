"""Fixtures of every test: where the real servers are (and whether a test may skip without them),
what rxmesh logs, and a schema prefix of the test's own. The users and helpers tests share are in
tests/helpers.py."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import pytest

from tests.helpers import LogRecords

if TYPE_CHECKING:
    from rxmesh.testing import FaultProxy as FaultProxyType
    from rxmesh.testing import TemporaryPgBouncer as TemporaryPgBouncerType
    from rxmesh.testing import TemporaryPostgresCluster as TemporaryPostgresClusterType

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
SESSION = secrets.token_hex(3)[:5]
"""This test session's own mark (each pytest-xdist worker is a session of its own): every schema
prefix a test makes starts ``rx<kind><SESSION>``, so two sessions on one database never share a
schema, a table or a NOTIFY channel (``<prefix>changes``)."""
PG_DSN = os.environ.get("RXMESH_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/test")
NATS_URL = os.environ.get("RXMESH_TEST_NATS_URL", "nats://127.0.0.1:4222")


def _reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    host = parsed.hostname or "127.0.0.1"
    port = parsed.port or default_port
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def require_server(url: str, default_port: int, what: str) -> None:
    """Skip (outside CI) or fail (in CI) when the server at ``url`` does not answer."""
    if _reachable(url, default_port):
        return
    message = f"{what} is not reachable at {url}"
    if IN_CI:
        pytest.fail(f"{message}, and CI=true requires it")
    pytest.skip(message)


@contextmanager
def throwaway_cluster() -> Iterator[TemporaryPostgresClusterType]:
    """A started PostgreSQL cluster of the test's own (initdb on a free loopback port), removed
    after; skips outside CI when the server binaries are missing, fails in CI."""
    from rxmesh.testing import TemporaryPostgresCluster

    try:
        cluster = TemporaryPostgresCluster()
    except FileNotFoundError as exc:
        if IN_CI:
            pytest.fail(f"CI needs PostgreSQL server binaries: {exc}")
        pytest.skip(str(exc))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.cleanup()


@pytest.fixture
def pg_dsn() -> str:
    """The DSN of the shared PostgreSQL server; skips outside CI when it does not answer."""
    require_server(PG_DSN, 5432, "PostgreSQL")
    return PG_DSN


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[TemporaryPgBouncerType]:
    """A PgBouncer of the test run's own (``pool_mode = transaction``, a free loopback port, its
    own config and auth file) in front of the shared server; started once, stopped at the end.
    Skips outside CI when the binary or the server is missing; fails in CI."""
    from rxmesh.testing import TemporaryPgBouncer

    require_server(PG_DSN, 5432, "PostgreSQL")
    try:
        bouncer = TemporaryPgBouncer(
            urlparse(PG_DSN).hostname or "127.0.0.1", urlparse(PG_DSN).port or 5432
        )
    except FileNotFoundError as exc:
        if IN_CI:
            pytest.fail(f"CI needs pgbouncer (.ci/run installs it): {exc}")
        pytest.skip(f"pgbouncer is not installed: {exc}")
    bouncer.start()
    try:
        yield bouncer
    finally:
        bouncer.cleanup()


@pytest.fixture
async def proxy(pg_dsn: str) -> AsyncIterator[FaultProxyType]:
    """A FaultProxy of the test's own in front of the shared PostgreSQL server (refuse, stall,
    reset what passes through it)."""
    from rxmesh.testing import FaultProxy

    target = urlparse(pg_dsn)
    async with FaultProxy(target.hostname or "127.0.0.1", target.port or 5432) as running:
        yield running


@pytest.fixture
def pgbouncer_dsn(pgbouncer: TemporaryPgBouncerType) -> str:
    """The shared server's test DSN, through the run's PgBouncer (transaction pooling)."""
    return pgbouncer.dsn(PG_DSN)


@pytest.fixture
def nats_url() -> str:
    """The URL of the shared NATS server; skips outside CI when it does not answer."""
    require_server(NATS_URL, 4222, "NATS")
    return NATS_URL


@pytest.fixture
def log_records() -> Iterator[LogRecords]:
    """Capture what rxmesh logs (enabling it for the test only)."""
    from loguru import logger

    records = LogRecords()

    def sink(message: object) -> None:
        record = message.record  # type: ignore[attr-defined]
        records.append(
            {
                "level": record["level"].name,
                "no": record["level"].no,
                "message": record["message"],
                "extra": dict(record["extra"]),
                "name": record["name"],
            }
        )

    logger.enable("rxmesh")
    handler = logger.add(sink, level="DEBUG", filter="rxmesh")
    try:
        yield records
    finally:
        logger.remove(handler)
        logger.disable("rxmesh")


def session_prefix(kind: str = "t") -> str:
    """A schema prefix of this session's own, unique to the caller: ``rx<kind><SESSION><6 hex>_``
    (15 characters, the longest a store accepts); ``kind`` is one letter naming the suite."""
    if len(kind) != 1 or not kind.islower():
        raise ValueError(f"kind must be one lowercase letter, got {kind!r}")
    return f"rx{kind}{SESSION}{secrets.token_hex(3)}_"


@pytest.fixture
async def prefix(pg_dsn: str) -> AsyncIterator[str]:
    """A schema prefix of this test's own on the shared server; its schemas are dropped after."""
    from tests.providers.postgres.kinds import (  # asyncpg only when asked
        drop_schemas,
        unique_prefix,
    )

    name = unique_prefix()
    yield name
    await drop_schemas(pg_dsn, name)
