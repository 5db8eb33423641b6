"""The path, identity and content rules of :mod:`rxmesh.model`, in one place.

Private: the names a user needs are public from :mod:`rxmesh.model` (import them from there),
whose docstring states the rules. This module holds the checks themselves, which the pydantic
models of :mod:`rxmesh.model` and every layer that validates a path, an id or node content call,
and the one-pass shortcuts (:data:`PLAIN_PATH`, :func:`content_certainly_fits`) that the layers
checking many nodes at once take before the rule.
"""

from __future__ import annotations

import re

from rxmesh.exceptions import InvalidPathError, NodeValidationError

__all__ = [
    "MAX_CONTENT_BYTES",
    "MAX_CONTENT_DEPTH",
    "MAX_CONTENT_INT_DIGITS",
    "MAX_LABEL_LENGTH",
    "MAX_PARTITION_LENGTH",
    "MAX_PATH_DEPTH",
    "MAX_PATH_LENGTH",
    "MAX_REQUEST_ID_LENGTH",
    "MAX_SEGMENT_LENGTH",
    "MAX_USER_ID_LENGTH",
    "USER_ID_RULE",
    "content_certainly_fits",
    "is_reserved_path",
    "partition_of",
    "validate_content",
    "validate_label",
    "validate_path",
    "validate_request_id",
    "validate_stored_text",
    "validate_user_id",
]

MAX_PATH_LENGTH = 512
MAX_PATH_DEPTH = 16
MAX_SEGMENT_LENGTH = 128
MAX_PARTITION_LENGTH = 48
MAX_CONTENT_BYTES = 1_000_000
"""Largest node content accepted, in bytes of its JSON text."""
MAX_CONTENT_DEPTH = 64
"""Deepest nesting of node content accepted (objects and arrays)."""
MAX_CONTENT_INT_DIGITS = 640
"""Most decimal digits of an integer in node content. Every Python process turns an integer of
this many digits into text and back whatever its ``sys.set_int_max_str_digits`` (640 is the
lowest limit it accepts), so each reader of the store decodes the row; PostgreSQL's ``jsonb``
holds 131,072 digits, so both stores keep every integer this rule lets through."""
_INT_LIMIT = 10**MAX_CONTENT_INT_DIGITS

MAX_USER_ID_LENGTH = MAX_SEGMENT_LENGTH
"""Longest user id: it is a path segment (of the grant ``<partition>/_access/<user>``)."""
MAX_REQUEST_ID_LENGTH = 128
"""Longest request id (the store keeps it with the row)."""
MAX_LABEL_LENGTH = 256
"""Longest free-text identity label (``on_behalf_of``; a stored ``created_by``)."""

USER_ID_RULE = (
    f"a user id is 1 to {MAX_USER_ID_LENGTH} characters of [A-Za-z0-9._-], not '.' or '..', "
    "and does not start with '_' (it names the grant '<partition>/_access/<user>')"
)
"""The user-id rule, as every refusal of a user id states it."""

_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
PLAIN_PATH = re.compile(
    f"[A-Za-z0-9-][A-Za-z0-9._-]{{0,{min(MAX_PARTITION_LENGTH, MAX_SEGMENT_LENGTH) - 1}}}"
    f"(?:/[A-Za-z0-9-][A-Za-z0-9._-]{{0,{MAX_SEGMENT_LENGTH - 1}}}){{0,{MAX_PATH_DEPTH - 1}}}"
)
"""Paths that certainly obey the path rule with no reserved segment (no segment starts with
``_`` or ``.``, none is too long, not too many): one regex match instead of the rule's loop.
Any other path is judged by the rule itself, which names the problem (or accepts it: this is a
shortcut, never a second rule)."""


def _shown(path: object) -> str:
    text = repr(path)
    return text if len(text) <= 80 else text[:77] + "..."


def validate_path(path: object, *, allow_reserved: bool = True) -> str:
    """Return ``path`` if it obeys the path rules, else raise :class:`InvalidPathError` naming it.

    Args:
        path: the candidate path.
        allow_reserved: whether ``_``-prefixed (system) segments are accepted below the partition.
    """
    if not isinstance(path, str):
        raise InvalidPathError(f"path {_shown(path)} is not a string", path=None)
    if len(path) <= MAX_PATH_LENGTH and PLAIN_PATH.fullmatch(path) is not None:
        return path  # the common case, in one match (see PLAIN_PATH)
    return path_by_rule(path, allow_reserved=allow_reserved)


