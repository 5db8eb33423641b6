"""The embedded store's live queries: an Initial frame, then a Delta per matching commit.

A node belongs to the view while :meth:`rxmesh.model.NodeQuery.matches` holds (its content filter
included): an update that makes it match enters it, one that makes it stop matching removes it.

Private to :mod:`rxmesh.providers.memory` (kept apart so each module stays small): the store
hands its commit subject, a snapshot function and a counter hook.
"""

from __future__ import annotations

from collections.abc import Callable

from reactivex import Observable, abc
from reactivex.disposable import Disposable
from reactivex.subject import Subject

from rxmesh.model import MeshNode, NodeChange, NodeQuery, QueryFrame

__all__ = ["live_query"]


def live_query(
    query: NodeQuery,
    *,
    commits: Subject[tuple[NodeChange, ...]],
    snapshot: Callable[[NodeQuery], list[MeshNode]],
    opened: Callable[[int], None],
    provider: str,
    reset: bool = False,
) -> Observable[QueryFrame]:
    """See :meth:`rxmesh.providers.InMemoryStore.query`."""

    def subscribe(
        observer: abc.ObserverBase[QueryFrame], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        view: dict[str, MeshNode] = {}
        backlog: list[tuple[NodeChange, ...]] | None = []

        def apply(batch: tuple[NodeChange, ...]) -> None:
            # The Delta says what the batch did to the view as a whole: a node that entered and
            # left within one batch was never seen, so it is not removed.
            was_in_view: dict[str, bool] = {}
            for change in batch:
                was_in_view.setdefault(change.path, change.path in view)
                node = change.node
                if change.op == "upsert" and node is not None and query.matches(node):
                    view[change.path] = node
                else:
                    view.pop(change.path, None)
            upserts = [view[path] for path in was_in_view if path in view]
            removed = [path for path, was in was_in_view.items() if was and path not in view]
            if upserts or removed:
                observer.on_next(QueryFrame.delta(upserts, removed, provider=provider))

        def on_commit(batch: tuple[NodeChange, ...]) -> None:
            if backlog is not None:
                backlog.append(batch)
            else:
                apply(batch)

        # Listen first, then snapshot: a commit during the Initial is applied after it.
        subscription = commits.subscribe(on_commit)
        try:
            rows = snapshot(query)
        except Exception as exc:  # noqa: BLE001 - forwarded to the observer unchanged
            subscription.dispose()
            observer.on_error(exc)
            return Disposable()
        opened(1)
        view.update((node.path, node) for node in rows)
        initial = QueryFrame.initial(rows, provider=provider)
        observer.on_next(initial.model_copy(update={"reset": True}) if reset else initial)
        pending: list[tuple[NodeChange, ...]] = backlog or []
        backlog = None
        for batch in pending:
            apply(batch)

        def dispose() -> None:
            subscription.dispose()
            opened(-1)

        return Disposable(dispose)

    return Observable(subscribe)
