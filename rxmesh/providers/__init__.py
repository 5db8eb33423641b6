"""Store providers: the :class:`Store` protocol, the embedded :class:`InMemoryStore` (the default)
and :class:`PostgresStore` (asyncpg; importing it needs the ``postgres`` extra).

The layout: ``_store`` the protocol; ``memory`` the embedded store, with ``_memory_verbs`` (its
compare-and-set verbs), ``_memory_live`` (its live queries) and ``_memory_positions`` (its change
order and resume tokens); ``_window`` the ordered windows
of every store (on its ``page`` verb and its change feed); ``postgres`` the PostgreSQL store, a
package explained in its own docstring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rxmesh.providers._store import Store, observe

if TYPE_CHECKING:
    from rxmesh.providers.memory import InMemoryStore
    from rxmesh.providers.postgres import PostgresStore

__all__ = ["InMemoryStore", "PostgresStore", "Store", "observe"]


def __getattr__(name: str) -> Any:
    if name == "InMemoryStore":
        from rxmesh.providers.memory import InMemoryStore

        return InMemoryStore
    if name == "PostgresStore":
        from rxmesh.providers.postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module 'rxmesh.providers' has no attribute {name!r}")
