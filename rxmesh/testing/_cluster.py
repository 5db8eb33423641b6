"""A throwaway PostgreSQL cluster for tests that stop, restart or crash a server.

Never stop a shared server: tests that need a server to go away start their own with
:class:`TemporaryPostgresCluster`. The methods block (they run ``pg_ctl -w``); from async code
call them through ``asyncio.to_thread``.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

from rxmesh.testing._throwaway import Throwaway, free_port

__all__ = ["TemporaryPostgresCluster", "find_postgres_bin"]

StopMode = Literal["smart", "fast", "immediate"]


def find_postgres_bin() -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``pg_basebackup`` (env ``RXMESH_PG_BIN``,
    else the directory of ``initdb`` on PATH, symlinks resolved, else the newest
    ``/usr/lib/postgresql/*/bin``).

    Raises:
        FileNotFoundError: no PostgreSQL server binaries were found.
    """
    configured = os.environ.get("RXMESH_PG_BIN")
    if configured:
        return Path(configured)
    on_path = shutil.which("initdb")
    if on_path:
        # A symlink on PATH (/usr/local/bin/initdb -> .../15/bin/initdb): the other server
        # binaries (pg_basebackup, ...) live beside its target.
        return Path(on_path).resolve().parent
    def major(initdb: str) -> int:
        version = Path(initdb).parent.parent.name
        return int(version) if version.isdigit() else 0

    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=major)
    if not candidates:
        raise FileNotFoundError("no initdb found (set RXMESH_PG_BIN to PostgreSQL's bin dir)")
    return Path(candidates[-1]).parent


class TemporaryPostgresCluster(Throwaway):
    """``initdb`` into a temp dir and run it on a free loopback port (trust auth, ``fsync=off``).

    As root, the server runs as the ``postgres`` OS user (``runuser``), since PostgreSQL refuses
    to run as root. The superuser is ``postgres``; the DSN names database ``postgres``.

    Example:
        >>> with TemporaryPostgresCluster() as cluster:  # doctest: +SKIP
        ...     cluster.restart()
        ...     print(cluster.dsn)
    """

    def __init__(self, *, bin_dir: Path | str | None = None, os_user: str = "postgres") -> None:
        self._bin = Path(bin_dir) if bin_dir is not None else find_postgres_bin()
        self._as_root = os.geteuid() == 0
        self._os_user = os_user
        self._dir: Path | None = None
        self.port = 0
        """The loopback port (fixed at :meth:`start`, kept across restarts)."""

    @property
    def dsn(self) -> str:
        """``postgresql://postgres@127.0.0.1:<port>/postgres``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory."""
        if self._dir is None:
            raise RuntimeError("the cluster was not started")
        return self._dir / "data"

    def _run(self, *argv: str) -> None:
        command = [str(self._bin / argv[0]), *argv[1:]]
        if self._as_root:
            command = ["runuser", "-u", self._os_user, "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        """Create the cluster if needed, then start it and wait until it accepts connections."""
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="rxmesh-pg-"))
            if self._as_root:
                shutil.chown(self._dir, self._os_user, self._os_user)
            self._run(
                "initdb", "-D", str(self.data_dir), "-U", "postgres", "-A", "trust",
                "--no-sync", "-E", "UTF8",
            )
            self.port = free_port()
        options = (
            f"-p {self.port} -k {self._dir} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            "pg_ctl", "-D", str(self.data_dir), "-l", str(self._dir / "server.log"),
            "-o", options, "-w", "-t", "30", "start",
        )

    def standby(self) -> TemporaryPostgresCluster:
        """A streaming standby of this (running) cluster: ``pg_basebackup -R`` into a temp dir of
        its own, on a free loopback port. Call :meth:`start` on it; it runs in hot standby (reads
        answer, writes are refused with 25006) until :meth:`promote`.

        Example:
            >>> with TemporaryPostgresCluster() as primary:  # doctest: +SKIP
            ...     replica = primary.standby()
            ...     replica.start()
        """
        if self._dir is None or not self.port:
            raise RuntimeError("start the primary before making a standby of it")
        replica = TemporaryPostgresCluster(bin_dir=self._bin, os_user=self._os_user)
        replica._dir = Path(tempfile.mkdtemp(prefix="rxmesh-pg-standby-"))
        if replica._as_root:
            shutil.chown(replica._dir, self._os_user, self._os_user)
        replica._run(
            "pg_basebackup", "-D", str(replica.data_dir), "-h", "127.0.0.1", "-p", str(self.port),
            "-U", "postgres", "-R", "-X", "stream", "--no-sync", "--checkpoint=fast",
        )
        replica.port = free_port()
        return replica

    def promote(self) -> None:
        """Promote a standby to a primary (``pg_ctl promote -w``): it then takes writes."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-w", "-t", "30", "promote")

    def stop(self, mode: StopMode = "fast") -> None:
        """Stop the server (``fast`` disconnects clients; ``immediate`` is a crash)."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "30", "stop")

    def restart(self, mode: StopMode = "fast") -> None:
        """Stop then start on the same port."""
        self.stop(mode)
        self.start()

    def cleanup(self) -> None:
        """Stop the server if it runs and remove the directory."""
        if self._dir is None:
            return
        if (self.data_dir / "postmaster.pid").exists():
            self.stop("immediate")
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None
