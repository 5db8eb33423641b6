"""What an import directory holds: the files to read, and every name that is refused.

The directory is walked without following symbolic links. A link is read only when it leads to
a regular file inside the directory; a link leading out of it, a link to a directory, a broken
link, a FIFO, a socket or a device is refused with the reason. The open itself refuses what is
not a regular file, so a name swapped after the listing is never followed or waited on.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = ["SUFFIXES", "Source", "open_regular", "sources"]

SUFFIXES = frozenset({".json", ".jsonl"})
"""The names an import reads."""


def open_regular(file: Path) -> BinaryIO:
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
class Source:
    """A name under the import directory: the file to read, or why it is not read."""

    path: Path
    shown: str
    refused: str | None = None


def sources(root: Path) -> list[Source]:
    """Every ``*.json`` / ``*.jsonl`` name under ``root`` (recursively, in sorted order), and every
    symbolic link to a directory (never followed): each is a regular file to read, a symbolic
    link to a regular file inside ``root`` (read), or refused saying why (a link leading out of
    the directory, a FIFO, a socket, a device, a broken link)."""
    top = root.resolve()
    found: list[Source] = []

    def unreadable(error: OSError) -> None:
        where = Path(error.filename or root)
        shown = str(where.relative_to(root)) if where.is_relative_to(root) else str(where)
        found.append(Source(where, shown, f"cannot read: {error}"))

    for directory, dirs, names in os.walk(root, onerror=unreadable):  # never follows a link
        here = Path(directory)
        for name in sorted(names):
            path = here / name
            if path.suffix in SUFFIXES:
                found.append(_source(path, path.relative_to(root), top))
        for name in dirs:
            path = here / name
            if path.is_symlink():
                shown = str(path.relative_to(root))
                found.append(Source(path, shown, "a symbolic link to a directory: not followed"))
    return sorted(found, key=lambda source: Path(source.shown).parts)


def _source(path: Path, relative: Path, top: Path) -> Source:
    shown = str(relative)
    try:
        mode = path.lstat().st_mode
    except OSError as exc:
        return Source(path, shown, f"cannot read: {exc}")
    if not stat.S_ISLNK(mode):
        kind = _kind(mode)
        return Source(path, shown, None if kind is None else f"not a regular file ({kind})")
    target = path.resolve()
    if not target.is_relative_to(top):
        return Source(
            path, shown, f"a symbolic link to {target}, outside the import directory: refused"
        )
    try:
        kind = _kind(target.stat().st_mode)
    except OSError:
        return Source(path, shown, f"a broken symbolic link (to {target})")
    if kind is not None:
        return Source(path, shown, f"a symbolic link to {kind}: refused")
    return Source(target, shown)
