"""The embedded store's live queries: an Initial frame (or, resumed, a Delta of what changed
since a token), then a Delta per matching commit, each carrying its resume token.

A node belongs to the view while :meth:`rxmesh.model.NodeQuery.matches` holds (its content filter
included): an update that makes it match enters it, one that makes it stop matching removes it.

Commits arrive numbered (the last change number of each): a commit at or below the position the
stream started from is already in its first frame and skipped; the others are applied in number
order, so a commit delivered late (published from another thread, or while a subscriber's
callback wrote again) never overtakes a later one, and each Delta's token is exactly where the
view stands.

Private to :mod:`rxmesh.providers.memory` (kept apart so each module stays small): the store
hands its commit subject, a snapshot function, a resume function and a counter hook.
"""

from __future__ import annotations

from collections.abc import Callable

from reactivex import Observable, abc
from reactivex.disposable import Disposable
from reactivex.subject import Subject

from rxmesh.model import FrameKind, MeshNode, NodeChange, NodeQuery, QueryFrame

__all__ = ["Commit", "Resume", "Snapshot", "live_query"]

Commit = tuple[int, tuple[NodeChange, ...]]
"""A commit as the store publishes it: the number of its last change, then its changes."""
Snapshot = Callable[[NodeQuery], tuple[int, list[MeshNode]]]
"""``snapshot(query) -> (position, rows)``: every match, read at one position."""
Resume = Callable[
    [NodeQuery, str], tuple[int, list[MeshNode], list[str], list[MeshNode]] | None
]
"""``resume(query, token) -> (position, changed, removed, rows)`` (what changed since ``token``,
and every match, all read at one position), or ``None`` when the store cannot tell."""


def live_query(
    query: NodeQuery,
    *,
    commits: Subject[Commit],
    snapshot: Snapshot,
    resume: Resume,
    token: Callable[[int], str],
    opened: Callable[[int], None],
    provider: str,
    resume_from: str | None = None,
) -> Observable[QueryFrame]:
    """See :meth:`rxmesh.providers.InMemoryStore.query`."""

    def subscribe(
        observer: abc.ObserverBase[QueryFrame], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        view: dict[str, MeshNode] = {}
        waiting: dict[int, tuple[NodeChange, ...]] = {}  # first change number -> its commit
        position = -1  # until the first frame: every commit waits
        draining = False

        def apply(last: int, batch: tuple[NodeChange, ...]) -> None:
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
            upserts = tuple(view[path] for path in was_in_view if path in view)
            removed = tuple(path for path, was in was_in_view.items() if was and path not in view)
            if upserts or removed:
                observer.on_next(
                    QueryFrame(
                        kind=FrameKind.DELTA,
                        nodes=upserts,
                        removed=removed,
                        provider=provider,
                        resume_token=token(last),
                    )
                )

        def drain() -> None:
            # One drain at a time: a commit made by a subscriber's callback waits its turn.
            nonlocal draining, position
            if draining or position < 0:
                return
            draining = True
            try:
                while (batch := waiting.pop(position + 1, None)) is not None:
                    position += len(batch)
                    apply(position, batch)
            finally:
                draining = False

        def on_commit(commit: Commit) -> None:
            last, batch = commit
            if last <= position:
                return  # already in the first frame
            waiting[last - len(batch) + 1] = batch
            drain()

        # Listen first, then read: a commit during the first frame is applied after it.
        subscription = commits.subscribe(on_commit)
        try:
            first = _first_frame(query, snapshot, resume, token, provider, resume_from)
        except Exception as exc:  # noqa: BLE001 - forwarded to the observer unchanged
            subscription.dispose()
            observer.on_error(exc)
            return Disposable()
        at, frame, rows = first
        opened(1)
        view.update((node.path, node) for node in rows)
        for number in [n for n in waiting if n <= at]:
            del waiting[number]  # numbered at or below the first frame: already in it
        observer.on_next(frame)
        position = at
        drain()

        def dispose() -> None:
            subscription.dispose()
            opened(-1)

        return Disposable(dispose)

    return Observable(subscribe)


def _first_frame(
    query: NodeQuery,
    snapshot: Snapshot,
    resume: Resume,
    token: Callable[[int], str],
    provider: str,
    resume_from: str | None,
) -> tuple[int, QueryFrame, list[MeshNode]]:
    """``(position, first frame, the view's rows)``: a resumed Delta when ``resume_from`` can be
    resumed from, else an Initial (marked ``reset`` when a resume was asked for)."""
    if resume_from is not None:
        since = resume(query, resume_from)
        if since is not None:
            # The view after it is every match; the Delta itself is only what changed.
            at, changed, removed, rows = since
            frame = QueryFrame(
                kind=FrameKind.DELTA,
                nodes=tuple(changed),
                removed=tuple(removed),
                provider=provider,
                resume_token=token(at),
                resumed=True,
            )
            return at, frame, rows
    at, rows = snapshot(query)
    frame = QueryFrame.initial(rows, provider=provider).model_copy(
        update={"resume_token": token(at), "reset": resume_from is not None}
    )
    return at, frame, rows
