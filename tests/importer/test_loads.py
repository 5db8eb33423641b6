"""The importer's ``_loads`` (the decoder's scanner, ``json.loads`` for anything else) decodes
a line as ``json.loads`` does: the same value, or the same error at the same column."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rxmesh.importer._json as reading

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)
_JUNK = st.sampled_from(
    [
        "",
        " ",
        "\t",
        "1 2",
        "[1,]",
        "{",
        "}",
        "nul",
        "NaN",
        "-Infinity",
        '"\\ud800"',
        "[1] x",
        '{"a" 1}',
        "01",
        "1.",
        ".5",
        '"\x01"',
        "\ufeff{}",
        " {} ",
        "{}\r",
        "[] []",
        "tru",
    ]
)


def _outcome(decode: object, text: str) -> tuple[str, object]:
    try:
        value = decode(text)  # type: ignore[operator]
    except json.JSONDecodeError as exc:
        return "error", (exc.msg, exc.pos, exc.colno)
    return "value", json.dumps(value, allow_nan=True)  # NaN != NaN: compare the text


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        _JSON.map(json.dumps),
        _JSON.map(lambda v: json.dumps(v, indent=1)),
        st.tuples(_JSON.map(json.dumps), _JUNK).map("".join),
        st.tuples(_JUNK, _JSON.map(json.dumps)).map("".join),
        _JUNK,
        st.text(max_size=12),
    )
)
def test_a_line_decodes_as_json_loads_decodes_it(text: str) -> None:
    assert _outcome(reading._loads, text) == _outcome(json.loads, text)


def test_negative_control_a_scanner_that_ignores_the_rest_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reading, "_scan_once", lambda text, _index: (1, len(text)))
    assert _outcome(reading._loads, "[1] x") != _outcome(json.loads, "[1] x")
