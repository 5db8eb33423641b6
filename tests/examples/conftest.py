"""The example service under real uvicorn: a loopback port of its own, real PostgreSQL (this
test's schema prefix) reached through a FaultProxy the test can break."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

from rxmesh.testing import FaultProxy
from tests.helpers import ROOT, free_port

PARTITION = "shop"


@dataclass
class Service:
    base: str
    proxy: FaultProxy
    pg_dsn: str
    application_name: str
    log: Path


@pytest.fixture
async def service(pg_dsn: str, prefix: str, tmp_path: Path) -> AsyncIterator[Service]:
    target = urlparse(pg_dsn)
    proxy = await FaultProxy(target.hostname or "127.0.0.1", target.port or 5432).start()
    name = f"rxmesh-example-{prefix}"
    port = free_port()
    env = {
        **os.environ,
        "RXMESH_DSN": proxy.dsn(pg_dsn),
        "RXMESH_SCHEMA_PREFIX": prefix,
        "RXMESH_APPLICATION_NAME": name,
        "RXMESH_HEARTBEAT": "0.5",
    }
    log = tmp_path / "uvicorn.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "uvicorn",
            "examples.service.app:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=out,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        async with asyncio.timeout(30), httpx.AsyncClient(base_url=base) as client:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get("/health/live")).status_code == 200:
                        break
                assert process.returncode is None, log.read_text()
                await asyncio.sleep(0.1)
        yield Service(base, proxy, pg_dsn, name, log)
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                async with asyncio.timeout(10):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        await proxy.close()
