"""The change feed's rows (every row an import writes is announced and parsed): a row as the
trigger writes it passes in one test, any other is judged by the rules one by one. The answer
(the entries, or the error and its text) is the one the rule-by-rule loop gave, for any rows."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rxmesh.providers.postgres._notifications as feed
from rxmesh.model import partition_of, validate_path
from rxmesh.providers.postgres._notifications import (
    MalformedNotificationError,
    parse_notification,
)

PREFIX = "rxtunit_"
_MAX_VERSION = 2**63 - 1


def _old_rows(rows: list[object], schema: str, partition: str, op: str) -> list[object]:
    """The loop over the rows before the shortcut (rxmesh/providers/_feed.py at f50ab54)."""
    entries: list[object] = []
    for row in rows:
        if not isinstance(row, list) or len(row) != 2:
            raise MalformedNotificationError(
                f"row {feed._shown(row)} is not a [path, version] pair"
            )
        path, version = row
        try:
            validate_path(path)
        except ValueError:
            raise MalformedNotificationError(
                f"path {feed._shown(path)} is not a valid path"
            ) from None
        if partition_of(path) != partition:
            raise MalformedNotificationError(
                f"path {feed._shown(path)} is not in partition {partition!r} of its schema"
            )
        if isinstance(version, bool) or not isinstance(version, int):
            raise MalformedNotificationError(f"version {feed._shown(version)} is not an integer")
        if not 0 <= version <= _MAX_VERSION:
            raise MalformedNotificationError(f"version {version} is out of range")
        entries.append((schema, path, op, version))
    return entries


def _outcome(parse: object, *args: object) -> object:
    try:
        return parse(*args)  # type: ignore[operator]
    except MalformedNotificationError as exc:
        return str(exc)


_PATHS = st.one_of(
    st.lists(
        st.sampled_from(["a", "b-1", "_owner", "_access", ".", "..", "x" * 129, ""]),
        min_size=1,
        max_size=4,
    ).map(lambda segments: "p/" + "/".join(segments)),
    st.sampled_from(
        ["p", "q/a", "pp/a", "p/a" + "/b" * 16, "p/" + "a" * 510, "p/é", 7, None, ["p/a"]]
    ),
)
_VERSIONS = st.one_of(
    st.integers(-2, 5),
    st.sampled_from([_MAX_VERSION, _MAX_VERSION + 1, True, False, 1.0, "1", None]),
)
_ROWS = st.lists(
    st.one_of(st.tuples(_PATHS, _VERSIONS).map(list), st.sampled_from([[], ["p/a"], "p/a", 3])),
    min_size=1,
    max_size=5,
)


@settings(max_examples=500, deadline=None)
@given(_ROWS, st.sampled_from(["upsert", "delete"]))
def test_the_rows_parse_as_the_rule_by_rule_loop_parsed_them(rows: list[object], op: str) -> None:
    payload = json.dumps([PREFIX + "p", op, rows])
    decoded = json.loads(payload)[2]
    expected = _outcome(_old_rows, decoded, PREFIX + "p", "p", op)
    assert _outcome(parse_notification, payload, PREFIX) == expected


def test_a_plain_row_takes_the_shortcut(monkeypatch: pytest.MonkeyPatch) -> None:
    def judged(*_: object) -> object:
        raise AssertionError("judged by the rules")

    monkeypatch.setattr(feed, "_checked_row", judged)
    payload = json.dumps([PREFIX + "p", "upsert", [["p/a", 1], ["p/b/c", 0]]])
    assert parse_notification(payload, PREFIX) == [
        (PREFIX + "p", "p/a", "upsert", 1),
        (PREFIX + "p", "p/b/c", "upsert", 0),
    ]


@pytest.mark.parametrize("path", ["p/../x", "p/a//b", "p/" + "a" * 129])
def test_negative_control_a_shortcut_that_passes_anything_is_caught(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    payload = json.dumps([PREFIX + "p", "upsert", [[path, 1]]])
    expected = _outcome(_old_rows, [[path, 1]], PREFIX + "p", "p", "upsert")
    assert isinstance(expected, str)  # the rule refuses it
    monkeypatch.setattr(feed, "PLAIN_PATH", re.compile(r".*"))
    assert _outcome(parse_notification, payload, PREFIX) != expected
