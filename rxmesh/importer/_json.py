"""The files of an import as entries, within bounds: a JSON-lines file line by line, a ``.json``
file as its one value or its list's items, streamed; each entry with its line, or a problem
naming the file and line.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from rxmesh.importer._files import open_regular

__all__ = ["DEFAULT_MAX_ENTRY_BYTES", "Entry", "ImportProblem", "read_document", "read_lines"]

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
class ImportProblem:
    """An entry that was not imported: where it is and why."""

    file: str
    line: int | None
    reason: str
    path: str | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.reason}"


Entry = tuple[int | None, object] | ImportProblem
"""``(line, value)`` of an entry read, or the problem met reading it."""


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


def read_lines(file: Path, shown: str, limit: int) -> Iterator[Entry]:
    """A JSON-lines file, line by line (blank lines skipped): ``(line, value)`` or a problem.

    Read in blocks of :data:`_BLOCK` bytes; a line ends at LF, CRLF or a lone CR (what a text
    editor numbers), never at U+2028, which a JSON string may hold. A line cut by a block's end
    waits in one buffer that grows in place, so each byte is copied a bounded number of times;
    a line longer than ``limit`` bytes is reported and skipped to its end, never held whole.
    """
    try:
        handle = open_regular(file)
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


def read_document(file: Path, shown: str, limit: int) -> Iterator[Entry]:
    """A ``.json`` file: its one value, or a list's items each with its own line.

    A list is streamed: items are read a block at a time and yielded as they are read, so the
    list is never held whole. A problem (malformed JSON, an item longer than ``limit``
    characters) ends the file there, naming its line; the items before it were yielded.
    """
    try:
        handle = open_regular(file)
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
