"""A writer process for the crash-safety test: creates nodes through a Mesh with a journal.

    python _crash_writer.py DSN SCHEMA_PREFIX JOURNAL_DIR PARTITION COUNT

Prints ``ready`` once its store is started, waits for a line on stdin (the test cuts the store
meanwhile), then creates COUNT nodes one by one, printing one JSON line per answer. It is meant
to be killed with SIGKILL somewhere in the middle.
"""

from __future__ import annotations

import asyncio
import json
import sys

from rxmesh import AccessContext, Mesh, MeshNode
from rxmesh.aio import first_value
from rxmesh.ledger import PendingWriteLedger
from rxmesh.operations import CreateNodeRequest
from rxmesh.providers.postgres import PostgresStore


async def main(dsn: str, prefix: str, journal: str, partition: str, count: int) -> None:
    store = PostgresStore(
        dsn,
        schema_prefix=prefix,
        max_size=2,
        connect_timeout=0.5,
        command_timeout=2.0,
        reconnect_backoff=(0.05, 0.1),
    )
    await store.start()
    mesh = Mesh(store, ledger=PendingWriteLedger(journal), retry_delays=(0.01, 0.01, 0.01))
    writer = AccessContext(user="writer")
    # The partition exists before the outage (this writer owns it).
    await mesh.create(MeshNode(path=f"{partition}/seed", content={}), access=writer)
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    for n in range(count):
        request = CreateNodeRequest(
            node=MeshNode(path=f"{partition}/n{n:04d}", content={"n": n}), access=writer
        )
        response = await first_value(mesh.create_node(request), timeout=30.0)
        line = {
            "path": request.node.path,
            "request_id": request.request_id,
            "success": response.success,
            "reason": None if response.rejection_reason is None else str(response.rejection_reason),
        }
        print(json.dumps(line), flush=True)
    print("done", flush=True)
    await asyncio.Event().wait()  # hold still until killed


if __name__ == "__main__":
    dsn, prefix, journal, partition, count = sys.argv[1:6]
    asyncio.run(main(dsn, prefix, journal, partition, int(count)))
