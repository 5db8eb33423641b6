"""Fixtures of the instrumentation tests: a recording instrument, and a seam left clean."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rxmesh import instrumentation
from rxmesh.instrumentation import _events


class Recorder:
    """An instrument that keeps every event it is handed."""

    def __init__(self) -> None:
        self.events: list[_events.Event] = []

    def on_event(self, event: _events.Event) -> None:
        self.events.append(event)

    def of(self, kind: type[_events.Event]) -> list[_events.Event]:
        return [e for e in self.events if isinstance(e, kind)]


@pytest.fixture(autouse=True)
def clean_seam() -> Iterator[None]:
    """Every test starts and ends with nothing installed (a leak would fail the next test)."""
    assert instrumentation.installed() == ()
    yield
    leaked = instrumentation.installed()
    for instrument in leaked:
        instrumentation._seam.Installation(instrument).uninstall()
    assert leaked == (), f"a test left instruments installed: {leaked}"


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    record = Recorder()
    with instrumentation.install(record):
        yield record


def event_classes() -> list[type[_events.Event]]:
    """Every concrete event type (the subclasses of Event, recursively)."""
    found: list[type[_events.Event]] = []
    pending = list(_events.Event.__subclasses__())
    while pending:
        kind = pending.pop()
        found.append(kind)
        pending.extend(kind.__subclasses__())
    return found


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the event objects constructed during the test (every event class counted)."""
    names: list[str] = []
    for kind in event_classes():
        original = kind.__init__

        def counting(self: object, *args: object, __o=original, **kwargs: object) -> None:  # type: ignore[no-untyped-def]
            names.append(type(self).__name__)
            __o(self, *args, **kwargs)

        monkeypatch.setattr(kind, "__init__", counting)
    return names
