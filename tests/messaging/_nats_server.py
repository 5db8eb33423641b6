"""A private nats-server for tests that kill and restart it (never the shared one on 4222).

``PrivateNatsServer`` runs ``nats-server -a 127.0.0.1 -p <free port>`` in a directory of its own,
knows it is ready when the server logs "Server is ready" (an event, not a sleep), and can be
SIGKILLed and started again on the same port. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import free_port

__all__ = ["PrivateNatsServer", "find_nats_server", "require_nats_server"]

READY_WITHIN = 10.0
"""Seconds a starting server may take to log "Server is ready"."""


def find_nats_server() -> str | None:
    """The nats-server binary: ``$RXMESH_TEST_NATS_SERVER``, else on ``PATH``, else
    ``/usr/sbin/nats-server`` (where CI installs it); ``None`` when there is none."""
    explicit = os.environ.get("RXMESH_TEST_NATS_SERVER")
    if explicit:
        return explicit
    found = shutil.which("nats-server")
    if found:
        return found
    default = Path("/usr/sbin/nats-server")
    return str(default) if default.exists() else None


def require_nats_server() -> str:
    """The binary; skips outside CI (fails in CI) when there is none."""
    binary = find_nats_server()
    if binary is not None:
        return binary
    message = "no nats-server binary (set RXMESH_TEST_NATS_SERVER)"
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        raise pytest.fail.Exception(f"{message}, and CI=true requires it")
    raise pytest.skip.Exception(message)


class PrivateNatsServer:
    """One nats-server process at a time on a fixed port, in ``directory``."""

    def __init__(self, binary: str, directory: Path, port: int | None = None) -> None:
        self.binary = binary
        self.directory = directory
        self.port = port if port is not None else free_port()
        self.log: list[str] = []
        self._process: asyncio.subprocess.Process | None = None
        self._drain: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        """``nats://127.0.0.1:<port>``."""
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Start the server and return once it logged "Server is ready"."""
        if self._process is not None:
            raise RuntimeError("the private nats-server is already running")
        process = await asyncio.create_subprocess_exec(
            self.binary,
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            cwd=self.directory,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        self._process = process
        assert process.stderr is not None
        stderr = process.stderr
        try:
            async with asyncio.timeout(READY_WITHIN):
                while True:
                    line = await stderr.readline()
                    if not line:
                        raise RuntimeError(
                            f"nats-server exited before it was ready: {self.log[-5:]}"
                        )
                    self.log.append(line.decode(errors="replace").rstrip())
                    if b"Server is ready" in line:
                        break
        except BaseException:
            await self.kill()
            raise
        self._drain = asyncio.get_running_loop().create_task(self._keep_reading(stderr))

    async def _keep_reading(self, stderr: asyncio.StreamReader) -> None:
        # Keep the pipe from filling up; the lines help when a test fails.
        while line := await stderr.readline():
            self.log.append(line.decode(errors="replace").rstrip())

    async def kill(self) -> None:
        """SIGKILL the server (no clean shutdown, as a crash) and reap it."""
        process, self._process = self._process, None
        drain, self._drain = self._drain, None
        if process is not None:
            if process.returncode is None:
                process.kill()
            await asyncio.wait_for(process.wait(), READY_WITHIN)
        if drain is not None:
            await asyncio.wait_for(drain, READY_WITHIN)  # ends at EOF once the process is gone
