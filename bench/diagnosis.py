"""What LoopStallMonitor costs: an idle loop with and without it, per tick, and per collection.

Prints JSON lines; each has a ``ratio`` against the raw baseline (1.0 = no cost).

    .venv/bin/python bench/diagnosis.py [--seconds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import time
from collections.abc import Callable

from rxmesh.diagnosis import LoopStallMonitor


def _emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


async def _idle(seconds: float, monitor: LoopStallMonitor | None) -> tuple[float, int]:
    """CPU seconds an idle loop spends in ``seconds`` of wall time, and the ticks it ran."""
    if monitor is not None:
        monitor.start()
    cpu = time.process_time()
    try:
        await asyncio.sleep(seconds)
    finally:
        spent = time.process_time() - cpu
        if monitor is not None:
            monitor.stop()
    return spent, monitor.statistics().ticks if monitor is not None else 0


def _empty_callback(phase: str, info: dict[str, object]) -> None:
    return None


def _timed(work: Callable[[], None], mode: str) -> float:
    """Wall seconds of ``work`` with no gc callback, an empty one, or a running monitor's."""
    loop = asyncio.new_event_loop()
    monitor = LoopStallMonitor()
    if mode == "monitor":
        monitor.start(loop=loop)
    elif mode == "empty":
        gc.callbacks.append(_empty_callback)
    try:
        start = time.perf_counter()
        work()
        return time.perf_counter() - start
    finally:
        if mode == "empty":
            gc.callbacks.remove(_empty_callback)
        monitor.stop()
        loop.close()


def _compare(name: str, work: Callable[[], None], repeat: int, **fields: object) -> None:
    """Interleaved runs, best of ``repeat`` for each mode."""
    best = {"none": math.inf, "empty": math.inf, "monitor": math.inf}
    collections = 0
    for _ in range(repeat):
        for mode in best:
            before = sum(s["collections"] for s in gc.get_stats())
            best[mode] = min(best[mode], _timed(work, mode))
            collections = sum(s["collections"] for s in gc.get_stats()) - before
    _emit(
        bench=name,
        **fields,
        collections=collections,
        seconds_without=best["none"],
        seconds_empty_callback=best["empty"],
        seconds_with_monitor=best["monitor"],
        added_seconds_per_collection=(best["monitor"] - best["none"]) / max(collections, 1),
        ratio=best["monitor"] / best["none"],
        ratio_vs_empty_callback=best["monitor"] / best["empty"],
    )


def _collect_gen0(count: int) -> Callable[[], None]:
    def work() -> None:
        for _ in range(count):
            gc.collect(0)

    return work


def _allocate(rounds: int) -> Callable[[], None]:
    def work() -> None:
        for _ in range(rounds):
            _ = [[i] for i in range(1000)]

    return work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="wall time per idle run")
    args = parser.parse_args()
    seconds: float = args.seconds

    base_cpu, _ = asyncio.run(_idle(seconds, None))
    with_cpu, ticks = asyncio.run(_idle(seconds, LoopStallMonitor()))
    _emit(
        bench="idle_loop_default_tick",
        seconds=seconds,
        cpu_without=base_cpu,
        cpu_with=with_cpu,
        ticks=ticks,
        added_cpu_share_of_one_core=(with_cpu - base_cpu) / seconds,
        ratio=with_cpu / base_cpu if base_cpu else None,
    )

    fast_tick = 0.001
    fast_cpu, fast_ticks = asyncio.run(_idle(seconds, LoopStallMonitor(tick=fast_tick)))
    per_tick = max(fast_cpu - base_cpu, 0.0) / max(fast_ticks, 1)
    _emit(
        bench="cost_per_tick",
        tick=fast_tick,
        ticks=fast_ticks,
        cpu_seconds_per_tick=per_tick,
        overhead_at_default_tick=per_tick / 1.0,
        ratio=per_tick / 1.0,
    )

    # gc.callbacks: CPython's own callback machinery is the floor; the monitor adds ~nothing to it
    _compare("gc_collect_gen0", _collect_gen0(20_000), repeat=5, collections_asked=20_000)
    _compare("allocation_workload", _allocate(2_000), repeat=5, rounds=2_000)


if __name__ == "__main__":
    main()
