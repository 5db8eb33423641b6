"""rxmesh's log records in the standard library's ``logging``, for an application that uses it.

rxmesh logs through loguru and is silent until enabled (``logger.enable("rxmesh")``), as a library
should be. An application on loguru adds its own sinks; one on ``logging`` (uvicorn, gunicorn,
Django) calls :func:`route_to_stdlib` once: rxmesh's records then reach
``logging.getLogger("rxmesh.<module>")`` (``rxmesh.nodetypes.census``,
``rxmesh.providers.postgres``, ...), with loguru's levels mapped onto logging's (``TRACE`` →
``DEBUG``, ``SUCCESS`` → ``INFO``) and the fields rxmesh bound (``logger.bind(store=...,
attempt=...)``) as attributes of the record, as ``extra=`` sets them (one named like a ``LogRecord``
attribute gets an ``rxmesh_`` prefix). Records of other loguru users in the process are not routed.
Enabling is process-wide: loguru's own default sink (stderr) writes rxmesh's records too, unless the
application removed it (``logger.remove()``).

Example:
    >>> import logging
    >>> from rxmesh.logs import route_to_stdlib
    >>> route = route_to_stdlib()
    >>> route.stop()
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from loguru import logger

if TYPE_CHECKING:
    from loguru import Message, Record

__all__ = ["route_to_stdlib"]

_LEVELS = {"TRACE": logging.DEBUG, "SUCCESS": logging.INFO}
_RESERVED = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def _ours(record: Record) -> bool:
    name = record["name"]
    return name is not None and (name == "rxmesh" or name.startswith("rxmesh."))


def _emit(message: Message) -> None:
    record = message.record
    name = record["name"] or "rxmesh"
    target = logging.getLogger(name)
    level = _LEVELS.get(record["level"].name, record["level"].no)
    if not target.isEnabledFor(level):
        return
    exception = record["exception"]
    exc_info = None
    if exception is not None and exception.type is not None and exception.value is not None:
        exc_info = (exception.type, exception.value, exception.traceback)
    # A bound field named like a LogRecord attribute would be refused by makeRecord.
    extra: dict[str, Any] = {
        (f"rxmesh_{key}" if key in _RESERVED else key): value
        for key, value in record["extra"].items()
    }
    std = target.makeRecord(
        name,
        level,
        record["file"].path,
        record["line"],
        record["message"],
        (),
        exc_info,
        func=record["function"],
        extra=extra,
    )
    std.created = record["time"].timestamp()
    target.handle(std)


class StdlibRoute:
    """The route :func:`route_to_stdlib` added; :meth:`stop` removes it."""

    __slots__ = ("_lock", "_sink")

    def __init__(self, sink: int) -> None:
        self._sink: int | None = sink
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        """Whether records are still routed."""
        return self._sink is not None

    def stop(self) -> None:
        """Stop routing and disable rxmesh's records again (the library's default). Idempotent."""
        with self._lock:
            sink, self._sink = self._sink, None
        if sink is not None:
            logger.remove(sink)
            logger.disable("rxmesh")


def route_to_stdlib(level: int | str = "TRACE") -> StdlibRoute:
    """Enable rxmesh's records and send them to ``logging`` (see the module).

    ``logging``'s own configuration (the loggers' levels, handlers, propagation) decides what is
    written; ``level`` is a floor below which records are not even built.

    Args:
        level: the lowest loguru level routed (a name such as ``"INFO"``, or a number; all by
            default).
    """
    sink = logger.add(_emit, level=level, filter=_ours, format="{message}", catch=True)
    logger.enable("rxmesh")
    return StdlibRoute(sink)
