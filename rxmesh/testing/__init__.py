"""Helpers for testing code built on rxmesh: the same fault injection rxmesh tests itself with.

:class:`FaultInjectingStore` wraps any store (usually an
:class:`~rxmesh.providers.InMemoryStore`) and refuses, faults, stalls or cuts it on demand, logging
every operation it met. The error factories build the exact chains real providers raise, so
:mod:`rxmesh.faults` classifies them as it would in production.

Real infrastructure for integration tests: :class:`FaultProxy` (a loopback TCP proxy that resets,
stalls or refuses), :class:`TemporaryPostgresCluster` (a throwaway server to stop or restart) and
:class:`TemporaryPgBouncer` (a throwaway transaction-pooling PgBouncer, to test code that runs
behind a pooler as most production PostgreSQL does) and :class:`TemporaryNatsCluster` (clustered
``nats-server -js`` processes, to kill one of).

Cut/restore backends, the ways ``rxmesh drill`` cuts its store and brings it back, reusable in your
own outage tests: :class:`OutageBackend` (the protocol), :class:`InMemoryOutage` (the embedded
store behind its fault knobs), :class:`PostgresProxyOutage` (a server behind a loopback
:class:`FaultProxy`, never stopped) and :class:`ServerStopOutage` (a throwaway server, stopped and
started again).

:func:`set_testing` shrinks every retry and re-open wait of rxmesh in one call (a context manager
too), so a test of your own code does not wait out the production schedules.

The layout: ``_fault_store`` the fault-injecting store, with ``_fault_errors`` (the chains it
raises), ``_fault_log`` (what it logs and counts), ``_fault_query`` (its live queries) and
``_feed_gate`` (its change feed's gate); ``_delays`` ``set_testing``; ``_outage`` the cut/restore
backends; the throwaway servers on ``_throwaway``: ``_cluster`` (PostgreSQL), ``_pgbouncer``,
``_nats``; ``_proxy`` the loopback fault proxy.
"""

from __future__ import annotations

from rxmesh.testing._cluster import TemporaryPostgresCluster
from rxmesh.testing._delays import is_testing as is_testing
from rxmesh.testing._delays import set_testing
from rxmesh.testing._fault_store import (
    WRITE_OPS as WRITE_OPS,
)
from rxmesh.testing._fault_store import (
    FaultInjectingStore,
    connect_timeout_error,
    connection_reset_error,
    unreachable_error,
)
from rxmesh.testing._fault_store import (
    FaultInjectingStoreStatistics as FaultInjectingStoreStatistics,
)
from rxmesh.testing._fault_store import (
    Operation as Operation,
)
from rxmesh.testing._nats import TemporaryNatsCluster as TemporaryNatsCluster
from rxmesh.testing._outage import (
    InMemoryOutage as InMemoryOutage,
)
from rxmesh.testing._outage import (
    OutageBackend as OutageBackend,
)
from rxmesh.testing._outage import (
    PostgresProxyOutage as PostgresProxyOutage,
)
from rxmesh.testing._outage import (
    ServerStopOutage as ServerStopOutage,
)
from rxmesh.testing._pgbouncer import TemporaryPgBouncer
from rxmesh.testing._proxy import FaultProxy

__all__ = [
    "FaultInjectingStore",
    "FaultProxy",
    "TemporaryPgBouncer",
    "TemporaryPostgresCluster",
    "connect_timeout_error",
    "connection_reset_error",
    "set_testing",
    "unreachable_error",
]
