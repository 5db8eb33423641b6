"""Reading an import directory as a stream of windows (the import's input boundary).

The importer's cost per node is spent here once: JSON decoding, the entry's shape (an object,
known keys, a string path, a string node type, something to store), the path rule, and duplicate
detection. Nodes that pass are built WITHOUT pydantic validation (:func:`trusted_node`): the mesh
re-checks every node of a request before any store call (path, node type, content) and refuses
the whole window naming the first offender; only then does :func:`check_node` run the full
validation entry by entry, so every bad entry is named with its file and line and the rest of its
window still goes in. Nothing is held but the window being read: a path per node already read is
kept to name duplicates (``first at FILE:LINE``).
"""

from __future__ import annotations

import codecs
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from pydantic import ValidationError

from rxmesh._model_rules import PLAIN_PATH
from rxmesh._trusted import trusted
from rxmesh.model import (
    MAX_CONTENT_BYTES,
    MAX_PATH_LENGTH,
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
_SUFFIXES = frozenset({".json", ".jsonl"})

_PLAIN_PATH = PLAIN_PATH
_NODE_TYPE = re.compile(NODE_TYPE_PATTERN)
_NODE_TYPES_SEEN: set[str] = set()
"""Node types that matched :data:`NODE_TYPE_PATTERN` (an import names a few, once a node each):
a set lookup instead of a match. Bounded by :data:`_NODE_TYPES_KEPT`."""
_NODE_TYPES_KEPT = 1024
_JSON_SPACE = " \t\n\r"
_scan_once: Callable[[str, int], tuple[object, int]] = vars(json.JSONDecoder())["scan_once"]
"""The decoder's own scanner (what ``raw_decode`` calls): ``StopIteration`` when no value
starts at the index, :class:`json.JSONDecodeError` for one that is cut or malformed."""
_BLOCK = 1 << 18
"""Bytes of a file read at once (256 KiB)."""

DEFAULT_MAX_ENTRY_BYTES = 8 << 20
"""The longest entry read (a line of a JSON-lines file, an item of a ``.json`` list, a lone
``.json`` value), 8 MiB: content a store keeps is at most ``MAX_CONTENT_BYTES`` (1 MB) as UTF-8
JSON, and escaping (``\\u0000`` for one byte) makes it at most six times that in a file. A longer
entry is reported, naming its file and line, and not loaded."""


@dataclass(frozen=True, slots=True)
class ImportItem:
    """One node to import and where it was read (``line`` is 1-based)."""

    node: MeshNode
    file: str
    line: int | None


@dataclass(frozen=True, slots=True)
class ImportProblem:
    """An entry that was not imported: where it is and why."""

    file: str
    line: int | None
    reason: str
    path: str | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.reason}"


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
    by :func:`check_node` when the mesh refuses). 1 us against 6 us validated. The instance is
    what ``MeshNode(path=..., node_type=..., content=...)`` makes of valid values."""
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
    if len(full) > MAX_PATH_LENGTH or _PLAIN_PATH.fullmatch(full) is None:
        validate_path(full, allow_reserved=False)
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


def _invalid(exc: json.JSONDecodeError) -> str:
    return f"invalid JSON: {exc.msg} (column {exc.colno})"


def _loads(text: str) -> object:
    """``json.loads(text)``, a third of its cost when the text is one JSON value (the decoder's
    scanner itself, which ``json.loads`` runs through two wrappers); otherwise ``json.loads``
    itself decides and its error names the column in ``text``."""
    stripped = text.strip(_JSON_SPACE)
    try:
        value, end = _scan_once(stripped, 0)
    except (StopIteration, json.JSONDecodeError):  # StopIteration: no value at the start
        return json.loads(text)
    return value if end == len(stripped) else json.loads(text)


def _open(file: Path) -> BinaryIO:
    """``file`` opened for reading if it is a regular file; raises ``OSError`` otherwise.

    ``O_NOFOLLOW``: a name swapped for a symbolic link after the directory was listed is not
    followed; ``O_NONBLOCK``: a name swapped for a FIFO does not block the open."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    descriptor = os.open(file, flags)
    try:
        kind = _kind(os.fstat(descriptor).st_mode)
        if kind is not None:
            raise OSError(f"not a regular file ({kind})")
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def _last_break(block: bytes) -> int:
    """The index after the last line break of ``block`` (0: none). A CR that ends the block is
    not counted: its LF may start the next block."""
    return max(block.rfind(b"\n"), block.rfind(b"\r", 0, len(block) - 1)) + 1


