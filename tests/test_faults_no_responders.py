"""``is_coordination_unreachable``: "no answer in time" or nobody answering (NO_RESPONDERS).

Issue 13, scenario 6: over NATS a coordinator that is down (or a live hub that has not yet
re-subscribed after the server restarted) gets "no responders", which is an availability failure,
not a NOT_FOUND verdict. The new classifier matches it by ``error_type`` alone;
``is_no_answer_in_time`` stays exactly as it was (nothing timed out). Both sides of the rule are
tested: what it must match and what it must refuse.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from rxmesh import faults
from rxmesh.exceptions import (
    DeliveryErrorType,
    DeliveryFailure,
    StoreError,
)
from rxmesh.faults import (
    is_coordination_unreachable,
    is_no_answer_in_time,
    is_standing_watch_transient,
    is_transient_connect_fault,
)

NO_RESPONDERS_TEXT = (
    "Delivery to 'admin/build' failed: no responders on NATS subject 'rxmesh.hub.admin.build'"
)
ROUTER_TEXT = (
    "Delivery to 'admin/build' failed: Response did not arrive on time in 30s for message "
    "rxmesh.build.BuildClaimRequest (5b1f0c3e9d2a4f7c8e6b1a2d3c4e5f60)"
)
PLACEMENT_TEXT = (
    "Delivery to 'views/x' failed: Placement operation timed out: the hub was not activated "
    "within 30s"
)


def nobody() -> DeliveryFailure:
    """What the NATS transport raises for NATS's "no responders"."""
    return DeliveryFailure(DeliveryErrorType.NO_RESPONDERS, NO_RESPONDERS_TEXT)


def caused(outer: BaseException, inner: BaseException) -> BaseException:
    """``outer`` raised ``from inner`` (``inner`` is its ``__cause__``)."""
    outer.__cause__ = inner
    return outer


def during(outer: BaseException, inner: BaseException) -> BaseException:
    """``outer`` raised while handling ``inner`` (``inner`` is its ``__context__``)."""
    outer.__context__ = inner
    return outer


def caused_from_none(outer: BaseException, inner: BaseException) -> BaseException:
    """``raise outer from None`` while handling ``inner``: the context is suppressed."""
    outer.__context__ = inner
    outer.__suppress_context__ = True
    return outer


MATCH: list[tuple[str, Callable[[], BaseException | None]]] = [
    ("NO_RESPONDERS-bare", nobody),
    ("NO_RESPONDERS-from-a-plain-string-error-type", lambda: DeliveryFailure("NO_RESPONDERS", "")),
    (
        "NO_RESPONDERS-with-an-empty-text",
        lambda: DeliveryFailure(DeliveryErrorType.NO_RESPONDERS, ""),
    ),
    ("NO_RESPONDERS-as-__cause__", lambda: caused(RuntimeError("handshake"), nobody())),
    ("NO_RESPONDERS-as-__context__", lambda: during(RuntimeError("handshake"), nobody())),
    ("NO_RESPONDERS-two-frames-in", lambda: caused(ValueError(), caused(KeyError(), nobody()))),
    ("NO_RESPONDERS-in-a-group-branch", lambda: ExceptionGroup("g", [ValueError(), nobody()])),
    (
        "NO_RESPONDERS-in-a-nested-group",
        lambda: ExceptionGroup("g", [KeyError(), ExceptionGroup("n", [ValueError(), nobody()])]),
    ),
    (
        "NO_RESPONDERS-wrapped-inside-a-group-branch",
        lambda: ExceptionGroup("g", [caused(RuntimeError("hop"), nobody())]),
    ),
    (
        "group-raised-from-NO_RESPONDERS-branch",
        lambda: caused(RuntimeError("outer"), ExceptionGroup("g", [ValueError(), nobody()])),
    ),
    # "no answer in time" (is_no_answer_in_time's two shapes) is included, unchanged.
    ("TimeoutError", lambda: TimeoutError("no reply")),
    ("TimeoutError-wrapped", lambda: caused(RuntimeError("x"), TimeoutError())),
    ("FAILED-response-did-not-arrive-on-time", lambda: DeliveryFailure("FAILED", ROUTER_TEXT)),
    ("FAILED-placement-operation-timed-out", lambda: DeliveryFailure("FAILED", PLACEMENT_TEXT)),
    (
        "TimeoutError-and-NO_RESPONDERS-in-one-group",
        lambda: ExceptionGroup("g", [TimeoutError(), nobody()]),
    ),
]

