"""NodeType records baked into pydantic models, and the registry the mesh validates with."""

from __future__ import annotations

from typing import Any

import pytest

from rxmesh import CreateNodeRequest, CreateNodeResponse, Mesh, MeshNode, RejectionReason
from rxmesh.aio import first_value
from rxmesh.exceptions import InvalidNodeTypeError, NodeValidationError
from rxmesh.model import QueryFrame
from rxmesh.nodetypes import (
    FieldType,
    NodeTypeRegistry,
    bake,
    describe_validation_error,
)
from tests.helpers import ALICE, LogRecords
from tests.mesh.conftest import make_mesh

INVOICE = {
    "name": "Invoice",
    "fields": {
        "amount": {"type": "number", "required": True},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
        "lines": {"type": "array"},
        "count": {"type": "integer"},
        "paid": {"type": "boolean"},
        "meta": {"type": "object"},
        "note": {"type": "any"},
    },
}


def record(path: str, content: Any, *, version: int = 1) -> MeshNode:
    return MeshNode(path=path, node_type="NodeType", content=content, version=version)


def named(path: str, name: str, **fields: Any) -> MeshNode:
    return record(path, {"name": name, "fields": fields})


def node(node_type: str | None, content: Any, path: str = "acme/n1") -> MeshNode:
    return MeshNode(path=path, node_type=node_type, content=content)


# -- baking -----------------------------------------------------------------------------------


def test_a_record_bakes_into_a_model_keyed_by_its_content_name() -> None:
    baked = bake(record("types/anything/here", INVOICE, version=3))

    assert (baked.name, baked.path, baked.version) == ("Invoice", "types/anything/here", 3)
    assert baked.model.__name__ == "Invoice"
    baked.validate_content({"amount": 12.5, "currency": "EUR", "lines": [1, {"a": 2}]})
    baked.validate_content({"amount": 3})  # an integer is a number; optional fields may be absent
    baked.validate_content({"amount": 3, "currency": None, "note": {"x": [1]}})


def test_the_field_types_are_the_documented_seven() -> None:
    assert [t.value for t in FieldType] == [
        "string",
        "integer",
        "number",
        "boolean",
        "object",
        "array",
        "any",
    ]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({}, "content.amount: Field required"),
        ({"amount": "12"}, "content.amount: Input should be a valid number"),
        ({"amount": True}, "content.amount: Input should be a valid number"),
        ({"amount": 1, "count": 1.5}, "content.count: Input should be a valid integer"),
        ({"amount": 1, "count": "2"}, "content.count: Input should be a valid integer"),
        ({"amount": 1, "paid": 1}, "content.paid: Input should be a valid boolean"),
        ({"amount": 1, "currency": "GBP"}, "content.currency: Input should be 'EUR' or 'USD'"),
        ({"amount": 1, "lines": {"a": 1}}, "content.lines: Input should be a valid list"),
        ({"amount": 1, "meta": [1]}, "content.meta: Input should be a valid dictionary"),
        ({"amount": 1, "colour": "red"}, "content.colour: Extra inputs are not permitted"),
    ],
)
def test_bad_content_is_refused_naming_the_field(content: dict[str, Any], expected: str) -> None:
    baked = bake(record("types/Invoice", INVOICE))
    with pytest.raises(NodeValidationError) as caught:
        baked.validate_content(content, path="acme/i1")
    assert str(caught.value) == f"node 'acme/i1' of type 'Invoice': {expected}"
    assert caught.value.path == "acme/i1"


def test_every_failing_field_is_named_in_one_message() -> None:
    baked = bake(record("types/Invoice", INVOICE))
    with pytest.raises(NodeValidationError) as caught:
        baked.validate_content({"amount": "x", "currency": "GBP"})
    message = str(caught.value)
    assert "content.amount: Input should be a valid number" in message
    assert "content.currency: Input should be 'EUR' or 'USD'" in message


def test_content_that_is_not_an_object_is_refused() -> None:
    baked = bake(named("types/Note", "Note", text={"type": "string"}))
    with pytest.raises(NodeValidationError, match="content must be an object, got list"):
        baked.validate_content([1, 2])
    baked.validate_content(None)  # no content is an empty object: nothing required here


def test_extra_allow_accepts_unlisted_keys() -> None:
    baked = bake(record("types/Bag", {"name": "Bag", "extra": "allow"}))
    baked.validate_content({"anything": [1], "else": None})


