"""Request parsing: a model, a mapping or JSON text in; a checked request (or a refusal naming
the field) out, before any store call.

JSON text is decoded once by Python's json with a hook that marks a repeated key (pydantic's
parser would silently keep the last one), a lone surrogate is located by walking the decoded
value, and the string rules every store can keep are re-checked on the built request
(:func:`check_strings`) so a construction that skipped validation cannot slip past them.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from rxmesh.exceptions import InvalidPathError, NodeValidationError
from rxmesh.model import (
    MAX_LABEL_LENGTH,
    MAX_REQUEST_ID_LENGTH,
    NODE_TYPE_PATTERN,
    SYSTEM_USER,
    MeshNode,
    validate_label,
    validate_path,
    validate_request_id,
    validate_stored_text,
    validate_user_id,
)
from rxmesh.operations import (
    CreateNodeRequest,
    CreateNodesRequest,
    DeleteNodeRequest,
    MoveNodeRequest,
    RejectionReason,
    UpdateNodeRequest,
)

__all__ = [
    "CHECK_STEP",
    "check_strings",
    "entry_string_checks",
    "in_one_go",
    "parse",
    "parse_failure",
    "request_id_of",
    "request_string_checks",
    "shown_key",
    "stepwise",
    "string_checks",
]

R = TypeVar("R", bound=BaseModel)

_Request = (
    CreateNodeRequest | CreateNodesRequest | UpdateNodeRequest | DeleteNodeRequest | MoveNodeRequest
)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_NODE_TYPE = re.compile(NODE_TYPE_PATTERN)
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,40}")
_PATH_FIELDS = (("node", "path"), ("nodes", "path"), ("path",), ("source",), ("target",))


class _Repeated(dict[str, Any]):
    """A decoded JSON object in which ``key`` appeared more than once (the last value kept)."""

    key: str = ""


def _decode_json(text: str | bytes | bytearray) -> tuple[Any, bool]:
    """Decode request JSON as Python's json does, marking every object that repeats a key.

    Returns the value and whether any key repeated; raises ``ValueError`` / ``RecursionError``
    for text Python cannot decode.
    """
    repeated = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal repeated
        decoded = dict(items)
        if len(decoded) == len(items):
            return decoded
        marked, seen = _Repeated(decoded), set()
        for key, _ in items:
            if key in seen:
                marked.key = key
                break
            seen.add(key)
        repeated = True
        return marked

    return json.loads(text, object_pairs_hook=pairs), repeated


def _walk(data: object) -> Iterator[tuple[tuple[str | int, ...], object]]:
    """Every value of a decoded JSON document with its location, depth-first, without recursion."""
    stack: list[tuple[tuple[str | int, ...], object]] = [((), data)]
    while stack:
        location, value = stack.pop()
        yield location, value
        if isinstance(value, dict):
            stack.extend(((*location, key), item) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend(((*location, i), item) for i, item in reversed(list(enumerate(value))))


def _where(location: Sequence[object], empty: str = "request") -> str:
    """A field location as text (``access.user``, ``nodes.0.path``), safe to print and bounded."""
    parts = [
        str(part) if isinstance(part, int) or _PLAIN_KEY.fullmatch(str(part)) else repr(part)[:42]
        for part in location
    ]
    text = ".".join(parts) or empty
    return text if len(text) <= 120 else text[:117] + "..."


def _holds_lone_surrogate(data: object) -> bool:
    for _, value in _walk(data):
        if isinstance(value, str) and _LONE_SURROGATE.search(value):
            return True
        if isinstance(value, dict) and any(_LONE_SURROGATE.search(key) for key in value):
            return True
    return False


def _parse_json(model: type[R], text: str | bytes | bytearray) -> R:
    """Build a request from JSON text: refuse a repeated key (naming it and where) before
    pydantic's parser, which would silently keep the last one."""
    try:
        data, repeated = _decode_json(text)
    except (ValueError, RecursionError):
        return model.model_validate_json(text)  # not JSON: pydantic's error says where and why
    if repeated:
        location, key = next(
            ((loc, v.key) for loc, v in _walk(data) if isinstance(v, _Repeated)), ((), "?")
        )
        raise NodeValidationError(
            f"{_where(location)}: the key {shown_key(key)} appears more than once "
            "(JSON text may not repeat a key)"
        )
    try:
        return model.model_validate_json(text)
    except ValidationError:
        if not _holds_lone_surrogate(data):
            raise
    # pydantic's JSON parser cannot read a lone surrogate, so it cannot say where one is:
    # validate the decoded value as a mapping is validated, so the refusal names the field.
    return model.model_validate(data)