REFUSE: list[tuple[str, Callable[[], BaseException | None]]] = [
    # Verdicts, whatever their text quotes.
    ("NOT_FOUND", lambda: DeliveryFailure(DeliveryErrorType.NOT_FOUND, "no hub serves that")),
    (
        "NOT_FOUND-quoting-no-responders",
        lambda: DeliveryFailure(DeliveryErrorType.NOT_FOUND, NO_RESPONDERS_TEXT),
    ),
    ("FORBIDDEN", lambda: DeliveryFailure(DeliveryErrorType.FORBIDDEN, "Access denied")),
    (
        "FORBIDDEN-quoting-no-responders",
        lambda: DeliveryFailure(DeliveryErrorType.FORBIDDEN, "Access denied: no responders"),
    ),
    (
        "UNAVAILABLE",
        lambda: DeliveryFailure(DeliveryErrorType.UNAVAILABLE, "the data store was unreachable"),
    ),
    (
        "SHUTTING_DOWN",
        lambda: DeliveryFailure(DeliveryErrorType.SHUTTING_DOWN, "hub 'admin/build' is closing"),
    ),
    # FAILED without the two timeout phrases, including one whose text quotes "no responders":
    # the new case is judged by error_type, never by text.
    ("FAILED-without-the-phrases", lambda: DeliveryFailure("FAILED", "KeyError: 'fingerprint'")),
    ("FAILED-quoting-no-responders", lambda: DeliveryFailure("FAILED", NO_RESPONDERS_TEXT)),
    (
        "FAILED-quoting-NO_RESPONDERS-and-nobody-answering",
        lambda: DeliveryFailure("FAILED", "NO_RESPONDERS: nobody answering"),
    ),
    ("verdict-wrapped", lambda: caused(RuntimeError("x"), DeliveryFailure("NOT_FOUND", "gone"))),
    (
        "group-of-verdicts",
        lambda: ExceptionGroup(
            "g", [DeliveryFailure("NOT_FOUND", "a"), DeliveryFailure("FORBIDDEN", "b")]
        ),
    ),
    # Other exceptions.
    ("RuntimeError", lambda: RuntimeError("no responders")),
    ("ConnectionRefusedError", lambda: ConnectionRefusedError(111, "Connection refused")),
    ("StoreError-08001", lambda: StoreError("could not connect", sqlstate="08001")),
    ("CancelledError", lambda: asyncio.CancelledError()),
    ("group-without-either", lambda: ExceptionGroup("g", [ValueError(), KeyError()])),
    (
        "suppressed-context-hides-NO_RESPONDERS",
        lambda: caused_from_none(RuntimeError("x"), nobody()),
    ),
    ("None", lambda: None),
]


@pytest.mark.parametrize("build", [b for _, b in MATCH], ids=[i for i, _ in MATCH])
def test_is_coordination_unreachable_matches(build: Callable[[], BaseException | None]) -> None:
    assert is_coordination_unreachable(build()) is True


@pytest.mark.parametrize("build", [b for _, b in REFUSE], ids=[i for i, _ in REFUSE])
def test_is_coordination_unreachable_refuses(build: Callable[[], BaseException | None]) -> None:
    assert is_coordination_unreachable(build()) is False


@pytest.mark.parametrize(
    "build",
    [
        nobody,
        lambda: caused(RuntimeError("handshake"), nobody()),
        lambda: ExceptionGroup("g", [ValueError(), nobody()]),
    ],
    ids=["bare", "wrapped", "in-a-group"],
)
def test_is_no_answer_in_time_still_refuses_no_responders(
    build: Callable[[], BaseException],
) -> None:
    # Nobody answering is not a timeout: the no-answer-in-time predicate does not match it.
    assert is_no_answer_in_time(build()) is False


@pytest.mark.parametrize("build", [b for _, b in MATCH], ids=[i for i, _ in MATCH])
def test_every_no_answer_in_time_is_also_coordination_unreachable(
    build: Callable[[], BaseException | None],
) -> None:
    # The new classifier is a superset of is_no_answer_in_time, never a narrower copy.
    exc = build()
    if is_no_answer_in_time(exc):
        assert is_coordination_unreachable(exc)


def test_no_responders_is_not_a_store_outage_nor_a_standing_watch_blip() -> None:
    failure = nobody()
    assert is_transient_connect_fault(failure) is False
    assert is_standing_watch_transient(failure) is False


def test_the_walk_is_cycle_safe() -> None:
    a, b = RuntimeError("a"), ValueError("b")
    a.__cause__, b.__cause__ = b, a
    assert is_coordination_unreachable(a) is False
    c, d = RuntimeError("c"), nobody()
    c.__cause__, d.__cause__ = d, c
    assert is_coordination_unreachable(c) is True


def test_a_no_responders_beyond_the_frame_cap_is_not_seen() -> None:
    # The walk is bounded like every other one in rxmesh.faults (256 frames per path).
    outer: BaseException = nobody()
    for _ in range(faults.MAX_CHAIN_FRAMES):
        outer = caused(RuntimeError("wrapper"), outer)
    assert is_coordination_unreachable(outer) is False
    inner: BaseException = nobody()
    for _ in range(faults.MAX_CHAIN_FRAMES - 1):
        inner = caused(RuntimeError("wrapper"), inner)
    assert is_coordination_unreachable(inner) is True


def test_the_classifier_is_exported_from_rxmesh_faults() -> None:
    assert "is_coordination_unreachable" in faults.__all__
    assert faults.is_coordination_unreachable is is_coordination_unreachable
