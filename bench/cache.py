"""Fan-out cost of the synced-query cache, against a bare reactivex ``Subject``.

One query, N subscribers (10,000 by default) through ``SyncedQueryCache.get``: asserts that ONE
upstream was opened, then times the delivery of one delta to all N, against a bare ``Subject``
with N observers in the same run. Rounds are interleaved and the median of each side is taken.
Prints one JSON line: the upstream count, both medians, the ratio, the target 1.5.

    python bench/cache.py [SUBSCRIBERS] [REPEATS]
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from typing import Any

from reactivex import Observable, abc
from reactivex.subject import Subject
from reactivex.testing import TestScheduler

from rxmesh.cache import SyncedQueryCache
from rxmesh.model import MeshNode, NodeQuery, QueryFrame

TARGET_RATIO = 1.5


class _Counter:
    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, _: Any) -> None:
        self.count += 1


def _time_delivery(subject: Subject[QueryFrame], frame: QueryFrame, counter: _Counter) -> float:
    before = counter.count
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        subject.on_next(frame)
        elapsed = time.perf_counter() - started
    finally:
        gc.enable()
    if counter.count - before == 0:
        raise AssertionError("the delta reached nobody")
    return elapsed


def measure(subscribers: int = 10_000, repeats: int = 15) -> dict[str, Any]:
    """Build both fan-outs, time one delta ``repeats`` times each, and return the figures."""
    query = NodeQuery(node_type="NodeType")
    opened = 0
    upstream: Subject[QueryFrame] = Subject()

    def open_query(_: NodeQuery) -> Observable[QueryFrame]:
        def subscribe(
            observer: abc.ObserverBase[QueryFrame], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            nonlocal opened
            opened += 1
            return upstream.subscribe(observer, scheduler=scheduler)

        return Observable(subscribe)

    cache = SyncedQueryCache(open_query, scheduler=TestScheduler())
    via_cache = _Counter()
    for _ in range(subscribers):
        cache.get(query).subscribe(via_cache)
    if opened != 1:
        raise AssertionError(f"{subscribers} subscribers opened {opened} upstreams, not 1")
    if cache.statistics().subscribers != subscribers:
        raise AssertionError("the cache lost subscribers")

    bare: Subject[QueryFrame] = Subject()
    via_subject = _Counter()
    for _ in range(subscribers):
        bare.subscribe(via_subject)

    delta = QueryFrame.delta([MeshNode(path="bench/a", node_type="NodeType", version=2)])
    upstream.on_next(QueryFrame.initial([]))  # warm both paths once
    bare.on_next(QueryFrame.initial([]))
    cache_times: list[float] = []
    subject_times: list[float] = []
    for round_ in range(repeats):
        sides = [(upstream, via_cache, cache_times), (bare, via_subject, subject_times)]
        if round_ % 2:
            sides.reverse()
        for subject, counter, times in sides:
            times.append(_time_delivery(subject, delta, counter))
    if via_cache.count != via_subject.count:
        raise AssertionError("the two fan-outs delivered different counts")

    cache_median = statistics.median(cache_times)
    subject_median = statistics.median(subject_times)
    return {
        "bench": "cache",
        "subscribers": subscribers,
        "upstream_subscriptions": opened,
        "repeats": repeats,
        "cache_delta_ms": round(cache_median * 1000, 3),
        "subject_delta_ms": round(subject_median * 1000, 3),
        "ratio": round(cache_median / subject_median, 3),
        "target_ratio": TARGET_RATIO,
    }


def main(argv: list[str] | None = None) -> None:
    """``python bench/cache.py [SUBSCRIBERS] [REPEATS]``: print one JSON line."""
    args = sys.argv if argv is None else argv
    subscribers = int(args[1]) if len(args) > 1 else 10_000
    repeats = int(args[2]) if len(args) > 2 else 15
    print(json.dumps(measure(subscribers, repeats)))


if __name__ == "__main__":
    main()
