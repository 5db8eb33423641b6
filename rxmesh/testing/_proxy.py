"""A loopback TCP proxy that breaks connections on demand, for real connection-loss tests.

Example:
    >>> async def demo(dsn_host: str, dsn_port: int) -> None:  # doctest: +SKIP
    ...     async with FaultProxy(dsn_host, dsn_port) as proxy:
    ...         conn = await asyncpg.connect(host=proxy.host, port=proxy.port, user="postgres")
    ...         proxy.reset()          # every client socket gets a TCP RST
"""

from __future__ import annotations

import asyncio
import socket
import struct
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import urlparse, urlunparse

__all__ = ["FaultProxy"]

_CHUNK = 65536


@dataclass(eq=False)
class _Pair:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    commit_seen: bool = False


def _abort_with_rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass  # already closed: nothing to reset
    writer.transport.abort()


class FaultProxy:
    """Forward ``127.0.0.1:<port>`` to ``target_host:target_port``, and break it on demand.

    Knobs (all synchronous, effective at once):

    - :meth:`reset`: abort every client connection with a TCP RST (``SO_LINGER 0``).
    - :meth:`stall` / :meth:`unstall`: stop / resume forwarding bytes both ways (connections
      stay open; new ones are accepted but get no answer).
    - :meth:`refuse` / :meth:`restore`: stop listening (connects are refused) / listen again on
      the same port.
    - :meth:`reset_after_server_bytes`: RST every client once ``n`` more bytes came from the
      server (a connection lost mid-stream).
    - :meth:`reset_after_client_sends`: once a client sends a chunk containing ``marker`` (e.g.
      ``b"COMMIT"``), forward it, then RST that client instead of forwarding the server's reply
      (an ambiguous commit: the server committed, the client never heard).
    - :meth:`retarget`: new connections go to another server (a failover moving a virtual IP or
      a DNS name: pair it with :meth:`reset` to drop the connections to the old one).

    Use ``async with FaultProxy(host, port) as proxy`` (or :meth:`start` / :meth:`close`).
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._port = 0
        self._pairs: set[_Pair] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._reset_budget: int | None = None
        self._commit_marker: bytes | None = None
        self.connections_accepted = 0
        """How many client connections the proxy accepted so far."""

    @property
    def host(self) -> str:
        """The proxy's listening host (always ``127.0.0.1``)."""
        return "127.0.0.1"

    @property
    def port(self) -> int:
        """The proxy's listening port (fixed after :meth:`start`, kept by :meth:`restore`)."""
        return self._port

    def dsn(self, dsn: str) -> str:
        """``dsn`` with its host and port replaced by the proxy's."""
        parsed = urlparse(dsn)
        userinfo = parsed.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@" if userinfo else ""
        return urlunparse(parsed._replace(netloc=f"{netloc}{self.host}:{self.port}"))

    async def start(self) -> FaultProxy:
        """Listen on a free loopback port."""
        await self._listen()
        return self

    async def close(self) -> None:
        """Stop listening and close every connection."""
        self.refuse()
        for pair in list(self._pairs):
            self._drop(pair, rst=False)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- knobs -------------------------------------------------------------------------------

    def reset(self) -> None:
        """Abort every current client connection with a TCP RST."""
        for pair in list(self._pairs):
            self._drop(pair, rst=True)

    def stall(self) -> None:
        """Stop forwarding bytes (both ways) until :meth:`unstall`."""
        self._flowing.clear()

    def unstall(self) -> None:
        """Resume forwarding."""
        self._flowing.set()

    def refuse(self) -> None:
        """Stop listening: new connections are refused (current ones are kept)."""
        if self._server is not None:
            self._server.close()
            self._server = None

    async def restore(self) -> None:
        """Listen again on the same port, forwarding normally."""
        self._flowing.set()
        if self._server is None:
            await self._listen()

    def reset_after_server_bytes(self, n_bytes: int) -> None:
        """RST every client once ``n_bytes`` more bytes have been forwarded from the server."""
        self._reset_budget = n_bytes

    def retarget(self, target_host: str, target_port: int) -> None:
        """Forward new connections to ``target_host:target_port`` (current ones are kept)."""
        self._target = (target_host, target_port)

    def reset_after_client_sends(self, marker: bytes) -> None:
        """Drop the next client that sends ``marker``: its chunk is forwarded, the reply is not."""
        self._commit_marker = marker

    # -- machinery ---------------------------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self.host, self._port, reuse_address=True
        )
        self._port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            _abort_with_rst(writer)
            return
        pair = _Pair(client=writer, server=up_writer)
        self._pairs.add(pair)
        for task in (
            asyncio.create_task(self._pump(pair, reader, up_writer, from_server=False)),
            asyncio.create_task(self._pump(pair, up_reader, writer, from_server=True)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(
        self,
        pair: _Pair,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        from_server: bool,
    ) -> None:
        try:
            while chunk := await reader.read(_CHUNK):
                await self._flowing.wait()
                if pair not in self._pairs:
                    return
                if from_server and pair.commit_seen:
                    self._drop(pair, rst=True)
                    return
                writer.write(chunk)
                await writer.drain()
                if not from_server and self._commit_marker and self._commit_marker in chunk:
                    self._commit_marker = None
                    pair.commit_seen = True
                if from_server and self._reset_budget is not None:
                    self._reset_budget -= len(chunk)
                    if self._reset_budget <= 0:
                        self._reset_budget = None
                        self.reset()
                        return
        except OSError:
            pass  # one side went away (reset, closed): the other is closed below
        if pair in self._pairs:
            self._drop(pair, rst=False)

    def _drop(self, pair: _Pair, *, rst: bool) -> None:
        self._pairs.discard(pair)
        if rst:
            _abort_with_rst(pair.client)
        else:
            pair.client.close()
        pair.server.close()
