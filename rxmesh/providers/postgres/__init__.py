"""The PostgreSQL store (asyncpg): a schema per partition, a LISTEN/NOTIFY change feed.

This package is the only part of rxmesh that imports asyncpg. Its modules, each one job, import
one way: down this list, never up it.

- ``_store``: :class:`PostgresStore`, the facade (options, start and close, statistics);
- ``_live`` (live queries, their resumes and gap recovery), ``_changes`` (what changed since a
  position), ``_reads``, ``_writes`` (creates, bulk windows,
  compare-and-set verbs; ``_groups``: concurrent creates of a partition as one statement),
  ``_pages`` (the ``page`` verb of ordered windows);
- ``_feed``: the change feed, owning its dispatcher (``_dispatch``), its listener
  (``_listener``), the evidence it holds back (``_evidence``), its hot streams (``_streams``)
  and its bookkeeping (``_book``, ``_throttle``, the payload parser ``_notifications``);
- ``_pooler`` (pooler detection), ``_schema`` (identifiers, DDL, the notify trigger);
- ``_connections``: the pool, every store call's acquire, run and release, the dedicated
  connections; ``_attempts``: one connection attempt at a time while the store is away;
- ``_errors``: the one mapping of driver and network failures to
  :class:`~rxmesh.exceptions.StoreError`, a pure function; ``_rows``: rows as nodes and back;
  ``_conditions``: a query's partitions and the conditions of its statements;
  ``_filters``: a content filter compiled to SQL over ``content`` (a pure function);
  ``_order``: an ordered window's order compiled to SQL (pure);
  ``_positions``: positions in the change order and the resume tokens that carry them.
"""

from rxmesh.exceptions import ChangeFeedUnverifiedError as ChangeFeedUnverifiedError
from rxmesh.providers.postgres._book import ChangeFeedState as ChangeFeedState
from rxmesh.providers.postgres._book import ChangeFeedStatistics as ChangeFeedStatistics
from rxmesh.providers.postgres._connections import TARGET_SESSION_ATTRS as TARGET_SESSION_ATTRS
from rxmesh.providers.postgres._schema import quote_identifier as quote_identifier
from rxmesh.providers.postgres._store import PostgresStore
from rxmesh.providers.postgres._store import PostgresStoreStatistics as PostgresStoreStatistics

__all__ = [
    "PostgresStore",
]
