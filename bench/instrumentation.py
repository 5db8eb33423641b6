"""What the instrumentation seam costs: nothing installed against a counting instrument installed,
on the operators' happy path and on the create path (JSON lines on stdout).

Usage::

    python bench/instrumentation.py [--items 200000] [--creates 2000] [--repeat 5]

Lines printed (A and B interleaved in one process, the order rotating each round; medians):

- ``guard``: nanoseconds of one emit point's check (``if _seam.enabled:``) with nothing
  installed, against an empty loop body: the whole cost of an emit point that does not fire.
- ``noop_scope``: nanoseconds of an operation scope and its answer with nothing installed (the
  shared no-op object): what the mesh's wiring adds to each answer.
- ``operators``: items/s through ``retry_transient_connect`` and ``reopen_on_transient_fault``
  with nothing installed (``off``) and with a counting instrument (``on``); the ratio on/off.
  The happy path has no emit point per item, so both must be ~1.0.
- ``create``: microseconds per ``Mesh.create`` on the embedded store, ``off`` and ``on``, and
  ``scoped``: each create also wrapped in ``instrumentation.operation(...)`` and answered, as the
  mesh's wiring will do (the shared no-op scope when off); the ratios against ``off``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import reactivex

from rxmesh import AccessContext, Mesh, MeshNode, instrumentation
from rxmesh.instrumentation import _seam
from rxmesh.ledger import PendingWriteLedger
from rxmesh.operators import reopen_on_transient_fault, retry_transient_connect
from rxmesh.providers.memory import InMemoryStore

ALICE = AccessContext(user="bench")


class Counting:
    """The cheapest real instrument: counts what it is handed."""

    def __init__(self) -> None:
        self.events = 0

    def on_event(self, event: instrumentation.Event) -> None:
        self.events += 1


@contextmanager
def mode(name: str) -> Iterator[None]:
    """``off``: nothing installed; ``on``/``scoped``: a counting instrument installed."""
    if name == "off":
        yield
        return
    with instrumentation.install(Counting()):
        yield


def _median_ratio(on: list[float], off: list[float]) -> float:
    return round(statistics.median(on) / statistics.median(off), 3)


def guard(loops: int, repeat: int) -> dict[str, Any]:
    """ns per ``if _seam.enabled:`` check, against an empty loop."""

    def empty() -> float:
        started = time.perf_counter()
        for _ in range(loops):
            pass
        return time.perf_counter() - started

    def checked() -> float:
        started = time.perf_counter()
        for _ in range(loops):
            if _seam.enabled:
                raise AssertionError("nothing is installed")
        return time.perf_counter() - started

    base, check = [], []
    for round_ in range(repeat):
        pair = [(base, empty), (check, checked)]
        for sink, work in pair if round_ % 2 else reversed(pair):
            sink.append(work())
    added = (statistics.median(check) - statistics.median(base)) / loops * 1e9
    return {"bench": "instrumentation", "measure": "guard", "ns_per_check": round(added, 2)}


def noop_scope(loops: int, repeat: int) -> dict[str, Any]:
    """ns per ``with instrumentation.operation(...) as op: op.answered(None)`` with nothing
    installed (what the mesh's wiring adds to every answer), against an empty call."""

    def scoped() -> float:
        started = time.perf_counter()
        for _ in range(loops):
            with instrumentation.operation("create", request_id="r") as op:
                op.answered(None)
        return time.perf_counter() - started

    def bare() -> float:
        started = time.perf_counter()
        for _ in range(loops):
            pass
        return time.perf_counter() - started

    base, scope = [], []
    for round_ in range(repeat):
        pair = [(base, bare), (scope, scoped)]
        for sink, work in pair if round_ % 2 else reversed(pair):
            sink.append(work())
    added = (statistics.median(scope) - statistics.median(base)) / loops * 1e9
    return {"bench": "instrumentation", "measure": "noop_scope", "ns_per_scope": round(added, 1)}


def operators(items: int, repeat: int) -> list[dict[str, Any]]:
    source = reactivex.from_iterable(range(items))
    pipelines: dict[str, Callable[[], reactivex.Observable[int]]] = {
        "retry_transient_connect": lambda: source.pipe(retry_transient_connect()),
        "reopen_on_transient_fault": lambda: reopen_on_transient_fault(lambda: source),
    }
    rows = []
    for name, build in pipelines.items():
        timings: dict[str, list[float]] = {"off": [], "on": []}
        for round_ in range(repeat):
            for m in ("off", "on") if round_ % 2 else ("on", "off"):
                count = 0

                def sink(_: int) -> None:
                    nonlocal count
                    count += 1

                gc.collect()
                with mode(m):
                    started = time.perf_counter()
                    build().subscribe(sink)
                    timings[m].append(time.perf_counter() - started)
                if count != items:
                    raise RuntimeError(f"{name} delivered {count} of {items}")
        rows.append(
            {
                "bench": "instrumentation",
                "measure": "operators",
                "operator": name,
                "items": items,
                "repeat": repeat,
                "items_per_s_off": round(items / statistics.median(timings["off"])),
                "items_per_s_on": round(items / statistics.median(timings["on"])),
                "ratio_on_off": _median_ratio(timings["on"], timings["off"]),
            }
        )
    return rows


async def _rate(work: Callable[[int], Awaitable[None]], n: int) -> float:
    started = time.perf_counter()
    for i in range(n):
        await work(i)
    return (time.perf_counter() - started) / n * 1e6


async def create(creates: int, repeat: int) -> dict[str, Any]:
    """µs per ``Mesh.create`` on the embedded store: off, on, and scoped as the wiring will be.

    Every timing gets a fresh mesh and store (an embedded store that grows across the rounds
    would make whichever mode runs later look slower)."""
    per: dict[str, list[float]] = {"off": [], "on": [], "scoped_off": [], "scoped_on": []}
    for round_ in range(repeat):
        names = list(per)
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            mesh = Mesh(InMemoryStore(), ledger=PendingWriteLedger(""))
            await mesh.create(MeshNode(path="m/warm", content={}), access=ALICE)
            scoped = name.startswith("scoped")

            async def work(i: int, mesh: Mesh = mesh, s: bool = scoped) -> None:
                node = MeshNode(path=f"m/n{i:06d}", node_type="B", content={"i": i})
                if s:
                    with instrumentation.operation("create", request_id=str(i)) as op:
                        await mesh.create(node, access=ALICE)
                        op.answered(None)
                else:
                    await mesh.create(node, access=ALICE)

            with mode("off" if name.endswith("off") else "on"):
                gc.collect()
                per[name].append(await _rate(work, creates))
            mesh.dispose()
    return {
        "bench": "instrumentation",
        "measure": "create",
        "creates": creates,
        "repeat": repeat,
        "us_per_create": {k: round(statistics.median(v), 2) for k, v in per.items()},
        "ratio_on_off": _median_ratio(per["on"], per["off"]),
        "ratio_scoped_off_vs_off": _median_ratio(per["scoped_off"], per["off"]),
        "ratio_scoped_on_vs_off": _median_ratio(per["scoped_on"], per["off"]),
    }


def measure(items: int, creates: int, repeat: int) -> list[dict[str, Any]]:
    """Every row of the bench."""
    if _seam.enabled:
        raise RuntimeError("an instrument is installed already; the 'off' rows would lie")
    rows = [guard(items, repeat), noop_scope(items, repeat), *operators(items, repeat)]
    rows.append(asyncio.run(create(creates, repeat)))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--creates", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    for row in measure(args.items, args.creates, args.repeat):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