def path_by_rule(path: str, *, allow_reserved: bool = True) -> str:
    """:func:`validate_path` without its shortcut: the rule itself, segment by segment."""
    if not path:
        raise InvalidPathError("path '' is empty", path=path)
    if len(path) > MAX_PATH_LENGTH:
        raise InvalidPathError(
            f"path {_shown(path)} is {len(path)} characters long; at most {MAX_PATH_LENGTH}",
            path=path,
        )
    segments = path.split("/")
    if len(segments) > MAX_PATH_DEPTH:
        raise InvalidPathError(
            f"path {_shown(path)} has {len(segments)} segments; at most {MAX_PATH_DEPTH}",
            path=path,
        )
    for index, segment in enumerate(segments):
        if not segment:
            raise InvalidPathError(f"path {_shown(path)} has an empty segment", path=path)
        if segment in {".", ".."} or not _SEGMENT.fullmatch(segment):
            raise InvalidPathError(
                f"path {_shown(path)}: segment {_shown(segment)} must be made of "
                "[A-Za-z0-9._-] and not be '.' or '..'",
                path=path,
            )
        if len(segment) > MAX_SEGMENT_LENGTH:
            raise InvalidPathError(
                f"path {_shown(path)}: a segment is longer than {MAX_SEGMENT_LENGTH} characters",
                path=path,
            )
        if segment.startswith("_") and (index == 0 or not allow_reserved):
            raise InvalidPathError(
                f"path {_shown(path)}: segment {_shown(segment)} is reserved for system records",
                path=path,
            )
    if len(segments[0]) > MAX_PARTITION_LENGTH:
        raise InvalidPathError(
            f"path {_shown(path)}: partition name longer than {MAX_PARTITION_LENGTH} characters",
            path=path,
        )
    return path


def partition_of(path: str) -> str:
    """The partition (first segment) of a path."""
    return path.split("/", 1)[0]


def is_reserved_path(path: str) -> bool:
    """Whether any segment of ``path`` is a reserved (``_``-prefixed) system segment."""
    return any(segment.startswith("_") for segment in path.split("/"))


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_UNSTORABLE_OR_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _describe(found: str) -> str:
    if found == "\x00":
        return "contains a NUL character"
    if "\ud800" <= found <= "\udfff":
        return "contains a lone surrogate (not valid Unicode text)"
    return f"contains the control character U+{ord(found):04X}"


def _storable_text(text: str) -> str | None:
    """Why ``text`` cannot be stored (NUL, a lone surrogate), or ``None``."""
    found = _UNSTORABLE.search(text)
    return None if found is None else _describe(found.group())


def _text_problem(
    value: object, *, max_length: int, min_length: int = 0, control: bool = True
) -> str | None:
    """Why ``value`` is not acceptable text, or ``None``: not a string, too short or long, NUL,
    a lone surrogate, or (when ``control``) a control character (category Cc)."""
    if not isinstance(value, str):
        return f"is not a string (a {type(value).__name__})"
    if len(value) < min_length:
        return "is empty"
    if len(value) > max_length:
        return f"is {len(value)} characters long; at most {max_length}"
    found = (_UNSTORABLE_OR_CONTROL if control else _UNSTORABLE).search(value)
    return None if found is None else f"{_shown(value)} {_describe(found.group())}"


def _user_id_problem(user: object) -> str | None:
    problem = _text_problem(user, max_length=MAX_USER_ID_LENGTH, min_length=1)
    if problem is None:
        assert isinstance(user, str)
        if user in {".", ".."} or user.startswith("_") or not _SEGMENT.fullmatch(user):
            problem = f"{_shown(user)} is not a user id"
    return None if problem is None else f"{problem}; {USER_ID_RULE}"


def _request_id_problem(value: object) -> str | None:
    return _text_problem(value, max_length=MAX_REQUEST_ID_LENGTH, min_length=1)


def _label_problem(value: object) -> str | None:
    return _text_problem(value, max_length=MAX_LABEL_LENGTH)


def _refuse(field: str, problem: str | None, value: object) -> str:
    if problem is not None:
        raise NodeValidationError(f"{field}: {problem}")
    assert isinstance(value, str)
    return value


def validate_user_id(user: object, *, field: str = "user") -> str:
    """Return ``user`` if it is a user id, else raise :class:`NodeValidationError` naming ``field``.

    A user id is a path segment that is not reserved (see :data:`USER_ID_RULE`): it names the
    grant ``<partition>/_access/<user>``, so it may not add segments (``/``), climb (``..``),
    name a system record (``_owner``) or hold what a store cannot keep. An e-mail address is not a
    user id; map it to a stable id of your own.
    """
    return _refuse(field, _user_id_problem(user), user)


def validate_request_id(value: object, *, field: str = "request_id") -> str:
    """Return ``value`` if it is a request id (1 to :data:`MAX_REQUEST_ID_LENGTH` characters,
    no NUL, lone surrogate or control character), else raise :class:`NodeValidationError`."""
    return _refuse(field, _request_id_problem(value), value)


def validate_stored_text(value: object, *, field: str, max_length: int) -> str:
    """Return ``value`` if a store can keep it (no NUL, no lone surrogate, at most ``max_length``
    characters), else raise :class:`NodeValidationError` naming ``field``. The rule of a stored
    node's ``created_by`` and ``request_id``."""
    return _refuse(field, _text_problem(value, max_length=max_length, control=False), value)


def validate_label(value: object, *, field: str = "on_behalf_of") -> str:
    """Return ``value`` if it is an identity label (at most :data:`MAX_LABEL_LENGTH` characters,
    no NUL, lone surrogate or control character), else raise :class:`NodeValidationError`."""
    return _refuse(field, _label_problem(value), value)


