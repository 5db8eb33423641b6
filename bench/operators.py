"""Happy-path cost of the two ladder operators, against the same pipeline without them.

Prints JSON lines: one per operator (items/s without and with it, the time ratio), plus a
``passthrough`` row: a do-nothing operator built with the same public reactivex API
(``Observable(subscribe)`` forwarding ``observer.on_next``), which pays the extra
``AutoDetachObserver`` that ``Observable.subscribe`` puts in front of every subscription; and a
``reactivex_retry`` row: reactivex's own ``retry`` (which never looks at an item). The targets
(issue 15): each ladder operator at most 1.10x the pass-through and at most 1.0x reactivex's
``retry`` (``meets_target``). Runs are interleaved (the order rotates each round) and the median
is taken.

    python bench/operators.py [N] [REPEATS]
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import reactivex
from reactivex import Observable, abc
from reactivex import operators as ops

from rxmesh.operators import reopen_on_transient_fault, retry_transient_connect

TARGET_RATIO = 1.10


def _passthrough(source: Observable[int]) -> Observable[int]:
    def subscribe(
        observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        return source.subscribe(
            observer.on_next, observer.on_error, observer.on_completed, scheduler=scheduler
        )

    return Observable(subscribe)


def _pipelines(n: int) -> dict[str, Callable[[], Observable[int]]]:
    source = reactivex.from_iterable(range(n))
    return {
        "baseline": lambda: source,
        "passthrough": lambda: source.pipe(_passthrough),
        "reactivex_retry": lambda: source.pipe(ops.retry(3)),
        "retry_transient_connect": lambda: source.pipe(retry_transient_connect()),
        "reopen_on_transient_fault": lambda: reopen_on_transient_fault(lambda: source),
    }


def _time_once(build: Callable[[], Observable[int]], n: int) -> float:
    count = 0

    def sink(_: int) -> None:
        nonlocal count
        count += 1

    gc.collect()
    started = time.perf_counter()
    build().subscribe(sink)
    elapsed = time.perf_counter() - started
    if count != n:
        raise RuntimeError(f"pipeline delivered {count} of {n} items")
    return elapsed


def measure(n: int = 1_000_000, repeats: int = 5) -> list[dict[str, Any]]:
    """Time each pipeline ``repeats`` times over ``n`` items; return one row per operator."""
    pipelines = _pipelines(n)
    names = list(pipelines)
    timings: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            timings[name].append(_time_once(pipelines[name], n))
    base = statistics.median(timings["baseline"])
    floor = statistics.median(timings["passthrough"])
    best_floor = min(timings["passthrough"])
    rx_retry = statistics.median(timings["reactivex_retry"])
    rows: list[dict[str, Any]] = []
    for name in names[1:]:
        median = statistics.median(timings[name])
        ratio = median / base
        rows.append(
            {
                "bench": "operators",
                "operator": name,
                "items": n,
                "repeats": repeats,
                "baseline_items_per_s": round(n / base),
                "operator_items_per_s": round(n / median),
                "ratio": round(ratio, 3),
                "added_ns_per_item": round((median - base) / n * 1e9, 1),
                "ratio_vs_passthrough": round(median / floor, 3),
                # Best round against best round: noise only adds time, so this is the steadier
                # estimate of what the operator itself costs on a shared machine.
                "best_ratio_vs_passthrough": round(min(timings[name]) / best_floor, 3),
                "ratio_vs_reactivex_retry": round(median / rx_retry, 3),
                "target_ratio": TARGET_RATIO,
                "meets_target": (
                    None  # the references themselves
                    if name in ("passthrough", "reactivex_retry")
                    else median / floor <= TARGET_RATIO and median <= rx_retry
                ),
            }
        )
    return rows


def main(argv: list[str]) -> None:
    """Print one JSON line per operator."""
    n = int(argv[1]) if len(argv) > 1 else 1_000_000
    repeats = int(argv[2]) if len(argv) > 2 else 5
    for row in measure(n, repeats):
        print(json.dumps(row))


if __name__ == "__main__":
    main(sys.argv)