def _first_break(data: bytes) -> int:
    """The index after the first line break of ``data`` (CRLF is one break; -1: none)."""
    ends = [i for i in (data.find(b"\n"), data.find(b"\r")) if i >= 0]
    if not ends:
        return -1
    first = min(ends)
    return first + 2 if data[first : first + 2] == b"\r\n" else first + 1


def _too_long(limit: int) -> str:
    return f"longer than {limit} bytes: not loaded (an entry this long cannot be stored)"


def _lines(
    file: Path, shown: str, limit: int
) -> Iterator[tuple[int | None, object] | ImportProblem]:
    """A JSON-lines file, line by line (blank lines skipped): ``(line, value)`` or a problem.

    Read in blocks of :data:`_BLOCK` bytes; a line ends at LF, CRLF or a lone CR (what a text
    editor numbers), never at U+2028, which a JSON string may hold. A line cut by a block's end
    waits in one buffer that grows in place, so each byte is copied a bounded number of times;
    a line longer than ``limit`` bytes is reported and skipped to its end, never held whole.
    """
    try:
        handle = _open(file)
    except OSError as exc:
        yield ImportProblem(shown, None, f"cannot read: {exc}")
        return
    number = 0
    pending = bytearray()  # the start of a line the last block cut
    skipping = False  # inside a line over the limit, dropped up to its end
    after_cr = False  # that line ended with the last block's CR: drop an LF that follows
    with handle:
        while True:
            try:
                block = handle.read(_BLOCK)
            except OSError as exc:
                yield ImportProblem(shown, number + 1, f"cannot read: {exc}")
                return
            eof = not block
            if skipping and after_cr:
                skipping = after_cr = False
                block = block.removeprefix(b"\n")
            elif skipping:
                if eof:
                    return
                end = _first_break(block)
                if end < 0:
                    continue
                if end == len(block) and block.endswith(b"\r"):  # its LF may start the next
                    after_cr = True
                    continue
                skipping, block = False, block[end:]
            data = b""
            if eof:
                data = bytes(pending)
            elif not skipping:
                cut = _last_break(block)
                pending += block[:cut] if cut else block
                if cut:
                    data, pending = bytes(pending), bytearray(block[cut:])
            for raw in data.splitlines():
                number += 1
                if len(raw) > limit:
                    yield ImportProblem(shown, number, _too_long(limit))
                    continue
                entry = _line(raw, shown, number)
                if entry is not None:
                    yield entry
            if eof:
                return
            if len(pending) > limit:
                number += 1
                yield ImportProblem(shown, number, _too_long(limit))
                skipping, after_cr = True, pending.endswith(b"\r")
                pending.clear()


