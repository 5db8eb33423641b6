"""The content-filter language: canonical form and hashing, evaluation, and hostile filters refused
at construction with an error naming the input (each refusal beside an accepted neighbour)."""

from __future__ import annotations

import itertools

import pytest

from rxmesh.exceptions import NodeValidationError
from rxmesh.model import Filter, MeshNode, NodeQuery, and_, field, not_, or_
from rxmesh.model._filters import MAX_FILTER_DEPTH, MAX_FILTER_IN_VALUES, MAX_FILTER_TERMS

A, B, C = field("a").eq(1), field("b").gt("x"), field("c.d").is_null()


def test_and_is_flattened_deduplicated_and_ordered() -> None:
    assert and_(A, and_(B, C)) == and_(C, B, A) == and_(A, B, C, A)
    assert hash(and_(A, and_(B, C))) == hash(and_(C, B, A))
    assert len(and_(A, and_(B, C)).terms) == 3
    assert and_(A, A) == A
    assert or_(A, or_(B, A)) == or_(B, A)
    # Negative controls: and_ and or_ of the same terms differ; nesting of the other connective
    # is kept.
    assert and_(A, B) != or_(A, B)
    assert and_(A, or_(B, C)).terms != (A, B, C)


def test_numbers_are_canonical_and_never_equal_booleans_or_strings() -> None:
    assert field("a").eq(1) == field("a").eq(1.0)
    assert hash(field("a").eq(1)) == hash(field("a").eq(1.0))
    assert field("a").in_([2, 1, 1.0]) == field("a").in_([1, 2])
    assert field("a").eq(1) != field("a").eq(True)
    assert field("a").eq(0) != field("a").eq(False)
    assert field("a").eq(1) != field("a").eq("1")
    assert field("a").eq(0.5) != field("a").eq(1)


def test_double_negation_and_operators() -> None:
    assert not_(not_(A)) == A
    assert and_(A, B) == (A & B)
    assert or_(A, B) == (A | B)
    assert not_(A) == ~A


def test_equal_filters_are_one_query_key() -> None:
    one = NodeQuery(partition="p", where=and_(A, B))
    two = NodeQuery(partition="p", where=and_(B, A))
    assert one == two
    assert len({one, two}) == 1
    assert NodeQuery(partition="p", where=A) != NodeQuery(partition="p", where=B)
    assert NodeQuery(partition="p") != one


def test_node_query_matches_applies_where() -> None:
    query = NodeQuery(partition="p", where=field("status").eq("open") & field("total").gt(100))
    assert query.matches(MeshNode(path="p/o1", content={"status": "open", "total": 150}))
    assert not query.matches(MeshNode(path="p/o1", content={"status": "open", "total": 50}))
    assert not query.matches(MeshNode(path="p/o1", content={"status": "open", "total": "150"}))
    assert not query.matches(MeshNode(path="q/o1", content={"status": "open", "total": 150}))