def test_any_key_is_a_field_even_one_that_clashes_with_pydantic() -> None:
    baked = bake(
        named(
            "types/Odd",
            "Odd",
            model_config={"type": "string", "required": True},
            **{"first name": {"type": "integer"}},
        )
    )
    baked.validate_content({"model_config": "ok", "first name": 3})
    with pytest.raises(NodeValidationError, match=r"content\.first name: Input should be"):
        baked.validate_content({"model_config": "ok", "first name": "three"})


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({"fields": {}}, "content.name: Field required"),
        ({"name": "Bad", "fields": {"a": {"type": "decimal"}}}, "content.fields.a.type: Input"),
        ({"name": "Bad", "fields": {"a": {"type": "string", "enum": [1]}}}, "not of type"),
        ({"name": "Bad", "fields": {"a": {"type": "array", "enum": ["x"]}}}, "not allowed"),
        ({"name": "Bad", "fields": 3}, "content.fields: Input should be a valid dictionary"),
        ({"name": "Bad", "extra": "ignore"}, "content.extra: Input should be 'forbid' or"),
        ({"name": "Bad", "colour": 1}, "content.colour: Extra inputs are not permitted"),
        ({"name": "NodeType"}, "built in and reserved"),
        ({"name": "9lives"}, "content.name: String should match pattern"),
        (["not", "an", "object"], "content must be an object, got list"),
    ],
)
def test_a_malformed_record_is_refused_naming_the_record_and_the_part(
    content: Any, expected: str
) -> None:
    with pytest.raises(NodeValidationError) as caught:
        bake(record("types/Bad", content))
    assert str(caught.value).startswith("NodeType record 'types/Bad': ")
    assert expected in str(caught.value)
    assert caught.value.path == "types/Bad"


def test_a_node_that_is_not_a_nodetype_record_does_not_bake() -> None:
    with pytest.raises(NodeValidationError, match="node_type is 'Doc', not 'NodeType'"):
        bake(MeshNode(path="types/x", node_type="Doc", content={"name": "X"}))


# -- the registry -----------------------------------------------------------------------------


def test_an_unknown_type_is_refused_when_strict_and_accepted_when_not() -> None:
    records = [named("types/Note", "Note", text={"type": "string"})]
    strict = NodeTypeRegistry(records, strict=True)
    lenient = NodeTypeRegistry(records)

    with pytest.raises(InvalidNodeTypeError) as caught:
        strict.validate(node("Invoice", {"amount": 1}))
    assert str(caught.value) == (
        "node 'acme/n1': unknown node type 'Invoice': no NodeType record defines it (known: 'Note')"
    )
    lenient.validate(node("Invoice", {"anything": "goes"}))  # unknown: accepted unchecked
    # Known types are checked either way; a node with no type is never checked.
    for registry in (strict, lenient):
        with pytest.raises(NodeValidationError, match=r"content\.text: Input should be"):
            registry.validate(node("Note", {"text": 1}))
        registry.validate(node(None, {"free": "form"}))
    assert strict.statistics().refusals == 2
    assert lenient.statistics().refusals == 1


def test_nodetype_records_are_validated_against_the_nodetype_schema() -> None:
    registry = NodeTypeRegistry(strict=True)
    registry.validate(record("types/Note", {"name": "Note"}))  # built in, even when strict
    with pytest.raises(NodeValidationError, match=r"content\.fields\.a\.type"):
        registry.validate(record("types/Bad", {"name": "Bad", "fields": {"a": {"type": "?"}}}))
    assert registry.names() == ()  # validating a record does not bake it


def test_a_malformed_record_is_reported_and_counted_and_the_others_bake(
    log_records: LogRecords,
) -> None:
    registry = NodeTypeRegistry()
    change = registry.bake_all(
        [
            named("types/A", "A", x={"type": "string"}),
            record("types/Broken", {"name": "Broken", "fields": {"x": {"type": "float"}}}),
            named("types/B", "B"),
        ]
    )

    assert registry.names() == ("A", "B")
    assert change.baked == ("A", "B")
    assert change.malformed == ("types/Broken",)
    stats = registry.statistics()
    assert (stats.types, stats.records, stats.malformed, stats.malformed_seen) == (2, 2, 1, 1)
    assert stats.malformed_paths == ("types/Broken",)
    (warning,) = log_records.at("WARNING")
    assert "NodeType record 'types/Broken' is malformed" in str(warning["message"])
    assert warning["extra"]["record"] == "types/Broken"  # type: ignore[index]


def test_apply_rebakes_what_changed_and_drops_what_was_removed() -> None:
    registry = NodeTypeRegistry(strict=True)
    note = named("types/Note", "Note", text={"type": "string"})
    invoice = record("types/Invoice", INVOICE)
    first = registry.apply(QueryFrame.initial([note, invoice]))
    assert first.baked == ("Invoice", "Note")
    assert registry.statistics().bakes == 2

    # The same snapshot again (a re-opened census): nothing is re-baked.
    again = registry.apply(QueryFrame.initial([note, invoice]))
    assert (again.changed, again.unchanged) == (False, 2)
    assert registry.statistics().bakes == 2

    # Re-keyed: the record at types/Note now defines "Memo" with a required field.
    memo = named("types/Note", "Memo", text={"type": "string", "required": True})
    change = registry.apply(QueryFrame.delta([memo]))
    assert (change.baked, change.dropped) == (("Memo",), ("Note",))
    assert registry.names() == ("Invoice", "Memo")
    with pytest.raises(InvalidNodeTypeError):
        registry.validate(node("Note", {"text": "x"}))
    with pytest.raises(NodeValidationError, match=r"content\.text: Field required"):
        registry.validate(node("Memo", {}))

    removed = registry.apply(QueryFrame.delta(removed=["types/Invoice"]))
    assert removed.dropped == ("Invoice",)
    # An Initial replaces: what it does not list is gone.
    registry.apply(QueryFrame.initial([note]))
    assert registry.names() == ("Note",)


