"""What the throwaway servers share: ``with`` starts one and cleans it up, whatever happened;
free loopback ports to start it on."""

from __future__ import annotations

import socket
from contextlib import ExitStack
from typing import Self

__all__ = ["Throwaway", "free_port", "free_ports"]


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free now: every probe stays bound until all are
    chosen, so the kernel never hands one port out twice."""
    with ExitStack() as probes:
        ports = []
        for _ in range(count):
            probe = probes.enter_context(socket.socket())
            probe.bind(("127.0.0.1", 0))
            ports.append(int(probe.getsockname()[1]))
        return ports


def free_port() -> int:
    """One loopback port free now."""
    return free_ports(1)[0]


class Throwaway:
    """A throwaway server: :meth:`start` brings it up, :meth:`cleanup` stops it and removes it."""

    def start(self) -> None:
        """Bring the server up."""
        raise NotImplementedError

    def cleanup(self) -> None:
        """Stop the server if it runs and remove what it wrote."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()
