"""Pydantic models built from values already known to be valid, without a validation pass.

rxmesh builds some models on hot paths from values it has checked or made itself: the rows of
its own tables (validated when they were written), the answers of the terminal arm, the
announcements of its change feed, the nodes it stamps. ``model_construct`` would skip the
validation too, but it still defaults every field one by one; :func:`trusted` sets what
``model_construct`` sets, given every field's value, in one step. It never checks anything:
a caller passes only values of the declared types, under the field names, in declaration order.

The four attributes are set through ``BaseModel``'s own slot descriptors (what
``object.__setattr__`` finds for them), fetched once rather than looked up by name for each
node (docs/performance.md has the cost of each).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = [
    "fields_of",
    "set_dict",
    "set_extra",
    "set_fields_set",
    "set_private",
    "trusted",
]

M = TypeVar("M", bound=BaseModel)

_new = object.__new__
set_dict = BaseModel.__dict__["__dict__"].__set__
"""``object.__setattr__(instance, "__dict__", values)``, without the lookup by name."""
set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def fields_of(model: type[BaseModel]) -> set[str]:
    """``model``'s field names, as the one field set of models built with all of them given."""
    return set(model.model_fields)


def trusted(model: type[M], values: dict[str, Any], fields_set: set[str]) -> M:
    """An instance of ``model`` holding ``values`` (its ``__dict__``, taken as is, not copied)
    with ``fields_set`` as its set fields: what ``model.model_construct(**values)`` makes when
    ``values`` names every field in declaration order (``fields_set`` may be shared between
    instances: pydantic copies it before changing it)."""
    instance = _new(model)
    set_dict(instance, values)
    set_fields_set(instance, fields_set)
    set_extra(instance, None)
    set_private(instance, None)
    return instance
