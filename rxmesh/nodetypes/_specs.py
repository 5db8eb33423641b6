"""NodeType records compiled into pydantic models: the record's schema and :func:`bake`.

Private: every public name here is public from :mod:`rxmesh.nodetypes` (import it from there),
whose docstring describes a NodeType record; the registry there consults these.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    create_model,
    model_validator,
)

from rxmesh.exceptions import NodeValidationError
from rxmesh.model import NODE_TYPE_NODE_TYPE, MeshNode

__all__ = [
    "BakedNodeType",
    "EnumValue",
    "FieldSpec",
    "FieldType",
    "NodeTypeSpec",
    "bake",
    "describe_validation_error",
    "parse_spec",
]


class FieldType(StrEnum):
    """The field types a NodeType record may declare."""

    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    OBJECT = "object"
    ARRAY = "array"
    ANY = "any"


_PYTHON_TYPES: dict[FieldType, Any] = {
    FieldType.STRING: str,
    FieldType.INTEGER: int,
    FieldType.NUMBER: float,
    FieldType.BOOLEAN: bool,
    FieldType.OBJECT: dict[str, JsonValue],
    FieldType.ARRAY: list[JsonValue],
    FieldType.ANY: JsonValue,
}

EnumValue = str | int | float | bool


def _enum_fits(kind: FieldType, value: EnumValue) -> bool:
    if kind is FieldType.ANY:
        return True
    if kind is FieldType.STRING:
        return isinstance(value, str)
    if kind is FieldType.BOOLEAN:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind is FieldType.INTEGER:
        return isinstance(value, int)
    return kind is FieldType.NUMBER and isinstance(value, int | float)


class FieldSpec(BaseModel):
    """One field of a node type: its type, whether it is required, optional allowed values."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: FieldType
    required: bool = False
    enum: tuple[EnumValue, ...] | None = Field(default=None, min_length=1)
    description: str | None = None

    @model_validator(mode="after")
    def _enum_matches_type(self) -> FieldSpec:
        if self.enum is None:
            return self
        if self.type in {FieldType.OBJECT, FieldType.ARRAY}:
            raise ValueError(f"an enum is not allowed on a field of type {self.type.value!r}")
        wrong = [value for value in self.enum if not _enum_fits(self.type, value)]
        if wrong:
            raise ValueError(f"enum value(s) {wrong!r} are not of type {self.type.value!r}")
        return self


class NodeTypeSpec(BaseModel):
    """The content of a NodeType record (the meta-schema); see the module docstring."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z][A-Za-z0-9_.-]*$")
    description: str | None = None
    fields: dict[str, FieldSpec] = Field(default_factory=dict)
    extra: Literal["forbid", "allow"] = "forbid"

    @model_validator(mode="after")
    def _not_reserved(self) -> NodeTypeSpec:
        if self.name == NODE_TYPE_NODE_TYPE:
            raise ValueError(f"the type name {NODE_TYPE_NODE_TYPE!r} is built in and reserved")
        for key in self.fields:
            if not key or len(key) > 128:
                raise ValueError(f"field name {key!r} must be 1 to 128 characters")
        return self


def describe_validation_error(error: ValidationError, prefix: str = "content") -> str:
    """``"content.amount: Input should be a valid number; ..."`` — one clause per failing field."""
    clauses = []
    for item in error.errors(include_url=False):
        location = ".".join([prefix, *(str(part) for part in item["loc"])])
        clauses.append(f"{location}: {item['msg']}")
    return "; ".join(clauses)


@dataclass(frozen=True, slots=True)
class BakedNodeType:
    """A NodeType record compiled into a pydantic model.

    Attributes:
        name: the type name (``content.name`` of the record).
        path: the record's path.
        version: the record's version when it was baked.
        spec: the parsed record content.
        model: the pydantic model node content is validated against.
        record: the record as baked (used to tell whether a later record changed).
    """

    name: str
    path: str
    version: int
    spec: NodeTypeSpec
    model: type[BaseModel]
    record: MeshNode

    def validate_content(self, content: object, *, path: str | None = None) -> None:
        """Validate node content against this type.

        Raises:
            NodeValidationError: naming each failing field (``content.amount: ...``).
        """
        if content is None:
            content = {}
        where = f"node '{path}' " if path else ""
        if not isinstance(content, dict):
            raise NodeValidationError(
                f"{where}of type '{self.name}': content must be an object, got "
                f"{type(content).__name__}",
                path=path,
            )
        try:
            self.model.model_validate(content)
        except ValidationError as exc:
            raise NodeValidationError(
                f"{where}of type '{self.name}': {describe_validation_error(exc)}", path=path
            ) from exc


def parse_spec(record: MeshNode) -> NodeTypeSpec:
    if record.node_type != NODE_TYPE_NODE_TYPE:
        raise NodeValidationError(
            f"NodeType record '{record.path}': node_type is {record.node_type!r}, "
            f"not {NODE_TYPE_NODE_TYPE!r}",
            path=record.path,
        )
    if not isinstance(record.content, dict):
        raise NodeValidationError(
            f"NodeType record '{record.path}': content must be an object, got "
            f"{type(record.content).__name__}",
            path=record.path,
        )
    try:
        return NodeTypeSpec.model_validate(record.content)
    except ValidationError as exc:
        raise NodeValidationError(
            f"NodeType record '{record.path}': {describe_validation_error(exc)}",
            path=record.path,
        ) from exc


def bake(record: MeshNode) -> BakedNodeType:
    """Compile one NodeType record into a :class:`BakedNodeType`.

    Field names become aliases of generated attribute names, so any key (``"model_config"``,
    ``"first name"``) is a valid field.

    Raises:
        NodeValidationError: the record is malformed; the message names the record path and the
            offending part of its content (``content.fields.amount.type: ...``).
    """
    spec = parse_spec(record)
    definitions: dict[str, Any] = {}
    for index, (key, field) in enumerate(spec.fields.items()):
        annotation: Any = _PYTHON_TYPES[field.type]
        if field.enum is not None:
            annotation = Literal.__getitem__(field.enum)
        if field.required:
            definitions[f"f{index}"] = (annotation, Field(alias=key, description=field.description))
        else:
            definitions[f"f{index}"] = (
                annotation | None,
                Field(default=None, alias=key, description=field.description),
            )
    try:
        model = create_model(
            spec.name,
            __config__=ConfigDict(strict=True, extra=spec.extra, frozen=True),
            **definitions,
        )
    except (TypeError, ValueError) as exc:  # pydantic's schema errors are among these
        raise NodeValidationError(
            f"NodeType record '{record.path}': cannot be baked: {type(exc).__name__}: {exc}",
            path=record.path,
        ) from exc
    return BakedNodeType(
        name=spec.name,
        path=record.path,
        version=record.version,
        spec=spec,
        model=model,
        record=record,
    )
