"""``MeshCore.fail_fast`` judges content in one walk (``content_certainly_fits``) and by the rules
only when that walk is not sure: the same decision and the same text as the rule it replaced
(``validate_content``, then the exact size of ``json.dumps(..., ensure_ascii=False,
allow_nan=False)`` in UTF-8), for any content; and the shortcut is taken for plain content."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rxmesh.mesh._core as core_module
from rxmesh import MeshNode
from rxmesh.exceptions import NodeValidationError
from rxmesh.mesh._core import MeshCore
from rxmesh.model import MAX_CONTENT_BYTES, MAX_CONTENT_DEPTH, validate_content
from tests.helpers import ALICE
from tests.mesh.conftest import make_mesh


def _old_fail_fast(node: MeshNode) -> None:
    """The rule as it was before the shortcut (rxmesh/mesh/_core.py at f50ab54)."""
    if node.node_type is None and node.content is None:
        raise NodeValidationError(
            f"node '{node.path}' has neither a node_type nor content", path=node.path
        )
    if node.content is not None:
        validate_content(node.path, node.content)
        size = len(json.dumps(node.content, ensure_ascii=False, allow_nan=False).encode())
        if size > MAX_CONTENT_BYTES:
            raise NodeValidationError(
                f"node '{node.path}': content is {size} bytes; at most {MAX_CONTENT_BYTES}",
                path=node.path,
            )


def _outcome(check: Any, node: MeshNode) -> tuple[type[BaseException], str] | None:
    try:
        check(node)
    except Exception as exc:
        return type(exc), str(exc)
    return None


def _core() -> MeshCore:
    mesh, _ = make_mesh()
    return mesh._core


CORE = _core()


def _new(node: MeshNode) -> None:
    CORE.fail_fast(node, ALICE)


def _node(content: object) -> MeshNode:
    return MeshNode.model_construct(path="p/a", node_type="Doc", content=content)


def _same(content: object) -> None:
    node = _node(content)
    assert _outcome(_new, node) == _outcome(_old_fail_fast, node)
    if core_module.content_certainly_fits(content):
        assert _outcome(_old_fail_fast, node) is None  # the shortcut never accepts a refusal


class _Str(str):
    pass


class _Int(int):
    pass


class _Level(enum.IntEnum):
    HIGH = 3


class _Float(float):
    pass


_NASTY_TEXT = st.sampled_from(
    ["", "a", "\x00", "a\x00b", "\ud800", "x\udfff", '\x1f\n\t"\\', "é", "😀", "\u2028", "\x7f"]
)
_TEXT = st.text(max_size=12) | _NASTY_TEXT | st.builds(_Str, st.text(max_size=4))
_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**62, max_value=2**70).flatmap(lambda n: st.sampled_from([n, -n]))
    | st.sampled_from([2**63 - 1, -(2**63) + 1, 2**63, -(2**63), 10**300, _Level.HIGH])
    | st.builds(_Int, st.integers(-5, 5))
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.builds(_Float, st.floats(-1, 1))
    | _TEXT
    | st.sampled_from([b"bytes", {1, 2}, object(), 1j])
)
_KEYS = _TEXT | st.sampled_from([1, None, 2.5, True])
_CONTENT = st.recursive(
    _LEAVES,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(_KEYS, children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_CONTENT)
def test_the_shortcut_decides_and_words_as_the_rule_did(content: object) -> None:
    _same(content)


@pytest.mark.parametrize("content", [[10**5000], {"n": -(10**5000)}], ids=["huge", "huge-key"])
def test_an_integer_json_cannot_write(content: object) -> None:
    """Past Python's 4300 digits json.dumps raises ValueError: the rule refuses such an integer
    (more than MAX_CONTENT_INT_DIGITS digits) first, by name."""
    _same(content)
    assert _outcome(_new, _node(content))[0] is NodeValidationError  # type: ignore[index]


def _nest(depth: int, leaf: object, kind: str) -> object:
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


@pytest.mark.parametrize("kind", ["list", "dict"])
@pytest.mark.parametrize("leaf", [1, [], {}, "s"])
@pytest.mark.parametrize("depth", [MAX_CONTENT_DEPTH - 1, MAX_CONTENT_DEPTH, MAX_CONTENT_DEPTH + 1])
def test_nesting_at_the_depth_limit(depth: int, leaf: object, kind: str) -> None:
    _same(_nest(depth, leaf, kind))


def _sized(size: int, unit: str) -> list[str]:
    """A list of one string whose JSON text is ``size`` bytes (give or take a unit)."""
    width = len(json.dumps(unit, ensure_ascii=False).encode()) - 2
    return [unit * ((size - 4) // width)]


@pytest.mark.parametrize("unit", ["a", "é", "😀", "\x01", '"'])
@pytest.mark.parametrize("delta", [-7, -1, 0, 1, 6])
def test_content_at_the_size_limit(unit: str, delta: int) -> None:
    """Content just under, at and over the limit, with characters of 1 to 6 bytes each."""
    content = _sized(MAX_CONTENT_BYTES + delta, unit)
    _same(content)
    _same({"k": content, "n": 12345})


def test_exactly_at_the_limit_is_accepted_and_one_byte_more_refused() -> None:
    at = ["a" * (MAX_CONTENT_BYTES - 4)]  # ["..."] : 4 bytes around it
    assert len(json.dumps(at).encode()) == MAX_CONTENT_BYTES
    assert _outcome(_new, _node(at)) is None
    over = ["a" * (MAX_CONTENT_BYTES - 3)]
    assert _outcome(_new, _node(over)) == (
        NodeValidationError,
        f"node 'p/a': content is {MAX_CONTENT_BYTES + 1} bytes; at most {MAX_CONTENT_BYTES}",
    )


def test_plain_content_takes_the_shortcut() -> None:
    """The point of it: the importer's kind of content is judged in the one walk."""
    for content in (
        {"i": 12, "text": "small node content of a few dozen bytes"},
        [1, 2.5, True, None, "é😀", {"a": [{}]}],
        "text",
        0,
        {"x": -(2**63) + 1},
    ):
        assert core_module.content_certainly_fits(content), content


@pytest.mark.parametrize(
    "content",
    [
        float("nan"),
        {"a": float("inf")},
        ["\x00"],
        {"\ud800": 1},
        _nest(MAX_CONTENT_DEPTH + 1, 1, "list"),
        ["a" * MAX_CONTENT_BYTES],
        {"b": b"x"},
    ],
    ids=["nan", "inf", "nul", "surrogate-key", "deep", "big", "bytes"],
)
def test_negative_control_a_shortcut_that_accepts_everything_is_caught(
    content: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Were the shortcut wrong (here: "everything fits"), the comparison above would fail."""
    node = _node(content)
    assert _outcome(_old_fail_fast, node) is not None
    monkeypatch.setattr(core_module, "content_certainly_fits", lambda _content: True)
    assert _outcome(_new, node) != _outcome(_old_fail_fast, node)
