"""The journal's format 2: an append-only log of segments, committed in groups.

A segment is ``segment-<12-digit number>.log`` (mode 0600) in the journal directory. Its first
line names the format (``{"format":"rxmesh.pending-write-log/2"}``); every other line is one
entry, ``<sha256 of the body> <body>``, the body a JSON object: ``{"op":"put","intent":{...}}``
(the intent for its key, replacing any earlier one) or ``{"op":"del","path":...}`` (that key has
no intent any more). A create's key is its path; an update's, delete's or move's intent (which
carries ``origin``, ``expected_version``, ``expected_request_id`` and ``target``) is keyed
``"<path> <verb>"``. Entries written before those verbs were recorded have none of these fields
and load as creates, unchanged; a create's entry is still written without them. Replaying the
segments in number order gives the intents.

Many entries are appended with one ``write`` and made durable with one ``fdatasync``: that is
the group commit. A segment is only ever created complete (temp file, ``fdatasync``, rename,
``fsync`` of the directory), holding a snapshot of the live intents; when the current one has
grown past ``compact_at`` and is mostly dead entries, a new snapshot replaces it and the older
segments are deleted. After a failed write or ``fdatasync`` the segment is never appended to
again: the next group starts a new snapshot (what the failed ``fdatasync`` left on disk is
unknown).

Reading trusts what the format-1 files are trusted with (:class:`~rxmesh.ledger._journal.Journal`:
a regular file of ours, never opened otherwise). A segment that cannot be trusted is moved aside
as ``*.corrupt``; an entry whose checksum or body is wrong is copied to ``<segment>.lines.corrupt``
and reported at ERROR, and the other entries still load. A last line without its newline is a
group whose ``fdatasync`` never returned (nobody was told it was recorded): dropped, at WARNING.
"""

from __future__ import annotations

import hmac
import json
import os
import re
from collections.abc import Collection
from pathlib import Path

from loguru import logger
from pydantic import ValidationError

from rxmesh.ledger._journal import CorruptFile, DirectoryLost, Journal, digest
from rxmesh.ledger._models import PendingWrite, encoded_without

__all__ = ["COMPACT_AT_BYTES", "LOG_FORMAT", "Log", "encode_del", "encode_put", "segment_name"]

LOG_FORMAT = "rxmesh.pending-write-log/2"
"""The ``format`` tag of a log segment's first line."""

COMPACT_AT_BYTES = 4 * 1024 * 1024
"""A segment larger than this, and more than half dead entries, is replaced by a snapshot."""

_HEADER = f'{{"format":"{LOG_FORMAT}"}}\n'.encode()
_SEGMENT = re.compile(r"segment-(\d{12})\.log")
_SEGMENT_TEMP = re.compile(r"\.segment-\d{12}\.log\.tmp")
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_SEGMENT_BYTES = 1 << 31


def segment_name(number: int) -> str:
    """The file name of segment ``number``."""
    return f"segment-{number:012d}.log"


def encode_put(intent: PendingWrite) -> bytes:
    """The log entry recording ``intent`` (newline included).

    The body is pydantic's JSON of the intent (serialised in Rust, no intermediate dicts: a
    10,000-node bulk is encoded without feeding the garbage collector); the
    checksum covers the body as written, so it needs no canonical form.

    Raises:
        ValueError: a value of the intent is not valid Unicode (a lone surrogate).
    """
    exclude = encoded_without(intent)
    body = f'{{"op":"put","intent":{intent.model_dump_json(exclude=exclude)}}}'
    return f"{digest(body)} {body}\n".encode()


def encode_del(path: str) -> bytes:
    """The log entry saying the intent with key ``path`` is settled (newline included): a
    create's key is its node's path; an update's, delete's or move's ``"<path> <verb>"``.

    Raises:
        UnicodeEncodeError: ``path`` is not valid Unicode.
    """
    body = json.dumps({"op": "del", "path": path}, separators=(",", ":"), ensure_ascii=False)
    return f"{digest(body)} {body}\n".encode()


