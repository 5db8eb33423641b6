"""The example service's live page in a real browser: headless Chromium opens it, its
EventSource lists the nodes as they are created, and the test reads the page's DOM over the
DevTools protocol. A page whose connection is broken (through a FaultProxy between the browser
and the service) reconnects by itself with ``Last-Event-ID`` and is answered with a resumed
Delta, smaller than the snapshot.

Fails at 1d389e8 because there was no stream to read (no ``rxmesh.web``, no ``mesh.watch``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
import websockets

from rxmesh.testing import FaultProxy
from tests.conftest import IN_CI
from tests.helpers import free_port

from .conftest import PARTITION, Service
from .test_service import create

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


class Page:
    """One page over the DevTools protocol: ``evaluate`` runs an expression, returns its value."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._ids = 0

    async def evaluate(self, expression: str) -> Any:
        self._ids += 1
        call = {
            "id": self._ids,
            "method": "Runtime.evaluate",
            "params": {"expression": expression, "returnByValue": True},
        }
        await self._connection.send(json.dumps(call))
        while True:
            answer = json.loads(await self._connection.recv())
            if answer.get("id") == self._ids:
                return answer["result"]["result"].get("value")

    async def until(self, expression: str, expected: Any) -> None:
        seen = None
        try:
            async with asyncio.timeout(30):
                while (seen := await self.evaluate(expression)) != expected:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
        except TimeoutError:
            page = await self.evaluate("document.documentElement.outerHTML")
            raise AssertionError(f"{expression} is {seen!r}, not {expected!r}: {page}") from None


@pytest.fixture
async def page(service: Service, tmp_path: Path) -> AsyncIterator[Page]:
    async with browsing(f"{service.base}/?partition={PARTITION}", tmp_path) as opened:
        yield opened


@dataclass
class Proxied:
    page: Page
    proxy: FaultProxy


@pytest.fixture
async def proxied(service: Service, tmp_path: Path) -> AsyncIterator[Proxied]:
    """The page loaded through a FaultProxy in front of the service: the test can break the
    browser's connections (``proxy.reset()``) and the page's EventSource reconnects by itself."""
    target = urlparse(service.base)
    async with FaultProxy(target.hostname or "127.0.0.1", target.port or 80) as proxy:
        url = f"http://{proxy.host}:{proxy.port}/?partition={PARTITION}"
        async with browsing(url, tmp_path) as opened:
            yield Proxied(opened, proxy)


@contextlib.asynccontextmanager
async def browsing(url: str, tmp_path: Path) -> AsyncIterator[Page]:
    """Headless Chromium on ``url``, its page over the DevTools protocol; ended after."""
    if not Path(CHROMIUM).exists():  # noqa: ASYNC240 - one stat
        if IN_CI:
            pytest.fail("chromium is not installed (.ci/run installs it)")
        pytest.skip("chromium is not installed")
    port = free_port()
    log = tmp_path / "chromium.log"
    with log.open("wb") as out:
        browser = await asyncio.create_subprocess_exec(
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--remote-debugging-port={port}",
            url,
            stdout=out,
            stderr=out,
            start_new_session=True,  # its helper processes are ended with it
        )
    try:
        async with asyncio.timeout(30), httpx.AsyncClient() as client:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    targets = (await client.get(f"http://127.0.0.1:{port}/json/list")).json()
                    pages = [t for t in targets if t["type"] == "page"]
                    if pages:
                        break
                assert browser.returncode is None, log.read_text()
                await asyncio.sleep(0.1)
        async with websockets.connect(pages[0]["webSocketDebuggerUrl"], max_size=None) as ws:
            yield Page(ws)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(browser.pid, signal.SIGTERM)
        try:
            async with asyncio.timeout(10):
                await browser.wait()
        except TimeoutError:
            os.killpg(browser.pid, signal.SIGKILL)
            await browser.wait()


LISTED = (
    "[...document.querySelectorAll('#nodes li')].map((li) => li.dataset.path)"
    ".filter((path) => path.includes('/orders/'))"  # not the partition's root and grant
)


async def test_the_page_lists_nodes_as_they_are_created(service: Service, page: Page) -> None:
    await page.until("document.getElementById('status').textContent", "live")
    assert await page.evaluate(LISTED) == []
    created: list[str] = []
    async with httpx.AsyncClient(base_url=service.base, timeout=30) as client:
        for i in range(3):
            path = f"{PARTITION}/orders/browser-{i}"
            await create(client, path, f"browser-{i}")
            created.append(path)
            await page.until(LISTED, created)  # shown while the page stays open


RECORD = """
window.received = [];
for (const kind of ["INITIAL", "DELTA"]) {
  source.addEventListener(kind, (event) => {
    const frame = JSON.parse(event.data);
    window.received.push({kind, bytes: event.data.length, id: event.lastEventId,
                          token: frame.resume_token, resumed: frame.resumed, reset: frame.reset});
  });
}
true
"""
"""Records every event the page's EventSource (``source``) receives from now on."""

SNAPSHOT_BYTES = """
window.snapshot = null;
const fresh = new EventSource("/live?partition=" + encodeURIComponent(partition));
fresh.addEventListener("INITIAL", (event) => {
  window.snapshot = event.data.length;
  fresh.close();
});
true
"""
"""What a connection without ``Last-Event-ID`` receives first: the whole snapshot."""


async def test_a_reconnecting_page_resumes_with_a_delta_not_the_snapshot(
    service: Service, proxied: Proxied
) -> None:
    page = proxied.page
    await page.until("document.getElementById('status').textContent", "live")
    created: list[str] = []
    async with httpx.AsyncClient(base_url=service.base, timeout=30) as client:
        for i in range(8):
            path = f"{PARTITION}/orders/resume-{i}"
            await create(client, path, f"resume-{i}")
            created.append(path)
        await page.until(LISTED, created)
        assert await page.evaluate(RECORD) is True
        await create(client, f"{PARTITION}/orders/resume-8", "resume-8")
        created.append(f"{PARTITION}/orders/resume-8")
        await page.until("window.received.length", 1)
        (before,) = await page.evaluate("window.received")
        # The event id is the frame's resume token: what the browser will send back.
        assert before["kind"] == "DELTA" and before["id"] == before["token"] is not None
        assert await page.evaluate(SNAPSHOT_BYTES) is True
        await page.until("window.snapshot !== null", True)
        snapshot = await page.evaluate("window.snapshot")

        proxied.proxy.reset()  # the page's connection dies; EventSource reconnects by itself
        await page.until("document.getElementById('status').textContent", "reconnecting")
        await create(client, f"{PARTITION}/orders/resume-9", "resume-9")  # while it is away
        created.append(f"{PARTITION}/orders/resume-9")
        await page.until("window.received.length >= 2", True)
        after = (await page.evaluate("window.received"))[1]
        assert after["kind"] == "DELTA" and after["resumed"] is True and not after["reset"]
        assert after["bytes"] < snapshot / 2, (after, snapshot)  # the change, not the state
        await page.until(LISTED, created)  # and the page shows what changed while away
        assert await page.evaluate(
            "window.received.filter((e) => e.kind === 'INITIAL').length"
        ) == 0
