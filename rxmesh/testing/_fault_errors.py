"""The error chains :class:`~rxmesh.testing.FaultInjectingStore` raises, exactly as real
providers raise them, so :mod:`rxmesh.faults` classifies them as it would in production."""

from __future__ import annotations

from collections.abc import Callable

from rxmesh.exceptions import StoreError

__all__ = ["ExcFactory", "connect_timeout_error", "connection_reset_error", "unreachable_error"]

ExcFactory = Callable[[], Exception]
"""Makes the exception a knob raises; called once per subscription it affects."""


def _chained(outer: Exception, cause: BaseException) -> Exception:
    outer.__cause__ = cause  # exactly what ``raise outer from cause`` records
    return outer


def unreachable_error(store: str = "store") -> Exception:
    """A refused connect, as a provider's boundary reports it: ``StoreError(08001)`` from
    ``ConnectionRefusedError``. :func:`rxmesh.faults.is_store_unreachable` matches it.
    """
    return _chained(
        StoreError(
            f"store '{store}' unreachable: connection refused", sqlstate="08001", store=store
        ),
        # No address: the injected fault connected to nothing, and a printed one would send
        # whoever reads the drill's timeline looking for a server.
        ConnectionRefusedError(111, "Connect call refused (injected: no connection was made)"),
    )


def connect_timeout_error(store: str = "store") -> Exception:
    """A connect that timed out: ``StoreError("could not connect ...", 08001)`` from
    ``TimeoutError``."""
    return _chained(
        StoreError(
            f"store '{store}': could not connect to 10.42.18.4:5432", sqlstate="08001", store=store
        ),
        TimeoutError("timed out"),
    )


def connection_reset_error(store: str = "store") -> Exception:
    """A connection lost mid-stream, as drivers report it: a DB frame with no sqlstate from
    ``ConnectionResetError(104, "Connection reset by peer")``."""
    return _chained(
        StoreError(f"store '{store}': connection lost mid-stream", sqlstate=None, store=store),
        ConnectionResetError(104, "Connection reset by peer"),
    )
