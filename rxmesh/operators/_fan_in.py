"""``fan_in``: one live query answered by several providers behind a bounded Initial gate.

Each provider stream is "one Initial frame, then deltas". The fan-in retries each provider's
connect on the ladder (:func:`~rxmesh.operators.retry_transient_connect`), emits one merged Initial
once every provider has answered, then forwards the deltas. The gate is a bound, not a wait: a
one-shot timer armed at subscribe fails the merge with :class:`QueryProviderStalledError` naming the
providers that had not answered; it is disposed as soon as all have, so a healthy query holds
nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from loguru import logger
from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable, Disposable, SerialDisposable

from rxmesh._util.arguments import positive_seconds
from rxmesh._util.path_order import PathOrdered, is_path_ordered
from rxmesh._util.scheduling import resolve_scheduler
from rxmesh.exceptions import QueryProviderStalledError
from rxmesh.model import FrameKind, MeshNode, QueryFrame
from rxmesh.operators._retry_transient_connect import retry_transient_connect

__all__ = ["DEFAULT_INITIAL_BUDGET", "fan_in"]

DEFAULT_INITIAL_BUDGET = 15.0
"""Seconds every provider has to deliver its Initial frame before the merge fails as stalled."""


def _fold(snapshot: dict[str, MeshNode], frame: QueryFrame) -> None:
    """Apply a delta to one provider's snapshot (removals first, then upserts)."""
    for path in frame.removed:
        snapshot.pop(path, None)
    for node in frame.nodes:
        snapshot[node.path] = node


