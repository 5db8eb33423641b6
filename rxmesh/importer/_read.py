"""Reading an import directory as a stream of windows (the import's input boundary).

The importer's cost per node is spent here once: JSON decoding, the entry's shape (an object,
known keys, a string path, a string node type, something to store), the path rule, and duplicate
detection. Nodes that pass are built without pydantic validation (:func:`trusted_node`): the mesh
re-checks every node of a request before any store call (path, node type, content) and refuses
the whole window naming the first offender; only then does :func:`check_node` run the full
validation entry by entry, so every bad entry is named with its file and line and the rest of its
window still goes in. Nothing is held but the window being read: a path per node already read is
kept to name duplicates (``first at FILE:LINE``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from rxmesh._util.trusted import trusted
from rxmesh.importer._files import Source, open_regular, sources
from rxmesh.importer._json import (
    DEFAULT_MAX_ENTRY_BYTES,
    Entry,
    ImportProblem,
    read_document,
    read_lines,
)
from rxmesh.model import (
    MAX_CONTENT_BYTES,
    NODE_TYPE_PATTERN,
    MeshNode,
    validate_content,
    validate_path,
)

__all__ = [
    "DEFAULT_MAX_ENTRY_BYTES",
    "ImportItem",
    "ImportProblem",
    "Window",
    "check_node",
    "count_entries",
    "read_directory",
    "read_stream",
    "read_windows",
    "trusted_node",
]

_KEYS = frozenset({"path", "node_type", "content"})
_GIVEN = {"path", "node_type", "content"}
"""The fields an entry gives (what ``MeshNode(path=..., node_type=..., content=...)`` sets):
one set shared by every node built here (a frozen model never adds to it, and a copy of one
copies it first), as :func:`rxmesh.mesh._core.stamp` shares its own."""

_NODE_TYPE = re.compile(NODE_TYPE_PATTERN)
_NODE_TYPES_SEEN: set[str] = set()
"""Node types that matched :data:`NODE_TYPE_PATTERN` (an import names a few, once a node each):
a set lookup instead of a match. Bounded by :data:`_NODE_TYPES_KEPT`."""
_NODE_TYPES_KEPT = 1024


@dataclass(frozen=True, slots=True)
class ImportItem:
    """One node to import and where it was read (``line`` is 1-based)."""

    node: MeshNode
    file: str
    line: int | None


@dataclass(slots=True)
class Window:
    """Up to ``window`` entries read in file order: the nodes that passed the input checks (with
    the file and line of each, side by side) and the problems met among them (each naming its
    file and line)."""

    nodes: list[MeshNode] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    lines: list[int | None] = field(default_factory=list)
    problems: list[ImportProblem] = field(default_factory=list)

    @property
    def items(self) -> list[ImportItem]:
        """The nodes with where each was read (built when asked: a window that lands whole
        needs none)."""
        return list(map(ImportItem, self.nodes, self.files, self.lines))


def trusted_node(path: str, node_type: str | None, content: object) -> MeshNode:
    """A :class:`MeshNode` built without pydantic validation, for an entry whose shape and path
    were checked here; its node type and content are checked by the mesh before any write (and
    by :func:`check_node` when the mesh refuses), so the validation is not paid twice
    (docs/performance.md has the cost of each). The instance is what
    ``MeshNode(path=..., node_type=..., content=...)`` makes of valid values."""
    fields = {
        "path": path,
        "node_type": node_type,
        "content": content,
        "created_by": None,
        "created_at": None,
        "version": 0,
        "request_id": None,
    }
    return trusted(MeshNode, fields, _GIVEN)


def check_node(node: MeshNode) -> MeshNode:
    """The full validation of an entry's node (what the mesh checks, and pydantic's model
    rules), entry by entry; returns the validated node, raises ``ValueError`` with the reason."""
    if node.content is not None:
        size = len(json.dumps(node.content, ensure_ascii=False).encode())
        if size > MAX_CONTENT_BYTES:
            raise ValueError(f"content is {size} bytes; at most {MAX_CONTENT_BYTES}")
    try:
        checked = MeshNode(path=node.path, node_type=node.node_type, content=node.content)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'node'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise ValueError(problems) from exc
    validate_content(node.path, node.content)  # NUL, lone surrogates, NaN, depth
    return checked


class _BadEntry(ValueError):
    """An entry that does not describe a node (the reason is the message)."""


def _entry(value: object, prefix: str) -> MeshNode:
    """The node an entry describes, its shape and path checked; raises ValueError (the reason)."""
    if not isinstance(value, dict):
        raise _BadEntry(f"expected a node object, got {type(value).__name__}")
    if not value.keys() <= _KEYS:
        unknown = sorted(set(value) - _KEYS)
        raise ValueError(
            f"unknown key(s) {', '.join(map(repr, unknown))}; allowed: path, node_type, content"
        )
    path = value.get("path")
    if type(path) is not str:
        raise _BadEntry("'path' is required and must be a string")
    full = prefix + path
    validate_path(full, allow_reserved=False)  # one regex match for a plain path
    node_type = value.get("node_type")
    if node_type is not None and type(node_type) is not str:
        raise _BadEntry(f"'node_type' must be a string, got {type(node_type).__name__}")
    content = value.get("content")
    if node_type is None and content is None:
        raise ValueError(f"node '{full}' has neither a node_type nor content")
    node = trusted_node(full, node_type, content)
    if node_type is not None and node_type not in _NODE_TYPES_SEEN:
        if _NODE_TYPE.fullmatch(node_type) is None:
            check_node(node)  # raises, saying why as the model does
        elif len(_NODE_TYPES_SEEN) < _NODE_TYPES_KEPT:
            _NODE_TYPES_SEEN.add(node_type)
    return node


def _check_partition(partition: str | None) -> str:
    if partition is None:
        return ""
    validate_path(partition, allow_reserved=False)
    if "/" in partition:
        raise ValueError(f"--partition {partition!r} must be one segment")
    return partition + "/"


def read_windows(
    directory: str | os.PathLike[str],
    *,
    partition: str | None = None,
    window: int = 1000,
    max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
) -> tuple[int, Iterator[Window]]:
    """Read every ``*.json`` / ``*.jsonl`` file under ``directory`` (recursively, in sorted
    order) as a stream of :class:`Window` of ``window`` nodes each (the last may hold fewer),
    with the problems met while reading them, in file order; only the window being read is
    held. An entry longer than ``max_entry_bytes`` is a problem, not loaded; a name that is not
    a regular file, or a symbolic link leading out of ``directory``, is a problem, not read.

    Returns:
        the number of files, and the windows (a lazy iterator).

    Raises:
        NotADirectoryError: ``directory`` is not a directory.
        InvalidPathError: ``partition`` is not a valid partition name.
    """
    files, stream = read_stream(
        directory, partition=partition, window=window, max_entry_bytes=max_entry_bytes
    )
    return files, (read for read in stream if read is not None)


def read_stream(
    directory: str | os.PathLike[str],
    *,
    partition: str | None = None,
    window: int = 1000,
    pause_every: int = 0,
    max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
) -> tuple[int, Iterator[Window | None]]:
    """:func:`read_windows`, with a ``None`` between two windows' entries every
    ``pause_every`` entries read (0: never): where an asynchronous reader lets its event loop
    run (the windows already sent go on meanwhile). The windows are the same."""
    root = Path(directory)
    if not root.is_dir():
        raise NotADirectoryError(f"{directory} is not a directory")
    if max_entry_bytes < 1:
        raise ValueError(f"max_entry_bytes must be at least 1, got {max_entry_bytes}")
    prefix = _check_partition(partition)
    listed = sources(root)
    files = sum(source.refused is None for source in listed)
    return files, _windows(listed, prefix, window, pause_every, max_entry_bytes)


def _entries(source: Source, limit: int) -> Iterator[Entry]:
    if source.refused is not None:
        return iter((ImportProblem(source.shown, None, source.refused),))
    read = read_lines if source.path.suffix == ".jsonl" else read_document
    return read(source.path, source.shown, limit)


def _windows(
    sources: list[Source], prefix: str, window: int, pause_every: int, limit: int
) -> Iterator[Window | None]:
    names: list[str] = []
    first_seen: dict[str, int] = {}  # path -> file index << 32 | line (0: a lone .json value)
    current = Window()
    pause = countdown = pause_every or -1  # -1: never 0, never a pause
    for source in sources:
        shown = source.shown
        names.append(shown)
        mark = (len(names) - 1) << 32
        for entry in _entries(source, limit):
            if isinstance(entry, ImportProblem):
                current.problems.append(entry)
            else:
                line, value = entry
                try:
                    node = _entry(value, prefix)
                except ValueError as exc:  # InvalidPathError is a ValueError too
                    current.problems.append(ImportProblem(shown, line, str(exc)))
                else:
                    path = node.path
                    earlier = first_seen.get(path)
                    if earlier is None:
                        first_seen[path] = mark | (line or 0)
                        current.nodes.append(node)
                        current.files.append(shown)
                        current.lines.append(line)
                    else:
                        first, at = names[earlier >> 32], earlier & 0xFFFFFFFF
                        where = f"{first}:{at}" if at else first
                        reason = f"duplicate path '{path}' (first at {where})"
                        current.problems.append(ImportProblem(shown, line, reason, path))
            if len(current.nodes) >= window:
                yield current
                current = Window()
                countdown = pause
            elif countdown:
                countdown -= 1
            else:
                yield None
                countdown = pause
    if current.nodes or current.problems:
        yield current


def read_directory(
    directory: str | os.PathLike[str], *, partition: str | None = None
) -> tuple[list[ImportItem], list[ImportProblem], int]:
    """Read every ``*.json`` / ``*.jsonl`` file under ``directory`` at once (see
    :func:`read_windows` for the stream the import itself reads).

    Returns:
        the nodes to import (in file order), the problems found (file, line, reason), and the
        number of files read. A duplicate path is a problem naming the first occurrence.

    Raises:
        NotADirectoryError: ``directory`` is not a directory.
        InvalidPathError: ``partition`` is not a valid partition name.
    """
    files, windows = read_windows(directory, partition=partition)
    items: list[ImportItem] = []
    problems: list[ImportProblem] = []
    for window in windows:
        items.extend(window.items)
        problems.extend(window.problems)
    return items, problems, files


def count_entries(
    directory: str | os.PathLike[str], *, max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES
) -> int:
    """How many entries :func:`read_windows` will read, each node and each problem (the total
    of a progress bar): the non-blank lines of the JSON-lines files, read at the speed of the
    disk, and the items of each ``.json`` list, streamed as the import streams them."""
    total = 0
    for source in sources(Path(directory)):
        if source.refused is not None or source.path.suffix != ".jsonl":
            total += sum(1 for _ in _entries(source, max_entry_bytes))
            continue
        try:
            with open_regular(source.path) as handle:
                last = b"\n"
                while chunk := handle.read(1 << 20):
                    total += chunk.count(b"\n") - chunk.count(b"\n\n")
                    last = chunk[-1:]
                total += last != b"\n"
        except OSError:
            total += 1  # read_windows reports it
    return total