def _line(raw: bytes, shown: str, number: int) -> tuple[int, object] | ImportProblem | None:
    """One line's value (``None``: a blank line), or the problem with it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return ImportProblem(shown, number, f"not UTF-8: {exc}")
    if not text or text.isspace():
        return None
    try:
        return number, _loads(text)
    except json.JSONDecodeError as exc:
        return ImportProblem(shown, number, _invalid(exc))
    except RecursionError:
        return ImportProblem(shown, number, "invalid JSON: nested too deeply to read")


class _Text:
    """A ``.json`` file as text read a block at a time: ``text[at:]`` is what is not consumed
    yet, ``line`` the line number at ``at``. Consumed text is dropped as more is read, so what
    is held is one entry and a block."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.text = ""
        self.at = 0
        self.line = 1
        self.column = 0  # characters of its line before ``text[0]``
        self.ended = False

    def more(self) -> bool:
        """Read one more block (``False`` at the end of the file)."""
        if self.ended:
            return False
        block = self.handle.read(_BLOCK)
        self.ended = not block
        dropped = self.text[: self.at]  # (``line`` is already the line at ``at``)
        newline = dropped.rfind("\n")
        self.column = self.at - newline - 1 if newline >= 0 else self.column + self.at
        self.text = self.text[self.at :] + self.decoder.decode(block, final=self.ended)
        self.at = 0
        return bool(block)

    def skip_space(self) -> str:
        """Skip JSON whitespace; the next character, or ``""`` at the end of the file."""
        while True:
            text, at = self.text, self.at
            while at < len(text) and text[at] in _JSON_SPACE:
                at += 1
            self.line += text.count("\n", self.at, at)
            self.at = at
            if at < len(text):
                return text[at]
            if not self.more():
                return ""

    def take(self, count: int) -> None:
        self.at += count

    def value(self, limit: int) -> object:
        """The JSON value that starts here, read to its end (more blocks as needed, each time
        at least doubling what is held, so a long value is scanned a bounded number of times).

        Raises:
            json.JSONDecodeError: it is malformed, or cut by the end of the file.
            _EntryTooLong: it is longer than ``limit`` characters.
        """
        while True:
            try:
                value, end = _scan_once(self.text, self.at)
            except StopIteration:  # no value starts here
                if self.ended:
                    raise json.JSONDecodeError("Expecting value", self.text, self.at) from None
            except json.JSONDecodeError:
                if self.ended:
                    raise
            else:
                # A number cut by the block's end scans as a shorter number: only a value that
                # ends before the text does (or at the file's end) is whole.
                if end < len(self.text) or self.ended:
                    if end - self.at > limit:
                        raise _EntryTooLong
                    self.line += self.text.count("\n", self.at, end)
                    self.at = end
                    return value
            held = len(self.text) - self.at
            if held > limit:
                raise _EntryTooLong
            while len(self.text) - self.at < 2 * held + _BLOCK and self.more():
                pass

    def problem(self, shown: str, exc: json.JSONDecodeError) -> ImportProblem:
        """A decoding error raised on :attr:`text`, at its line and column in the file."""
        if exc.doc is not self.text:
            return ImportProblem(shown, None, _invalid(exc))
        line = self.line + exc.doc.count("\n", self.at, exc.pos)
        column = exc.colno + (self.column if exc.doc.rfind("\n", 0, exc.pos) < 0 else 0)
        return ImportProblem(shown, line, f"invalid JSON: {exc.msg} (column {column})")


class _EntryTooLong(Exception):
    pass


def _document(
    file: Path, shown: str, limit: int
) -> Iterator[tuple[int | None, object] | ImportProblem]:
    """A ``.json`` file: its one value, or a list's items each with its own line.

    A list is streamed: items are read a block at a time and yielded as they are read, so the
    list is never held whole. A problem (malformed JSON, an item longer than ``limit``
    characters) ends the file there, naming its line; the items before it were yielded.
    """
    try:
        handle = _open(file)
    except OSError as exc:
        yield ImportProblem(shown, None, f"cannot read: {exc}")
        return
    with handle:
        text = _Text(handle)
        try:
            yield from _items(text, limit)
        except json.JSONDecodeError as exc:
            yield text.problem(shown, exc)
        except _EntryTooLong:
            yield ImportProblem(shown, text.line, _too_long(limit).replace("bytes", "characters"))
        except RecursionError:
            yield ImportProblem(shown, text.line, "invalid JSON: nested too deeply to read")
        except (OSError, UnicodeDecodeError) as exc:
            yield ImportProblem(shown, None, f"cannot read: {exc}")


