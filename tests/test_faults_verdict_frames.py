"""An rxmesh verdict is never a network frame, whatever its builtin co-base (issue 15, item 5).

``NodeAccessDeniedError`` is also a ``PermissionError`` (so ``except PermissionError`` catches a
missing grant), and ``PermissionError`` is an ``OSError``: the chain walk used to take it for a
socket error below a DB frame and call a refused permission "the store could not be reached".
"""

from __future__ import annotations

import pytest

from rxmesh.exceptions import NodeAccessDeniedError, StoreError
from rxmesh.faults import is_standing_watch_transient, is_store_unreachable


def raised_from(cause: BaseException) -> StoreError:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise StoreError("the store refused", sqlstate=None) from inner
    except StoreError as outer:
        return outer


def test_a_db_frame_around_an_access_refusal_is_not_unreachable() -> None:
    """FAILS against the old walk: NodeAccessDeniedError counted as a network frame."""
    error = raised_from(NodeAccessDeniedError("'carol' holds no grant", path="p/x"))
    assert not is_store_unreachable(error)
    assert not is_standing_watch_transient(error)


@pytest.mark.parametrize(
    "cause",
    [PermissionError(13, "Permission denied"), ConnectionResetError(104, "reset"), TimeoutError()],
    ids=["PermissionError", "ConnectionResetError", "TimeoutError"],
)
def test_negative_control_a_db_frame_around_a_real_os_error_is_unreachable(
    cause: OSError,
) -> None:
    assert is_store_unreachable(raised_from(cause))


def test_the_verdict_is_still_a_permission_error_for_callers() -> None:
    assert issubclass(NodeAccessDeniedError, PermissionError)
