"""The throwaway servers' ``with``: it starts the server and cleans it up, even when the body
raises; both TemporaryPostgresCluster and TemporaryPgBouncer behave so."""

from __future__ import annotations

import pytest

from rxmesh.testing import TemporaryPgBouncer, TemporaryPostgresCluster
from rxmesh.testing._throwaway import Throwaway


class Recorder(Throwaway):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")

    def cleanup(self) -> None:
        self.calls.append("cleanup")


def test_with_starts_then_cleans_up_and_returns_the_server_itself() -> None:
    server = Recorder()
    assert server.calls == []  # control: building it starts nothing
    with server as entered:
        assert entered is server
        assert server.calls == ["start"]
    assert server.calls == ["start", "cleanup"]


def test_with_cleans_up_when_the_body_raises_and_lets_the_error_through() -> None:
    server = Recorder()
    with pytest.raises(RuntimeError, match="boom"), server:
        raise RuntimeError("boom")
    assert server.calls == ["start", "cleanup"]


def test_a_throwaway_that_does_not_say_how_to_start_refuses() -> None:
    with pytest.raises(NotImplementedError), Throwaway():
        pass


def test_both_throwaway_servers_share_it() -> None:
    assert issubclass(TemporaryPostgresCluster, Throwaway)
    assert issubclass(TemporaryPgBouncer, Throwaway)