def _items(text: _Text, limit: int) -> Iterator[tuple[int | None, object]]:
    first = text.skip_space()
    if first != "[":
        line = text.line
        value = text.value(limit)
        _end_of_document(text)
        yield line, value
        return
    text.take(1)
    if text.skip_space() == "]":
        text.take(1)
        _end_of_document(text)
        return
    while True:
        line = text.line
        yield line, text.value(limit)
        after = text.skip_space()
        if after == "]":
            text.take(1)
            _end_of_document(text)
            return
        if after != ",":
            raise json.JSONDecodeError(
                "Expecting ',' delimiter" if after else "Expecting ']'", text.text, text.at
            )
        text.take(1)
        text.skip_space()


def _end_of_document(text: _Text) -> None:
    if text.skip_space():
        raise json.JSONDecodeError("Extra data", text.text, text.at)


def _kind(mode: int) -> str | None:
    """What a file of ``mode`` is when it is not a regular file (``None`` when it is)."""
    if stat.S_ISREG(mode):
        return None
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


@dataclass(frozen=True, slots=True)
class _Source:
    """A name under the import directory: the file to read, or why it is not read."""

    path: Path
    shown: str
    refused: str | None = None


def _sources(root: Path) -> list[_Source]:
    """Every ``*.json`` / ``*.jsonl`` name under ``root`` (recursively, in sorted order), and every
    symbolic link to a directory (never followed): each is a regular file to read, a symbolic
    link to a regular file inside ``root`` (read), or refused saying why (a link leading out of
    the directory, a FIFO, a socket, a device, a broken link)."""
    top = root.resolve()
    found: list[_Source] = []

    def unreadable(error: OSError) -> None:
        where = Path(error.filename or root)
        shown = str(where.relative_to(root)) if where.is_relative_to(root) else str(where)
        found.append(_Source(where, shown, f"cannot read: {error}"))

    for directory, dirs, names in os.walk(root, onerror=unreadable):  # never follows a link
        here = Path(directory)
        for name in sorted(names):
            path = here / name
            if path.suffix in _SUFFIXES:
                found.append(_source(path, path.relative_to(root), top))
        for name in dirs:
            path = here / name
            if path.is_symlink():
                shown = str(path.relative_to(root))
                found.append(_Source(path, shown, "a symbolic link to a directory: not followed"))
    return sorted(found, key=lambda source: Path(source.shown).parts)


def _source(path: Path, relative: Path, top: Path) -> _Source:
    shown = str(relative)
    try:
        mode = path.lstat().st_mode
    except OSError as exc:
        return _Source(path, shown, f"cannot read: {exc}")
    if not stat.S_ISLNK(mode):
        kind = _kind(mode)
        return _Source(path, shown, None if kind is None else f"not a regular file ({kind})")
    target = path.resolve()
    if not target.is_relative_to(top):
        return _Source(
            path, shown, f"a symbolic link to {target}, outside the import directory: refused"
        )
    try:
        kind = _kind(target.stat().st_mode)
    except OSError:
        return _Source(path, shown, f"a broken symbolic link (to {target})")
    if kind is not None:
        return _Source(path, shown, f"a symbolic link to {kind}: refused")
    return _Source(target, shown)


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
    sources = _sources(root)
    files = sum(source.refused is None for source in sources)
    return files, _windows(sources, prefix, window, pause_every, max_entry_bytes)


def _entries(source: _Source, limit: int) -> Iterator[tuple[int | None, object] | ImportProblem]:
    if source.refused is not None:
        return iter((ImportProblem(source.shown, None, source.refused),))
    read = _lines if source.path.suffix == ".jsonl" else _document
    return read(source.path, source.shown, limit)


def _windows(
    sources: list[_Source], prefix: str, window: int, pause_every: int, limit: int
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
    for source in _sources(Path(directory)):
        if source.refused is not None or source.path.suffix != ".jsonl":
            total += sum(1 for _ in _entries(source, max_entry_bytes))
            continue
        try:
            with _open(source.path) as handle:
                last = b"\n"
                while chunk := handle.read(1 << 20):
                    total += chunk.count(b"\n") - chunk.count(b"\n\n")
                    last = chunk[-1:]
                total += last != b"\n"
        except OSError:
            total += 1  # read_windows reports it
    return total