def fan_in(
    providers: Mapping[str, Observable[QueryFrame]],
    *,
    initial_budget: float = DEFAULT_INITIAL_BUDGET,
    query: object = None,
    scheduler: abc.SchedulerBase | None = None,
) -> Observable[QueryFrame]:
    """Merge the live streams of several providers behind one bounded Initial gate.

    - Each provider stream is wrapped in :func:`retry_transient_connect` (same ``scheduler``):
      a transient connect fault before its first frame is retried; after it, it terminates.
    - One merged Initial is emitted when every provider has delivered its Initial: nodes
      de-duplicated by path (the higher ``version`` wins; on a tie, the provider listed first)
      and ordered by path. Deltas a provider sends before the gate opens are folded into its
      snapshot, so nothing is lost and nothing is emitted twice.
    - A provider that completes without an Initial counts as an empty Initial; that is a contract
      violation (logged at WARNING) and the provider is named in ``silent_providers``, as is one
      whose Initial says ``snapshot_incomplete``; the merged frame then says
      ``snapshot_incomplete`` too. A Delta before a provider's Initial is treated the same way
      (logged, folded, named).
    - If ``initial_budget`` seconds pass before every provider answered, the merge fails once
      with ``QueryProviderStalledError(<those providers>, initial_budget, query)`` (logged at
      ERROR). That error is not a ``TimeoutError`` and the ladder never retries it.
    - The first provider error terminates the merge with that very error. Termination happens
      exactly once; it disposes every provider subscription and the gate timer.
    - Completes when every provider has completed. No providers at all: an empty Initial, then
      completion (nobody was asked, nobody stayed silent).

    Deltas are forwarded unchanged except that a frame without ``provider`` gets the provider's
    name stamped on it.

    Resume tokens (docs/live-queries.md, "Resume tokens"): with ONE provider the merged Initial
    keeps that provider's ``resume_token`` and ``reset``, deltas keep theirs, and a resumed
    Delta as the provider's first frame opens the gate and is forwarded as is. With several
    providers no single position describes the merge, so every frame's ``resume_token`` is
    ``None`` (a resume needs one store's position).

    Args:
        providers: provider name -> cold stream of frames. Names appear in errors and frames.
        initial_budget: seconds allowed for every Initial (a finite number > 0).
        query: a printable description of the query, carried by the stall error and the logs.
        scheduler: where the gate timer and the retry backoffs run; else the subscription's
            scheduler, else the running asyncio loop.

    Raises:
        TypeError: ``initial_budget`` is not a number, or a provider name is not a string.
        ValueError: ``initial_budget`` is not a finite number > 0.
    """
    budget = positive_seconds("initial_budget", initial_budget)
    names = tuple(providers)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"provider names must be strings, got {name!r}")
    sources = dict(providers)

    def subscribe(
        observer: abc.ObserverBase[QueryFrame], subscribe_scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        # Per-subscription state: the accounting of one merge.
        lock = threading.RLock()
        snapshots: dict[str, dict[str, MeshNode]] = {}
        # A lone provider's Initial, kept as it came until a Delta has to be folded into it:
        # an ordered one is forwarded without building and re-sorting a merge of it.
        as_sent: dict[str, tuple[MeshNode, ...]] = {}
        silent: set[str] = set()
        lone_name = names[0] if len(names) == 1 else None
        position: dict[str, tuple[str | None, bool]] = {}  # the lone Initial's token and reset
        completed: set[str] = set()
        gate_open = False
        done = False
        timer = SerialDisposable()
        upstreams = CompositeDisposable()
        log = logger.bind(query=repr(query), providers=list(names), budget=budget)

        def finish() -> None:
            nonlocal done
            done = True
            timer.dispose()
            upstreams.dispose()

        def fail(error: Exception) -> None:
            if done:
                return
            finish()
            observer.on_error(error)

        def open_gate_if_ready() -> None:
            nonlocal gate_open
            if gate_open or done or len(snapshots) < len(names):
                return
            gate_open = True
            timer.dispose()  # a healthy query holds nothing
            lone = as_sent.get(names[0]) if len(names) == 1 else None
            ordered: tuple[MeshNode, ...]
            if lone is not None and is_path_ordered(lone):  # known at once for a store's Initial
                ordered = lone
            else:
                merged: dict[str, MeshNode] = {}
                for name in names:
                    for path, node in snapshot_of(name).items():
                        held = merged.get(path)
                        if held is None or node.version > held.version:
                            merged[path] = node
                ordered = PathOrdered.of_sorted(merged[path] for path in sorted(merged))
            named = tuple(name for name in names if name in silent)
            snapshots.clear()
            as_sent.clear()
            token, reset = position.get(names[0], (None, False)) if lone_name else (None, False)
            # Built without re-validating the nodes: each is a MeshNode already.
            observer.on_next(
                QueryFrame.model_construct(
                    kind=FrameKind.INITIAL,
                    nodes=ordered,
                    silent_providers=named,
                    snapshot_incomplete=bool(named),
                    resume_token=token,
                    reset=reset,
                )
            )
            complete_if_done()

        def snapshot_of(name: str) -> dict[str, MeshNode]:
            """``name``'s snapshot as a dict by path (built now if kept as sent)."""
            sent = as_sent.pop(name, None)
            if sent is not None:
                snapshots[name] = {node.path: node for node in sent}
            return snapshots[name]

        def initial_of(name: str, frame: QueryFrame) -> None:
            if len(names) == 1:
                as_sent[name] = frame.nodes
                snapshots[name] = {}  # counted as answered; filled by snapshot_of if needed
            else:
                snapshots[name] = {node.path: node for node in frame.nodes}

        def complete_if_done() -> None:
            if gate_open and not done and len(completed) == len(names):
                finish()
                observer.on_completed()

        def stalled(_: abc.SchedulerBase, __: Any = None) -> None:
            with lock:
                if done or gate_open:
                    return
                waiting = [name for name in names if name not in snapshots]
                log.bind(stalled=waiting).error(
                    "query {!r}: provider(s) {} gave no Initial within {}s; the query fails as "
                    "stalled",
                    query,
                    ", ".join(waiting),
                    budget,
                )
                fail(QueryProviderStalledError(waiting, budget, query))

        def violation(name: str, what: str) -> None:
            log.bind(provider=name).warning(
                "provider {!r} {} for query {!r}: contract violation; counted as a silent provider",
                name,
                what,
                query,
            )
            silent.add(name)

        def forward(name: str, frame: QueryFrame) -> None:
            update: dict[str, object] = {}
            if frame.provider is None:
                update["provider"] = name
            if lone_name is None and frame.resume_token is not None:
                update["resume_token"] = None  # one store's position is not the merge's
            observer.on_next(frame.model_copy(update=update) if update else frame)

        def resumed_first(name: str, frame: QueryFrame) -> None:
            """The lone provider resumed: its Delta is the answer, the gate opens on it."""
            nonlocal gate_open
            gate_open = True
            timer.dispose()
            snapshots.clear()
            as_sent.clear()
            forward(name, frame)
            complete_if_done()

        def observe(name: str) -> abc.DisposableBase:
            def on_next(frame: QueryFrame) -> None:
                with lock:
                    if done:
                        return
                    if gate_open:
                        forward(name, frame)
                        return
                    snapshot = snapshots.get(name)
                    if frame.kind is FrameKind.INITIAL:
                        position[name] = (frame.resume_token, frame.reset)
                    elif name == lone_name and frame.resumed and snapshot is None:
                        resumed_first(name, frame)
                        return
                    if snapshot is None:
                        if frame.kind is not FrameKind.INITIAL:
                            violation(name, "sent a Delta before its Initial")
                        elif frame.snapshot_incomplete:
                            log.bind(provider=name).warning(
                                "provider {!r} says its Initial for query {!r} is incomplete",
                                name,
                                query,
                            )
                            silent.add(name)
                        if frame.kind is FrameKind.INITIAL:
                            initial_of(name, frame)
                        else:
                            snapshots[name] = {}
                            _fold(snapshots[name], frame)
                        open_gate_if_ready()
                    elif frame.kind is FrameKind.INITIAL:
                        # A repeated Initial before the gate opened replaces the snapshot.
                        as_sent.pop(name, None)
                        initial_of(name, frame)
                        if frame.snapshot_incomplete:
                            silent.add(name)
                    else:
                        _fold(snapshot_of(name), frame)
                        # The lone Initial's position now includes this Delta.
                        held = position.get(name, (None, False))
                        position[name] = (frame.resume_token, held[1])

            def on_error(error: Exception) -> None:
                with lock:
                    if not done:
                        log.bind(provider=name, error_type=type(error).__name__).debug(
                            "provider {!r} failed; the merge terminates with its error", name
                        )
                    fail(error)

            def on_completed() -> None:
                with lock:
                    if done:
                        return
                    completed.add(name)
                    if not gate_open and name not in snapshots:
                        violation(name, "completed without an Initial")
                        snapshots[name] = {}
                        open_gate_if_ready()
                    complete_if_done()

            source = sources[name].pipe(retry_transient_connect(scheduler=scheduler))
            return source.subscribe(on_next, on_error, on_completed, scheduler=subscribe_scheduler)

        subscription = CompositeDisposable(Disposable(finish), timer, upstreams)
        with lock:
            if not names:
                gate_open = True
                observer.on_next(QueryFrame(kind=FrameKind.INITIAL))
                finish()
                observer.on_completed()
                return subscription
            when = resolve_scheduler(scheduler, subscribe_scheduler)
            timer.disposable = when.schedule_relative(budget, stalled)
            for name in names:
                if done:
                    break
                upstreams.add(observe(name))
        return subscription

    return Observable(subscribe)
