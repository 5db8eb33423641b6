"""Evidence that the store answers, for ``answers_again``: published only while the write path
answers, held back (and said once, later) while the pool does not.

A re-issue of a pending write spent on a route known to be down is a write lost, so evidence the
listener hears on its own route (another process's commit) waits for a probe sent through the
pool to arrive.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from loguru import logger
from reactivex import Observable, abc

from rxmesh.model import ChangeFeedGap, StoreEvidence
from rxmesh.providers.postgres._attempts import SharedAttempts
from rxmesh.providers.postgres._book import FeedBook
from rxmesh.providers.postgres._streams import Hot

__all__ = ["Evidence"]


def _now() -> datetime:
    return datetime.now(UTC)


class Evidence:
    """The ``answers_again`` stream of one store's change feed and what it holds back.

    ``listening``: whether the feed is open, listening and not lost (the verified start is
    offered to a new subscriber only then).
    """

    def __init__(
        self,
        name: str,
        attempts: SharedAttempts,
        book: FeedBook,
        listening: Callable[[], bool],
    ) -> None:
        self._name = name
        self._attempts = attempts
        self._listening = listening
        self.stream = Hot(book, "answers_again")
        self.pool_down: tuple[datetime, str] | None = None
        """Since when, and why, a probe could not be sent through the pool (until one arrives)."""
        self.held: tuple[datetime, str] | None = None
        """Evidence held back while the pool did not answer: since when, and why."""
        self.start: ChangeFeedGap | None = None
        """The verified start, offered to every subscriber of ``answers_again`` while the store
        still answers."""

    def reset(self) -> None:
        self.start = self.pool_down = self.held = None

    @property
    def answers_again(self) -> Observable[StoreEvidence]:
        """The stream of evidence; a new subscriber gets the verified start at once while
        the feed is listening and the pool answers."""

        def subscribe(
            observer: abc.ObserverBase[StoreEvidence],
            scheduler: abc.SchedulerBase | None = None,
        ) -> abc.DisposableBase:
            subscription = self.stream.subject.subscribe(observer, scheduler=scheduler)
            standing = self.start
            if standing is not None and self._listening() and not self.is_held():
                observer.on_next(standing)
            return subscription

        return Observable(subscribe)

    def is_held(self) -> bool:
        """Whether the pool is known not to answer (evidence then waits for it)."""
        return self.pool_down is not None or self._attempts.down

    def pool_unsendable(self, problem: str) -> None:
        """A probe could not be sent through the pool: it is known down from now."""
        if self.pool_down is None:
            self.pool_down = (_now(), f"a probe could not be sent through it: {problem}")

    def offer(self, evidence: StoreEvidence) -> None:
        """Publish ``evidence`` on ``answers_again``, or hold it while the pool does not answer."""
        if not self.is_held():
            self.stream.publish(evidence)
            return
        if self.held is None:
            why = (
                self.pool_down[1]
                if self.pool_down is not None
                else "operations found the store unreachable through the pool"
            )
            self.held = (_now(), why)
            logger.bind(store=self._name, evidence=type(evidence).__name__).info(
                "store '{}': evidence that it answers ({}) held back: {}; it counts once a "
                "probe sent through the pool arrives",
                self._name,
                type(evidence).__name__,
                why,
            )

    def pool_answered(self, *, closing: bool) -> None:
        """A probe sent through the pool arrived: the write path answers. If it was known down,
        or evidence was held back meanwhile, say so once on ``answers_again``."""
        self._attempts.reached()
        down, self.pool_down = self.pool_down, None
        held, self.held = self.held, None
        since = min((mark for mark in (down, held) if mark is not None), default=None)
        if since is None or closing:
            return
        lost_at, why = since
        evidence = ChangeFeedGap(
            source=self._name,
            lost_at=lost_at,
            resumed_at=_now(),
            reason=f"the pool answers again ({why})",
        )
        logger.bind(store=self._name).info(
            "store '{}': a probe sent through the pool arrived again after {:.3f}s ({}); that "
            "is evidence it answers",
            self._name,
            (evidence.resumed_at - lost_at).total_seconds(),
            why,
        )
        self.stream.publish(evidence)
