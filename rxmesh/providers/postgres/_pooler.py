"""Whether the pool's DSN goes through a connection pooler, and what a change feed that cannot
be verified says about one.

Behind a transaction-pooling proxy (PgBouncer, RDS Proxy, Supavisor) every statement may run on
another server connection: prepared statements must stay unnamed, and a LISTEN session's server
connection is handed to other clients, so the change feed needs a direct connection.
"""

from __future__ import annotations

import asyncio

from loguru import logger

from rxmesh.exceptions import ChangeFeedUnverifiedError
from rxmesh.providers.postgres._connections import Connections
from rxmesh.providers.postgres._errors import DRIVER_FAULTS

__all__ = ["detect_pooler", "unverified_error"]


async def detect_pooler(connections: Connections) -> tuple[bool, str]:
    """Whether ``dsn`` reaches PostgreSQL through a connection pooler, and the evidence.

    A PostgreSQL backend sends its own pid as the connection's backend key; a pooler
    (PgBouncer, RDS Proxy, Supavisor, Odyssey, pgcat) sends a key of its own, since the client
    is not bound to one server process. One connection (unnamed statements only, safe either
    way) compares the key with ``pg_backend_pid()``. A plain TCP proxy forwards the server's key
    and is rightly not a pooler.
    """
    name = connections.name
    conn = await connections.connect(operation="connecting", pooled=True)
    try:
        backend_pid = await conn.fetchval("SELECT pg_backend_pid()")
    except (TimeoutError, *DRIVER_FAULTS) as exc:
        conn.terminate()
        connections.raise_at_boundary(
            exc, operation="connecting", stage="query", connection=conn, connection_usable=False
        )
    except BaseException:
        conn.terminate()
        raise
    key = conn.get_server_pid()
    try:
        async with asyncio.timeout(connections.command_timeout):
            await conn.close()
    except (TimeoutError, *DRIVER_FAULTS):
        conn.terminate()
    if key == backend_pid:
        return False, f"the backend key is the server's pid {backend_pid}: a direct connection"
    evidence = (
        f"the backend key {key} is not the pid {backend_pid} of the server process that "
        "answered: a connection pooler is in between"
    )
    logger.bind(store=name, pooled=True).info(
        "store '{}': {}; statements are unnamed (statement_cache_size=0)", name, evidence
    )
    return True, evidence


def unverified_error(connections: Connections, problem: str) -> ChangeFeedUnverifiedError:
    """The refusal of a start whose probe, sent through the pool, never reached the listener:
    ``problem`` says what was seen, the message what to pass."""
    name = connections.name
    if connections.pooled:
        why = (
            f"the pool's DSN goes through a connection pooler ({connections.pooler_evidence}), "
            "and the LISTEN connection goes there too"
            if connections.listen_dsn == connections.dsn
            else "the pool's DSN goes through a connection pooler, and the LISTEN "
            f"connection ({connections.listen_name}) does not see its commits"
        )
    else:
        why = "a transaction-pooling proxy or a standby between rxmesh and the primary?"
    return ChangeFeedUnverifiedError(
        f"store '{name}': notifications sent through the pool never reach the LISTEN "
        f"connection ({problem}): {why}. A transaction pooler (PgBouncer, RDS Proxy, "
        "Supavisor) hands the LISTEN session's server connection to other clients, so the "
        "change feed would be silently dead. Pass listen_dsn= a direct connection to the "
        "primary (the pool may stay on the pooler).",
        store=name,
        pooled=connections.pooled,
        listen_target=connections.listen_name,
    )
