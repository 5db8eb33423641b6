"""Helpers shared by the operator tests."""

from __future__ import annotations

from typing import Any

from reactivex.testing.recorded import Recorded

from rxmesh.exceptions import StoreError


def connect_fault() -> StoreError:
    """The incident's chain: a DB frame with no sqlstate raised from ConnectionResetError(104)."""
    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except OSError as exc:
            raise StoreError("lost connection to postgres@db:5432", sqlstate=None) from exc
    except StoreError as err:
        return err


def timeline(messages: list[Recorded[Any]]) -> list[tuple[Any, ...]]:
    """(time, kind, value-or-exception); exceptions compare by identity."""
    out: list[tuple[Any, ...]] = []
    for message in messages:
        note: Any = message.value
        if note.kind == "N":
            out.append((message.time, "N", note.value))
        elif note.kind == "E":
            out.append((message.time, "E", note.exception))
        else:
            out.append((message.time, "C"))
    return out