def shown_key(key: str) -> str:
    text = repr(key)
    return text if len(text) <= 42 else text[:39] + "..."


CHECK_STEP = 1000
"""Nodes of a request checked per loop step when the checks run stepwise (a bulk's)."""


T = TypeVar("T")


class _Result(Generic[T]):
    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


def _advance(steps: Generator[None, None, T]) -> _Result[T] | None:
    """One step of a stepwise check; its result once it has ended."""
    try:
        next(steps)
    except StopIteration as done:
        return _Result(done.value)
    return None


def in_one_go(steps: Generator[None, None, T]) -> T:
    """Run a stepwise check to its end at once; its result."""
    while (ended := _advance(steps)) is None:
        pass
    return ended.value


async def stepwise(steps: Generator[None, None, T]) -> T:
    """Run a stepwise check, the loop getting a turn between two of its steps; its result."""
    while (ended := _advance(steps)) is None:  # noqa: ASYNC110 - a turn for the loop, no wait
        await asyncio.sleep(0)
    return ended.value


def check_strings(req: BaseModel) -> None:
    """:func:`string_checks` in one go."""
    for _ in string_checks(req):  # a for loop, not in_one_go: the cheaper on every create
        pass


def string_checks(req: BaseModel) -> Generator[None, None, None]:
    """Refuse, naming the field, a string no store can keep or the mesh must not pass on
    (yields between two steps of :data:`CHECK_STEP` nodes; the caller decides what a step is).

    The models refuse these already; this re-checks, cheaply, what a construction that skips
    validation (``model_construct``, ``model_copy(update=...)``) let through, and adds the one
    rule a stored row does not obey: a ``created_by`` that names the requester (``access`` is
    absent) is a user id. Elsewhere a node's ``created_by`` and ``request_id`` are ignored (the
    mesh stamps its own) and need only be storable (they reach the journal), so a node read back
    from a store can be sent again. A path's reserved segments are the system's, as in
    ``MeshCore.fail_fast``, which judges content later (still before any store call).
    """
    if not isinstance(req, _Request):
        return
    request_string_checks(req)
    # Where a field is ("nodes.3.path") is worked out only for a value that fails its check: a
    # 10,000-node bulk builds no location string for a valid node.
    nodes: Sequence[MeshNode] = ()
    if isinstance(req, CreateNodesRequest):
        nodes = req.nodes
    elif isinstance(req, CreateNodeRequest | UpdateNodeRequest):
        nodes = (req.node,)
    bulk = isinstance(req, CreateNodesRequest)

    def where(index: int, field: str) -> str:
        return f"nodes.{index}.{field}" if bulk else f"node.{field}"

    # The requester, as the verbs resolve it: the access, else the (first) node's created_by.
    requester = req.access.user if req.access is not None else None
    if requester is None and nodes:
        requester = nodes[0].created_by
    reserved = requester == SYSTEM_USER
    if isinstance(req, DeleteNodeRequest):
        _check_path(req.path, "path", reserved)
    elif isinstance(req, MoveNodeRequest):
        _check_path(req.source, "source", reserved)
        _check_path(req.target, "target", reserved)
    for index, node in enumerate(nodes):
        if index and not index % CHECK_STEP:
            yield
        try:
            validate_path(node.path, allow_reserved=reserved)
        except InvalidPathError as exc:
            raise InvalidPathError(f"{where(index, 'path')}: {exc}", path=exc.path) from exc
    for index, node in enumerate(nodes):
        if index and not index % CHECK_STEP:
            yield
        _node_strings(node, index, where, names_requester=index == 0 and req.access is None)


def request_string_checks(
    req: CreateNodeRequest
    | CreateNodesRequest
    | UpdateNodeRequest
    | DeleteNodeRequest
    | MoveNodeRequest,
) -> None:
    """The checks of :func:`string_checks` on the request's own fields (its id, its access)."""
    validate_request_id(req.request_id, field="request_id")
    if req.access is not None:
        validate_user_id(req.access.user, field="access.user")
        if req.access.on_behalf_of is not None:
            validate_label(req.access.on_behalf_of, field="access.on_behalf_of")


def entry_string_checks(req: CreateNodesRequest, index: int) -> None:
    """:func:`string_checks` of the bulk's entry ``index`` alone (its path, then its strings),
    raising what that would raise for it: what finds the first offender of a refused bulk. The
    request's own fields are not judged here."""
    node = req.nodes[index]
    requester = req.access.user if req.access is not None else req.nodes[0].created_by
    try:
        validate_path(node.path, allow_reserved=requester == SYSTEM_USER)
    except InvalidPathError as exc:
        raise InvalidPathError(f"nodes.{index}.path: {exc}", path=exc.path) from exc
    _node_strings(node, index, _bulk_where, names_requester=index == 0 and req.access is None)


