"""Every store-unreachable answer says whether this process's own loop stalled just before."""

from __future__ import annotations

import asyncio
import time

from rxmesh import CreateNodeRequest, MeshNode, RejectionReason
from rxmesh.aio import first_value
from rxmesh.diagnosis import LoopStallMonitor
from tests.helpers import ALICE

from .conftest import LogRecordsT, make_mesh

DOC = MeshNode(path="acme/b", node_type="Doc", content={"x": 1})


async def _unavailable_error_line(log_records: LogRecordsT) -> dict[str, object]:
    mesh, store = make_mesh()
    await mesh.create(MeshNode(path="acme/seed", node_type="Doc", content={}), access=ALICE)
    store.refuse_writes_as_unreachable()
    response = await first_value(mesh.create_node(CreateNodeRequest(node=DOC, access=ALICE)))
    assert response.rejection_reason is RejectionReason.UNAVAILABLE
    (line,) = [r for r in log_records.at("ERROR") if r["extra"].get("path") == "acme/b"]  # type: ignore[union-attr]
    return line


async def test_a_connect_fault_right_after_a_stall_carries_the_adjacency(
    log_records: LogRecordsT,
) -> None:
    monitor = LoopStallMonitor(tick=0.05, late_threshold=0.3)
    monitor.start()
    try:
        await asyncio.sleep(0.1)
        loop = asyncio.get_running_loop()
        blocked = loop.create_future()

        def block() -> None:
            time.sleep(0.5)  # the process's own loop stalls (deliberately, once)
            blocked.set_result(None)

        loop.call_soon(block)
        await blocked
        await asyncio.sleep(0.1)  # the late tick arrives and records the stall
        assert len(monitor.stalls()) == 1
        line = await _unavailable_error_line(log_records)
    finally:
        monitor.stop()
    assert "this process's event loop stalled" in str(line["message"])
    assert "check this process before the database" in str(line["message"])
    extra = line["extra"]
    assert isinstance(extra, dict)
    assert extra["stall_seconds"] >= 0.3
    assert extra["event"] == "store_unreachable"


async def test_control_the_same_fault_without_a_stall_carries_none(
    log_records: LogRecordsT,
) -> None:
    monitor = LoopStallMonitor(tick=0.05, late_threshold=0.3)
    monitor.start()
    try:
        await asyncio.sleep(0.2)
        assert monitor.stalls() == ()
        line = await _unavailable_error_line(log_records)
    finally:
        monitor.stop()
    assert "stalled" not in str(line["message"])
    extra = line["extra"]
    assert isinstance(extra, dict)
    assert "stall_seconds" not in extra
