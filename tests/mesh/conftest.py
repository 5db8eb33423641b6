"""Helpers for the mesh tests: a mesh over a fault-injecting in-memory store, fast ladder."""

from __future__ import annotations

from typing import Any

from rxmesh import Mesh
from rxmesh.ledger import PendingWriteLedger
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore
from tests.helpers import LogRecords

FAST = (0.001, 0.001, 0.001)
"""A retry ladder with the real shape (three retries) and no real waiting."""


def make_mesh(**options: Any) -> tuple[Mesh, FaultInjectingStore]:
    """A mesh over FaultInjectingStore(InMemoryStore()) with an in-memory ledger."""
    store = FaultInjectingStore(InMemoryStore())
    options.setdefault("retry_delays", FAST)
    options.setdefault("ledger", PendingWriteLedger(""))
    return Mesh(store, **options), store


LogRecordsT = LogRecords