def test_a_record_that_becomes_malformed_drops_its_type_and_recovers_when_fixed() -> None:
    registry = NodeTypeRegistry(strict=True)
    registry.apply(QueryFrame.initial([named("types/Note", "Note")]))
    broken = record("types/Note", {"name": "Note", "fields": []}, version=2)

    change = registry.apply(QueryFrame.delta([broken]))
    assert (change.dropped, change.malformed) == (("Note",), ("types/Note",))
    assert registry.apply(QueryFrame.delta([broken])).malformed == ()  # reported once
    fixed = named("types/Note", "Note")
    assert registry.apply(QueryFrame.delta([fixed])).baked == ("Note",)
    assert registry.statistics().malformed == 0


def test_two_records_claiming_one_name_the_first_path_defines_it() -> None:
    registry = NodeTypeRegistry(
        [
            named("types/b", "Note", text={"type": "integer"}),
            named("types/a", "Note", text={"type": "string"}),
        ]
    )
    registry.validate(node("Note", {"text": "a string"}))
    assert registry.statistics().shadowed == 1
    registry.apply(QueryFrame.delta(removed=["types/a"]))
    registry.validate(node("Note", {"text": 3}))  # the other record now defines it
    assert registry.statistics().shadowed == 0


def test_describe_validation_error_prefixes_each_location() -> None:
    baked = bake(record("types/Invoice", INVOICE))
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as caught:
        baked.model.model_validate({"amount": "x"})
    assert describe_validation_error(caught.value, "body") == (
        "body.amount: Input should be a valid number"
    )


# -- through the mesh -------------------------------------------------------------------------


async def ask(mesh: Mesh, created: MeshNode) -> CreateNodeResponse:
    request = CreateNodeRequest(node=created, access=ALICE)
    return await first_value(mesh.create_node(request), timeout=10)


def registry_mesh(*, strict: bool) -> tuple[Mesh, NodeTypeRegistry]:
    registry = NodeTypeRegistry([record("types/Invoice", INVOICE)], strict=strict)
    mesh, _ = make_mesh(node_types=registry)
    return mesh, registry


async def test_through_the_mesh_an_unknown_type_answers_invalid_node_type() -> None:
    mesh, _ = registry_mesh(strict=True)
    response = await ask(mesh, node("Receipt", {"amount": 1}, "acme/r1"))
    assert response.rejection_reason is RejectionReason.INVALID_NODE_TYPE
    assert "unknown node type 'Receipt'" in (response.error or "")
    assert await mesh.store.read("acme/r1") is None


async def test_through_the_mesh_bad_content_answers_validation_failed_naming_the_field() -> None:
    mesh, _ = registry_mesh(strict=True)
    response = await ask(mesh, node("Invoice", {"amount": "lots"}, "acme/i1"))
    assert response.rejection_reason is RejectionReason.VALIDATION_FAILED
    assert "content.amount: Input should be a valid number" in (response.error or "")
    assert await mesh.store.read("acme/i1") is None


async def test_through_the_mesh_good_content_lands() -> None:
    mesh, _ = registry_mesh(strict=True)
    response = await ask(mesh, node("Invoice", {"amount": 12.5, "currency": "EUR"}, "acme/i2"))
    assert response.success, response
    stored = await mesh.store.read("acme/i2")
    assert stored is not None and stored.content == {"amount": 12.5, "currency": "EUR"}


async def test_through_a_lenient_mesh_an_unknown_type_lands_and_known_ones_are_checked() -> None:
    mesh, _ = registry_mesh(strict=False)
    assert (await ask(mesh, node("Receipt", {"x": 1}, "acme/r2"))).success
    bad = await ask(mesh, node("Invoice", {}, "acme/i3"))
    assert bad.rejection_reason is RejectionReason.VALIDATION_FAILED
    assert "content.amount: Field required" in (bad.error or "")


async def test_through_the_mesh_a_malformed_nodetype_record_is_refused() -> None:
    mesh, _ = registry_mesh(strict=True)
    bad = record("types/Bad", {"name": "Bad", "fields": {"a": {"type": "decimal"}}})
    response = await ask(mesh, bad.model_copy(update={"version": 0}))
    assert response.rejection_reason is RejectionReason.VALIDATION_FAILED
    assert "content.fields.a.type" in (response.error or "")
