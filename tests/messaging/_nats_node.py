"""A hub process for the NATS tests: ``python -m tests.messaging._nats_node ROLE URL PREFIX``.

Roles: ``coordinator`` (the build coordinator at admin/build) and ``gateway`` (a forwarding hub
at edge/gateway; a fourth argument sets its forward timeout in seconds). The process prints
``READY`` once its subscription is in place and runs until SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from rxmesh.messaging import BuildCoordinator, MessageHub, NatsTransport, Router

GATEWAY_ADDRESS = "edge/gateway"


async def main(role: str, url: str, prefix: str, forward_timeout: float) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    router = Router(await NatsTransport.connect(url, subject_prefix=prefix))
    if role == "coordinator":
        await BuildCoordinator(router).start()
    elif role == "gateway":
        await MessageHub(GATEWAY_ADDRESS, router, forward_timeout=forward_timeout).start()
    else:
        raise SystemExit(f"unknown role {role!r}")
    print("READY", flush=True)
    try:
        await stop.wait()
    finally:
        await router.close()


if __name__ == "__main__":
    role, url, prefix, *rest = sys.argv[1:]
    asyncio.run(main(role, url, prefix, float(rest[0]) if rest else 0.5))