def validate_content(path: str, content: object) -> None:
    """Refuse content a store cannot hold, naming where: nesting deeper than
    :data:`MAX_CONTENT_DEPTH`, NUL characters or lone surrogates in a string or key, NaN or
    infinite numbers, integers of more than :data:`MAX_CONTENT_INT_DIGITS` digits, or a value
    that is not JSON. Raises
    :class:`~rxmesh.exceptions.NodeValidationError` naming the node and the place."""
    stack: list[tuple[object, str, int]] = [(content, "content", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_CONTENT_DEPTH:
            raise NodeValidationError(
                f"node '{path}': {where} is nested deeper than {MAX_CONTENT_DEPTH} levels",
                path=path,
            )
        if isinstance(value, str):
            problem = _storable_text(value)
            if problem:
                raise NodeValidationError(f"node '{path}': {where} {problem}", path=path)
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            if not -_INT_LIMIT < value < _INT_LIMIT:  # compared, never turned into text
                raise NodeValidationError(
                    f"node '{path}': {where} is an integer of more than "
                    f"{MAX_CONTENT_INT_DIGITS} digits; at most {MAX_CONTENT_INT_DIGITS}",
                    path=path,
                )
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise NodeValidationError(
                    f"node '{path}': {where} is {value!r}, which JSON cannot hold", path=path
                )
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise NodeValidationError(
                        f"node '{path}': {where} has a non-string key {key!r}", path=path
                    )
                problem = _storable_text(key)
                if problem:
                    raise NodeValidationError(
                        f"node '{path}': a key in {where} {problem}", path=path
                    )
                stack.append((item, f"{where}.{key[:40]}", depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
        else:
            raise NodeValidationError(
                f"node '{path}': {where} is a {type(value).__name__}, not JSON", path=path
            )


_INT_BOUND = 1 << 63
"""Integers of fewer than 64 bits take at most 20 characters of JSON."""
_SCALAR_BYTES: dict[type, int] = {bool: 5, type(None): 4}
"""The most JSON characters a value of these types takes."""


def content_certainly_fits(content: object) -> bool:
    """``True`` only if :func:`validate_content` accepts ``content`` and its JSON text
    (``json.dumps(content, ensure_ascii=False)`` in UTF-8) is at most :data:`MAX_CONTENT_BYTES`;
    ``False`` means "judge it by those rules" (it may well be valid).

    One walk without a location string per value and without encoding: exact ``dict`` (string
    keys), ``list``, ``str``, ``int`` of fewer than 64 bits, finite ``float``, ``bool`` and
    ``None`` only (a subclass, a tuple, anything else: ``False``), no container at a depth of
    :data:`MAX_CONTENT_DEPTH` or more, no NUL or lone surrogate, and an upper bound of the JSON
    text's size within the limit: a string's character is at most 6 bytes (``\\u001f``), an
    integer 20 characters, a float 24, each container's brackets 2, separators 2 an item."""
    budget = MAX_CONTENT_BYTES
    stack: list[tuple[object, int]] = [(content, 0)]
    while stack:
        value, depth = stack.pop()
        if type(value) is dict:
            if depth >= MAX_CONTENT_DEPTH:
                return False
            budget -= 2
            for key, item in value.items():
                if type(key) is not str or not (
                    (key.isascii() and "\x00" not in key) or _fine_text(key)
                ):
                    return False
                if type(item) is str and item.isascii() and "\x00" not in item:
                    budget -= 6 * (len(key) + len(item)) + 8  # (the common case, inline)
                    continue
                budget -= 6 * len(key) + 6  # quotes, ": " and ", "
                cost = _scalar_cost(item)
                if cost < 0:
                    if type(item) is not dict and type(item) is not list:
                        return False
                    stack.append((item, depth + 1))
                else:
                    budget -= cost
        elif type(value) is list:
            if depth >= MAX_CONTENT_DEPTH:
                return False
            budget -= 2
            for item in value:
                cost = _scalar_cost(item)
                if cost < 0:
                    if type(item) is not dict and type(item) is not list:
                        return False
                    stack.append((item, depth + 1))
                else:
                    budget -= cost + 2
        else:
            cost = _scalar_cost(value)
            if cost < 0:
                return False
            budget -= cost
        if budget < 0:
            return False
    return True


def _fine_text(text: str) -> bool:
    """No NUL, no lone surrogate (``_storable_text`` says ``None``), judged cheaply."""
    if text.isascii():
        return "\x00" not in text
    return _UNSTORABLE.search(text) is None


def _scalar_cost(value: object) -> int:
    """An upper bound of a plain scalar's JSON size in bytes; -1 for anything else (a container,
    a subclass, a string that cannot be stored, a non-finite float, a large integer)."""
    if type(value) is str:
        return 6 * len(value) + 2 if _fine_text(value) else -1
    if type(value) is int:
        return 20 if -_INT_BOUND < value < _INT_BOUND else -1
    if type(value) is float:
        return 24 if value - value == 0.0 else -1  # NaN and the infinities give NaN
    return _SCALAR_BYTES.get(type(value), -1)
