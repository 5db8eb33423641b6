"""A throwaway PgBouncer in front of a PostgreSQL server, for tests of code that runs behind a
transaction-pooling proxy (as most production PostgreSQL does).

It writes its own configuration and auth file into a temp dir, listens on a free loopback port and
never touches a system PgBouncer (the Debian package's service on 6432 is not used). The methods
block (they start a process and wait for its port); from async code call them through
``asyncio.to_thread``, or use the instance as a context manager around the whole test.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse, urlunparse

from rxmesh.testing._throwaway import Throwaway, free_port

__all__ = ["PoolMode", "TemporaryPgBouncer", "find_pgbouncer"]

PoolMode = Literal["session", "transaction", "statement"]


def find_pgbouncer() -> Path:
    """The ``pgbouncer`` binary (env ``RXMESH_PGBOUNCER``, else PATH, else ``/usr/sbin``).

    Raises:
        FileNotFoundError: no pgbouncer binary was found (Debian/Ubuntu: ``apt-get install
            pgbouncer``).
    """
    configured = os.environ.get("RXMESH_PGBOUNCER")
    if configured:
        if not Path(configured).is_file():
            raise FileNotFoundError(f"RXMESH_PGBOUNCER={configured} is not a file")
        return Path(configured)
    found = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
    )
    if found is None:
        raise FileNotFoundError(
            "no pgbouncer binary found (apt-get install pgbouncer, or set RXMESH_PGBOUNCER)"
        )
    return Path(found)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class TemporaryPgBouncer(Throwaway):
    """Run PgBouncer on a free loopback port in front of ``target_host:target_port``.

    Every database name is forwarded to the same name on the target (``* = host=... port=...``);
    clients are trusted (``auth_type = trust``; the users named in ``users`` must exist on the
    target, which authenticates PgBouncer's own server connections). As root it runs as
    ``os_user`` (``runuser``): PgBouncer refuses to run as root.

    Args:
        target_host: the server's host (a loopback address).
        target_port: the server's port.
        pool_mode: ``"transaction"`` (the default: what production poolers run), ``"session"``
            or ``"statement"``.
        pool_size: server connections per (database, user) pair.
        users: the user names clients may log in as.
        settings: more ``[pgbouncer]`` settings, written as given (they override the defaults).
        binary: the pgbouncer binary (default: :func:`find_pgbouncer`).
        os_user: the OS user to run as when this process is root.

    Example:
        >>> with TemporaryPgBouncer("127.0.0.1", 5432) as bouncer:  # doctest: +SKIP
        ...     store = PostgresStore(bouncer.dsn("postgresql://app@127.0.0.1:5432/db"),
        ...                           listen_dsn="postgresql://app@127.0.0.1:5432/db")
    """

    def __init__(
        self,
        target_host: str = "127.0.0.1",
        target_port: int = 5432,
        *,
        pool_mode: PoolMode = "transaction",
        pool_size: int = 20,
        users: tuple[str, ...] = ("postgres",),
        settings: Mapping[str, str | int] | None = None,
        binary: Path | str | None = None,
        os_user: str = "postgres",
    ) -> None:
        self._binary = Path(binary) if binary is not None else find_pgbouncer()
        self._target = (target_host, target_port)
        self.pool_mode: PoolMode = pool_mode
        self._pool_size = pool_size
        self._users = users
        self._settings = dict(settings or {})
        self._as_root = os.geteuid() == 0
        self._os_user = os_user
        self._dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.port = 0
        """The loopback port PgBouncer listens on (fixed at :meth:`start`)."""

    @property
    def host(self) -> str:
        """Always ``127.0.0.1``."""
        return "127.0.0.1"

    def dsn(self, dsn: str) -> str:
        """``dsn`` (a URL to the target server) with host and port replaced by PgBouncer's."""
        parsed = urlparse(dsn)
        userinfo = parsed.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@" if userinfo else ""
        return urlunparse(parsed._replace(netloc=f"{netloc}{self.host}:{self.port}"))

    @property
    def log_path(self) -> Path:
        """PgBouncer's log file (useful when a test fails)."""
        if self._dir is None:
            raise RuntimeError("the PgBouncer was not started")
        return self._dir / "pgbouncer.log"

    def _config(self) -> str:
        host, port = self._target
        assert self._dir is not None
        settings: dict[str, str | int] = {
            "listen_addr": "127.0.0.1",
            "listen_port": self.port,
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": str(self._dir / "userlist.txt"),
            "admin_users": ",".join(self._users),
            "pool_mode": self.pool_mode,
            "default_pool_size": self._pool_size,
            "max_client_conn": 1000,
            "logfile": str(self._dir / "pgbouncer.log"),
            "pidfile": str(self._dir / "pgbouncer.pid"),
            "server_login_retry": 1,
            "ignore_startup_parameters": "extra_float_digits",
        }
        settings.update(self._settings)
        lines = ["[databases]", f"* = host={host} port={port}", "", "[pgbouncer]"]
        lines += [f"{key} = {value}" for key, value in settings.items()]
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 10.0) -> None:
        """Write the configuration, start PgBouncer and wait until it accepts connections.

        Raises:
            RuntimeError: it exited or did not listen within ``timeout`` (its log is quoted).
        """
        if self._process is not None:
            return
        self._dir = Path(tempfile.mkdtemp(prefix="rxmesh-pgbouncer-"))
        self.port = free_port()
        (self._dir / "userlist.txt").write_text(
            "".join(f'"{user}" ""\n' for user in self._users), encoding="utf-8"
        )
        config = self._dir / "pgbouncer.ini"
        config.write_text(self._config(), encoding="utf-8")
        command = [str(self._binary), "-q", str(config)]
        if self._as_root:
            shutil.chown(self._dir, self._os_user, self._os_user)
            for path in self._dir.iterdir():
                shutil.chown(path, self._os_user, self._os_user)
            command = ["runuser", "-u", self._os_user, "--", *command]
        self._process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + timeout
        while not _accepts(self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self._fail_start()
            time.sleep(0.02)

    def _fail_start(self) -> None:
        process = self._process
        assert process is not None
        if process.poll() is None:
            process.kill()
        _, stderr = process.communicate(timeout=5)
        log = ""
        if self._dir is not None and (self._dir / "pgbouncer.log").exists():
            log = (self._dir / "pgbouncer.log").read_text(encoding="utf-8", errors="replace")
        self._process = None
        self.cleanup()
        raise RuntimeError(
            f"pgbouncer did not start on 127.0.0.1:{self.port}: "
            f"{stderr.decode(errors='replace').strip()} {log[-2000:].strip()}".strip()
        )

    def reload(self) -> None:
        """Re-read the configuration (``SIGHUP``), e.g. after :meth:`retarget`."""
        if self._process is None:
            raise RuntimeError("the PgBouncer is not running")
        self._signal(signal.SIGHUP)

    def retarget(self, host: str, port: int) -> None:
        """Point the pooler at another server (a failover, as an operator does it): rewrite the
        configuration and reload. New server connections go to ``host:port``; PgBouncer closes
        the idle ones to the old target as they are released."""
        self._target = (host, port)
        if self._dir is not None:
            (self._dir / "pgbouncer.ini").write_text(self._config(), encoding="utf-8")
        if self._process is not None:
            self.reload()

    def _signal(self, signum: int) -> None:
        assert self._process is not None
        if self._as_root:
            # runuser forwards nothing: signal PgBouncer itself, found by its pid file.
            pid_file = self.log_path.with_name("pgbouncer.pid")
            deadline = time.monotonic() + 5
            while not pid_file.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(int(pid_file.read_text().strip()), signum)
        else:
            self._process.send_signal(signum)

    def stop(self) -> None:
        """Stop PgBouncer (``SIGINT``: it closes its connections at once) and wait for it."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            try:
                self._process = process
                self._signal(signal.SIGINT)
            except (OSError, ValueError):
                process.terminate()
            finally:
                self._process = None
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()

    def cleanup(self) -> None:
        """Stop PgBouncer if it runs and remove its directory."""
        self.stop()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