@pytest.mark.parametrize(
    ("where", "content", "answer"),
    [
        (field("n").eq(1), {"n": 1}, True),
        (field("n").eq(1), {"n": "1"}, False),
        (field("n").eq(1), {"n": True}, False),
        (field("b").eq(True), {"b": 1}, False),
        (field("n").lt(2), {"n": "1"}, False),
        (not_(field("n").lt(2)), {"n": "1"}, True),
        (field("n").ne(2), {"n": "1"}, False),
        (field("n").ne(2), {"n": 1}, True),
        (field("n").ne(2), {}, False),
        (field("x").is_null(), {"x": None}, True),
        (field("x").is_null(), {}, False),
        (field("x").is_null(), None, False),
        (field("a.b").eq("z"), {"a": {"b": "z"}}, True),
        (field("a.b").eq("z"), {"a": "z"}, False),
        (field("a.1").eq("y"), {"a": ["x", "y"]}, True),
        (field("a.-1").eq("y"), {"a": ["x", "y"]}, True),
        (field("a.2").eq("y"), {"a": ["x", "y"]}, False),
        (field("t").contains("x"), {"t": ["x", "y"]}, True),
        (field("t").contains("x"), {"t": "xyz"}, False),
        (field("s").startswith("ab"), {"s": "abc"}, True),
        (field("s").startswith("ab"), {"s": ["abc"]}, False),
        (field("s").in_(["a", 1]), {"s": 1.0}, True),
        (field("s").in_(["a", 1]), {"s": "1"}, False),
        (field("日本").eq("é"), {"日本": "é"}, True),
    ],
)
def test_evaluation(where: Filter, content: object, answer: bool) -> None:
    assert where.matches(content) is answer


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (lambda: field("a..b"), "'a..b'"),
        (lambda: field(""), "''"),
        (lambda: field("a'b"), "a'b"),
        (lambda: field('a"b'), 'a"b'),
        (lambda: field("a\x00b"), "a\\x00b"),
        (lambda: field("a\ud800"), "a\\ud800"),
        (lambda: field("a b"), "'a b'"),
        (lambda: field("x" * 300), "300 characters"),
        (lambda: field(".".join(["s"] * 17)), "17 segments"),
        (lambda: field("a").eq(float("nan")), "nan"),
        (lambda: field("a").eq(float("inf")), "inf"),
        (lambda: field("a").eq({"k": 1}), "{'k': 1}"),
        (lambda: field("a").eq(None), "is_null"),
        (lambda: field("a").eq(10**700), "640 digits"),
        (lambda: field("a").eq("x\x00"), "NUL"),
        (lambda: field("a").eq("\udc00"), "surrogate"),
        (lambda: field("a").lt(True), "booleans are not ordered"),
        (lambda: field("a").in_(range(MAX_FILTER_IN_VALUES + 1)), "more than 100 values"),
        (lambda: field("a").in_("abc"), "'abc'"),
        (lambda: field("a").in_(itertools.count()), "more than 100 values"),
        (lambda: Filter("like", ("a",), (("string", "x"),)), "'like'"),
        (lambda: Filter("eq", ("a",), [("number", 1)]), "tuples"),
        (lambda: or_(*[field("x").eq(i) for i in range(10_000)]), "10000 filters"),
        (lambda: and_(), "no filters"),
        (lambda: and_(A, "x"), "'x'"),
    ],
)
def test_hostile_filters_are_refused_naming_the_input(build: object, named: str) -> None:
    with pytest.raises(NodeValidationError, match="invalid filter") as caught:
        build()  # type: ignore[operator]
    assert named in str(caught.value)


def test_the_accepted_neighbours_of_the_refusals() -> None:
    # Negative controls for the refusals above: the nearest inputs are accepted.
    field("a.b")
    field("x" * 256)
    field(".".join(["s"] * 16))
    field("a").eq(10**639)
    field("a").eq(1e308)
    field("a").in_(range(MAX_FILTER_IN_VALUES))
    or_(*[field("x").eq(i) for i in range(MAX_FILTER_TERMS - 1)])


def test_depth_and_total_size_are_bounded() -> None:
    term = A
    for index in range(MAX_FILTER_DEPTH - 1):
        term = or_(and_(term, field("k").eq(index)), field("j").eq(index))
        if term.depth >= MAX_FILTER_DEPTH - 1:
            break
    with pytest.raises(NodeValidationError, match="deep"):
        for index in range(MAX_FILTER_DEPTH):
            term = not_(or_(term, field("m").eq(index)))
    half = or_(*[field("x").eq(i) for i in range(MAX_FILTER_TERMS // 2)])
    with pytest.raises(NodeValidationError, match="terms"):
        and_(half, or_(*[field("y").eq(i) for i in range(MAX_FILTER_TERMS // 2)]))


def test_a_hand_built_filter_is_checked_too() -> None:
    with pytest.raises(NodeValidationError, match="invalid filter"):
        Filter("eq", ("a",), (("number", True),))
    with pytest.raises(NodeValidationError, match="invalid filter"):
        Filter("eq", ("a\x00",), (("number", 1),))
    assert Filter("eq", ("a",), (("number", 1),)) == field("a").eq(1)
