"""Read a journal directory without changing it: what a restarted process would load.

:func:`read_journal` replays the format-1 files and the format-2 log segments as a ledger
loading the directory would, but never moves, removes, compacts or quarantines anything: an
operator (or a test) may look at a journal a live ledger is writing. An entry that cannot be
trusted is skipped (a ledger loading the directory would set it aside and not re-issue it), and
a last line without its newline (a group whose ``fdatasync`` never returned) is not counted.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from rxmesh.ledger._journal import CorruptFile, _decode
from rxmesh.ledger._log import LOG_FORMAT, _parse
from rxmesh.ledger._models import PendingWrite

__all__ = ["read_journal"]

_SEGMENT = re.compile(r"segment-(\d{12})\.log")
_HEADER = f'{{"format":"{LOG_FORMAT}"}}\n'.encode()


def read_journal(directory: str | os.PathLike[str]) -> tuple[PendingWrite, ...]:
    """The intents ``directory`` holds durably, by path (sorted), read without changing it.

    A path with an intent in both formats (only after a crash mid-way) counts once, with the
    newer intent (by its sequence, then ``recorded_at``; the file's on a tie), as a loading
    ledger keeps it.

    Raises:
        OSError: the directory cannot be listed or a file cannot be read.
    """
    root = Path(directory)
    found: dict[str, PendingWrite] = {}
    logged: dict[str, PendingWrite] = {}
    names = sorted(os.listdir(root))
    for name in names:
        if name.endswith(".json") and not name.startswith("."):
            path = root / name
            if not path.is_file() or path.is_symlink():
                continue
            try:
                intent = _decode(name, path.read_bytes())
            except CorruptFile:
                continue
            found[intent.path] = intent
    for name in names:
        if _SEGMENT.fullmatch(name) is None:
            continue
        path = root / name
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        if not data.startswith(_HEADER):
            continue
        for line in data[len(_HEADER) :].split(b"\n")[:-1]:
            try:
                entry = _parse(line)
            except CorruptFile:
                continue
            if isinstance(entry, str):
                logged.pop(entry, None)
            else:
                logged[entry.path] = entry
    for key, intent in logged.items():
        other = found.get(key)
        if other is None or other.order < intent.order:
            found[key] = intent
    return tuple(found[key] for key in sorted(found))
