"""Equal content filters are one cache key: two queries whose filters differ only in how they were
written share one upstream; a different filter opens its own (the negative control)."""

from __future__ import annotations

from reactivex import Observable
from reactivex.subject import Subject
from reactivex.testing import TestScheduler

from rxmesh.cache import SyncedQueryCache
from rxmesh.model import NodeQuery, QueryFrame, and_, field, not_, or_


def test_equal_filters_share_one_upstream_and_a_different_one_opens_its_own() -> None:
    opened: list[NodeQuery] = []

    def open_query(query: NodeQuery) -> Observable[QueryFrame]:
        opened.append(query)
        return Subject()

    cache = SyncedQueryCache(open_query, scheduler=TestScheduler())
    a, b, c = field("status").eq("open"), field("total").gt(100), field("tags").contains("rush")
    written = [
        NodeQuery(partition="shop", where=and_(a, or_(b, c))),
        NodeQuery(partition="shop", where=and_(or_(c, b), a, a)),
        NodeQuery(partition="shop", where=not_(not_(or_(b, c))) & field("status").eq("open")),
    ]
    subscriptions = [cache.get(query).subscribe() for query in written]
    assert len(opened) == 1
    cache.get(
        NodeQuery(partition="shop", where=and_(a, or_(b, field("total").gt(101))))
    ).subscribe()
    assert len(opened) == 2  # negative control: another filter, another upstream
    for subscription in subscriptions:
        subscription.dispose()