def _parse(line: bytes) -> PendingWrite | str:
    """One entry: the intent of a ``put``, or the path of a ``del``.

    Raises:
        CorruptFile: the entry cannot be trusted (the text says why).
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptFile(f"not UTF-8 ({exc})") from exc
    stored, _, body = text.partition(" ")
    if not hmac.compare_digest(stored, digest(body)):
        raise CorruptFile("checksum mismatch; the entry was torn or edited")
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise CorruptFile(f"not JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise CorruptFile("not an entry (a JSON object was expected)")
    op = document.get("op")
    if op == "put":
        try:
            return PendingWrite.model_validate(document.get("intent"))
        except ValidationError as exc:
            raise CorruptFile(f"the intent is invalid: {exc}") from exc
    path = document.get("path")
    if op == "del" and isinstance(path, str):
        return path
    raise CorruptFile(f"unknown entry {op!r}")


class Log:
    """The segments of one journal directory. Not thread-safe: one writer thread uses it.

    Args:
        journal: the format-1 journal whose open directory the segments live in.
        compact_at: see :data:`COMPACT_AT_BYTES`.
    """

    def __init__(self, journal: Journal, *, compact_at: int = COMPACT_AT_BYTES) -> None:
        self._journal = journal
        self._compact_at = compact_at
        self._fd: int | None = None
        self._name: str | None = None
        self._size = 0
        self._broken = False
        self._next = 1
        self._old: list[str] = []  # segments a snapshot supersedes, deleted once it is durable
        self._live: dict[str, bytes] = {}  # path -> its put entry
        self._live_bytes = 0
        self._bound = logger.bind(journal_dir=str(journal.directory))

    @property
    def segment(self) -> Path | None:
        """The segment being appended to (for display), or ``None`` before the first."""
        return None if self._name is None else self._journal.directory / self._name

    @property
    def has_segments(self) -> bool:
        """Whether segments were found by :meth:`load` or written since."""
        return bool(self._old) or self._name is not None

    def load(self) -> tuple[list[PendingWrite], int]:
        """Replay every segment; quarantine what cannot be trusted.

        Returns:
            the live intents, and how many segments or entries were moved aside.

        Raises:
            OSError: the directory cannot be listed.
            JournalError: the journal is closed.
        """
        directory = self._journal.dir_fd()
        live: dict[str, tuple[PendingWrite, bytes]] = {}
        quarantined = 0
        for name in sorted(os.listdir(directory)):
            if _SEGMENT_TEMP.fullmatch(name):
                self._bound.warning(
                    "removing {}: a log snapshot that never completed (nothing relied on it)", name
                )
                try:
                    os.unlink(name, dir_fd=directory)  # never opened: whatever it is, no blocking
                except OSError as exc:
                    self._bound.opt(exception=exc).error("could not remove {}: {}", name, exc)
                continue
            match = _SEGMENT.fullmatch(name)
            if match is None:
                continue
            self._next = max(self._next, int(match.group(1)) + 1)
            try:
                data = self._journal.read_trusted(name, _MAX_SEGMENT_BYTES)
                if not data.startswith(_HEADER):
                    first = data.split(b"\n", 1)[0][:200]
                    raise CorruptFile(f"not a {LOG_FORMAT} segment (it starts {first!r})")
            except CorruptFile as exc:
                quarantined += self._journal.quarantine(name, str(exc))
                continue
            self._old.append(name)
            quarantined += self._replay(name, data[len(_HEADER) :], live)
        self._live = {path: line for path, (_, line) in live.items()}
        self._live_bytes = sum(len(line) for line in self._live.values())
        return [intent for intent, _ in live.values()], quarantined

    def _replay(self, name: str, body: bytes, live: dict[str, tuple[PendingWrite, bytes]]) -> int:
        lines = body.split(b"\n")
        if lines[-1]:
            self._bound.warning(
                "log segment {}: dropping a last entry without its newline ({} bytes): a group "
                "whose fdatasync never returned, so nobody was told it was recorded",
                name,
                len(lines[-1]),
            )
        bad: list[bytes] = []
        for number, line in enumerate(lines[:-1], start=2):
            try:
                entry = _parse(line)
            except CorruptFile as exc:
                bad.append(line + b"\n")
                self._bound.error(
                    "pending-write log segment {} line {} cannot be trusted ({}); it is NOT "
                    "re-issued (copied aside to {}.lines.corrupt)",
                    name,
                    number,
                    exc,
                    name,
                )
                continue
            if isinstance(entry, str):
                live.pop(entry, None)
            else:
                live[entry.key] = (entry, line + b"\n")
        if bad:
            self._set_aside(f"{name}.lines.corrupt", b"".join(bad))
        return len(bad)

    def _set_aside(self, target: str, data: bytes) -> None:
        directory = self._journal.dir_fd()
        base, suffix = target.removesuffix(".corrupt"), 1
        while self._journal.exists(target):
            target, suffix = f"{base}.{suffix}.corrupt", suffix + 1
        fd = os.open(target, _CREATE_FLAGS, 0o600, dir_fd=directory)
        try:
            _write_all(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.fsync(directory)

    def rewrite(self, drop: Collection[str] = ()) -> None:
        """Start a new segment holding a snapshot of the live intents (minus ``drop``), durably;
        then delete the segments it supersedes.

        Raises:
            OSError: the snapshot could not be written; the current segment is still the one.
        """
        directory = self._journal.dir_fd()
        for path in drop:
            self._live_bytes -= len(self._live.pop(path, b""))
        name = segment_name(self._next)
        self._next += 1
        temp = f".{name}.tmp"
        data = _HEADER + b"".join(self._live.values())
        fd = os.open(temp, _CREATE_FLAGS, 0o600, dir_fd=directory)
        try:
            _write_all(fd, data, 0)
            os.fdatasync(fd)
            os.replace(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
            os.fsync(directory)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(temp, dir_fd=directory)
            except FileNotFoundError:
                pass
            raise
        if self._fd is not None:
            os.close(self._fd)
        if self._name is not None:
            self._old.append(self._name)
        self._fd, self._name, self._size, self._broken = fd, name, len(data), False
        self._delete_old(directory)

    def _delete_old(self, directory: int) -> None:
        kept: list[str] = []
        for old in self._old:
            try:
                os.unlink(old, dir_fd=directory)
            except FileNotFoundError:
                pass
            except OSError as exc:  # replaying it before the snapshot is harmless: retried later
                self._bound.opt(exception=exc).error(
                    "could not delete the superseded log segment {}: {}", old, exc
                )
                kept.append(old)
        self._old = kept
        os.fsync(directory)

    def append(self, entries: list[tuple[str, bytes, bool]]) -> None:
        """Append ``(path, entry, is_put)`` entries with one write and one ``fdatasync``.

        They count only if the directory written to is still the journal's path afterwards
        (:meth:`Journal.verify_directory`): once per group, not per entry.

        Raises:
            DirectoryLost: the directory was deleted or moved away; none of them counts.
            OSError: they could not be made durable; none of them counts (the segment is
                abandoned, the next group starts a new snapshot).
        """
        if self._fd is None or self._broken:
            try:
                self.rewrite()
            except OSError as exc:
                self._journal.verify_after(exc)
                raise
        fd = self._fd
        assert fd is not None
        data = b"".join(line for _, line, _ in entries)
        try:
            _write_all(fd, data, self._size)
            os.fdatasync(fd)
        except OSError as exc:
            self._broken = True
            self._journal.verify_after(exc)
            raise
        try:
            self._journal.verify_directory()
        except DirectoryLost:
            self._broken = True
            self._forget_group()
            raise
        self._size += len(data)
        for path, line, put in entries:
            self._live_bytes -= len(self._live.pop(path, b""))
            if put:
                self._live[path] = line
                self._live_bytes += len(line)
        if self._size > self._compact_at and self._size > 2 * (len(_HEADER) + self._live_bytes):
            try:
                self.rewrite()
            except OSError as exc:  # the current segment stays valid; compaction is retried
                self._bound.opt(exception=exc).error("could not compact the log: {}", exc)

    def _forget_group(self) -> None:
        """After :class:`DirectoryLost`: replace the segment that holds the group just appended
        by a snapshot without it, where the directory now is (a moved directory moved back must
        not re-issue what its callers were told was not recorded). In a deleted directory
        nothing can be created, and nothing needs to be."""
        try:
            self.rewrite()
        except OSError as exc:
            self._bound.debug("no snapshot in the lost journal directory: {}", exc)
        self._broken = True  # the next group starts from a snapshot, and checks again

    def restore(self, entries: list[tuple[str, bytes | None]]) -> None:
        """Take back puts whose callers were told not recorded: per ``(path, entry)``, make
        ``entry`` (the put of the path's intent now, or ``None``: it has none) its live entry
        again, durably (appended in one group). If that fails, the next group starts from a
        snapshot that already lacks them.

        Raises:
            OSError: the entries could not be appended (the snapshot still forgets them).
        """
        lines: list[tuple[str, bytes, bool]] = []
        for path, previous in entries:  # first in memory: any snapshot from now on lacks them
            self._live_bytes -= len(self._live.pop(path, b""))
            if previous is not None:
                self._live[path] = previous
                self._live_bytes += len(previous)
            lines.append((path, previous or encode_del(path), previous is not None))
        try:
            self.append(lines)
        except (OSError, DirectoryLost):
            self._broken = True
            raise

    def close(self) -> None:
        """Close the current segment's descriptor; idempotent. A log that holds no live intent
        any more leaves no segment behind (every one of them deleted, the directory synced), so
        a settled journal is an empty directory, as in format 1; otherwise the files stay."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._live or self._broken or self._journal.closed:
            return
        if self._name is not None:
            self._old.append(self._name)
            self._name = None
        if self._old:
            try:
                self._delete_old(self._journal.dir_fd())
            except OSError as exc:  # the segments replay to no intent: harmless, logged
                self._bound.opt(exception=exc).error("could not remove the empty log: {}", exc)


def _write_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