def _bulk_where(index: int, field: str) -> str:
    return f"nodes.{index}.{field}"


def _node_strings(
    node: MeshNode, index: int, where: Callable[[int, str], str], *, names_requester: bool
) -> None:
    created_by, request_id, node_type = node.created_by, node.request_id, node.node_type
    if created_by is not None:
        if names_requester:
            _named(validate_user_id, created_by, where, index, "created_by")
        else:
            _named(_stored_label, created_by, where, index, "created_by")
    if request_id is not None:
        _named(_stored_request_id, request_id, where, index, "request_id")
    if node_type is not None and (
        not isinstance(node_type, str) or not _NODE_TYPE.fullmatch(node_type)
    ):
        raise NodeValidationError(
            f"{where(index, 'node_type')}: {shown_key(str(node_type))} is not a node type "
            "name (a letter, then letters, digits, '_ . : -'; at most 128 characters)"
        )


def _check_path(path: str, field: str, reserved: bool) -> None:
    try:
        validate_path(path, allow_reserved=reserved)
    except InvalidPathError as exc:
        raise InvalidPathError(f"{field}: {exc}", path=exc.path) from exc


def _stored_label(value: object, *, field: str) -> str:
    return validate_stored_text(value, field=field, max_length=MAX_LABEL_LENGTH)


def _stored_request_id(value: object, *, field: str) -> str:
    return validate_stored_text(value, field=field, max_length=MAX_REQUEST_ID_LENGTH)


def _named(
    check: Callable[..., str],
    value: object,
    where: Callable[[int, str], str],
    index: int,
    field: str,
) -> None:
    """``check(value, field=where(index, field))``, the location worked out only if ``value``
    fails (the check runs again with it, so the refusal's text names where the value is)."""
    try:
        check(value, field="")
    except NodeValidationError:
        check(value, field=where(index, field))
        raise


def parse(model: type[R], request: object, *, check: bool = True) -> R:
    """Build a request from a model, a mapping or JSON text and check its strings (``check``;
    else the caller runs :func:`string_checks` itself, in one go or :func:`stepwise`).

    Raises ``ValidationError`` (the model refused it) or :class:`NodeValidationError` /
    :class:`InvalidPathError` naming the field (a repeated JSON key, a string rule).
    """
    req: R
    if isinstance(request, model):
        req = request
    elif isinstance(request, str | bytes | bytearray):
        req = _parse_json(model, request)
    else:
        req = model.model_validate(request)
    if check:
        check_strings(req)
    return req


def parse_failure(error: ValidationError | ValueError) -> tuple[RejectionReason, str]:
    """Map a malformed request to INVALID_PATH or VALIDATION_FAILED, naming the field."""
    if isinstance(error, InvalidPathError):
        return RejectionReason.INVALID_PATH, str(error)
    if isinstance(error, NodeValidationError):
        return RejectionReason.VALIDATION_FAILED, str(error)
    if not isinstance(error, ValidationError):
        return RejectionReason.VALIDATION_FAILED, f"malformed request: {error}"
    problems = []
    reason = RejectionReason.VALIDATION_FAILED
    items = error.errors(include_url=False)
    for item in items:
        if item["type"] == "too_short" and item["loc"] == ("nodes",) and len(items) > 1:
            continue  # pydantic's echo of an entry refused below: "at least 1 item, not 0"
        fields = tuple(part for part in item["loc"] if not isinstance(part, int))
        if fields in _PATH_FIELDS:
            reason = RejectionReason.INVALID_PATH
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "json_invalid":
            problems.append(f"request is not valid JSON: {message}")
        else:
            problems.append(f"{_where(item['loc'])}: {message}")
    return reason, "; ".join(problems)


def request_id_of(request: object) -> str:
    """The id to answer a refused request with: its own when that is a valid id, else unknown."""
    value: object = None
    if isinstance(request, BaseModel):
        value = getattr(request, "request_id", None)
    elif isinstance(request, Mapping):
        value = request.get("request_id")
    elif isinstance(request, str | bytes | bytearray):
        try:
            data, _ = _decode_json(request)
        except (ValueError, RecursionError):  # refused already; the id is only a courtesy
            data = None
        if isinstance(data, dict) and not (
            isinstance(data, _Repeated) and data.key == "request_id"
        ):
            value = data.get("request_id")
    try:
        return validate_request_id(value)
    except NodeValidationError:
        return "unknown"
