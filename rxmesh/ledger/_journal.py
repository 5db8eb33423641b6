"""The journal's format 1: one durable file per pending intent, in a private directory.

Each file is ``<sha256 of the path>.json`` (never the raw path), mode 0600, in a 0700 directory
owned by this process's user. A file is written durably before its intent counts as recorded:
temp file in the same directory, ``fsync``, ``os.replace`` onto the final name, ``fsync`` the
directory. Its body carries a sha256 of the canonical JSON of the intent, so a torn or edited file
is recognised; such a file (or any unreadable/invalid one) is moved aside as ``*.corrupt`` and
reported at ERROR, and the others still load. The synchronous ``PendingWriteLedger.record`` writes
this format; the awaitable records append to the group-committed log of format 2
(:mod:`rxmesh.ledger._log`), which lives in the same directory and is read by the same checks.

What the journal refuses to trust:

- **A directory someone else could redirect.** Like OpenSSH's ``StrictModes``, every directory
  the lookup passes through up to ``/`` (the resolved directory's ancestors and those holding a
  symlink of the path as given) must be owned by root or by this uid and must not be group- or
  world-writable, unless it has the sticky bit (``/tmp``): there others cannot rename or delete
  the entries we own. A symlink on the way must be root's or ours too. The directory itself must
  be ours and not writable by others.
- **A path that can change under it.** The directory is opened once (``O_DIRECTORY|O_NOFOLLOW``)
  after those checks and every later operation is relative to that descriptor, so a directory
  swapped in at the same path never receives an intent. :meth:`Journal.close` releases it (a
  finalizer does, if nobody calls it).
- **Anything that is not a regular file owned by this uid** under a journal file's name: it is
  ``lstat``-ed before it is opened and never opened unless regular (a FIFO or a device would block
  or act on open), opened ``O_NONBLOCK|O_NOFOLLOW`` and ``fstat``-ed again, and otherwise moved
  aside like a corrupt file.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import re
import stat
import weakref
from pathlib import Path

from loguru import logger
from pydantic import ValidationError

from rxmesh.exceptions import JournalError
from rxmesh.ledger._directory import DirectoryLost, kind_of, open_private_directory, verify_held
from rxmesh.ledger._models import PendingWrite, encoded_without

__all__ = [
    "JOURNAL_FORMAT",
    "CorruptFile",
    "DirectoryLost",
    "Journal",
    "JournalError",
    "canonical_intent",
    "digest",
    "encode_journal_file",
    "journal_file_name",
]

JOURNAL_FORMAT = "rxmesh.pending-write/1"
"""The ``format`` tag of a journal file (one file per intent; format 2 is the log's)."""

_FILE = re.compile(r"[0-9a-f]{64}\.json")
_TEMP = re.compile(r"\.[0-9a-f]{64}\.json\.\d+\.\d+\.tmp")
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_FILE_BYTES = 16 * 1024 * 1024
_LOG_NAME = re.compile(r"(segment-\d{12}\.log|\.segment-\d{12}\.log\.tmp)")  # format 2's


class CorruptFile(Exception):
    """Internal: a journal file that cannot be trusted (the text says why)."""


def journal_file_name(path: str) -> str:
    """The journal file name of the intent with key ``path`` (a create's: its node's path; see
    :attr:`PendingWrite.key`): its sha256 in hex plus ``.json``."""
    return hashlib.sha256(path.encode("utf-8")).hexdigest() + ".json"


def canonical_intent(intent: PendingWrite) -> str:
    """The canonical JSON of ``intent`` (sorted keys, no spaces): what its checksum covers."""
    exclude = encoded_without(intent)
    return _canonical_json(intent.model_dump(mode="json", exclude=exclude))


def _canonical_json(body: object) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(canonical: str) -> str:
    """The sha256 of ``canonical`` in hex."""
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def encode_journal_file(intent: PendingWrite) -> bytes:
    """The bytes of the journal file for ``intent``: format tag, checksum, canonical intent."""
    canonical = canonical_intent(intent)
    return (
        f'{{"format":"{JOURNAL_FORMAT}","sha256":"{digest(canonical)}","intent":{canonical}}}\n'
    ).encode()


def _decode(name: str, data: bytes) -> PendingWrite:
    try:
        document = json.loads(data)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise CorruptFile(f"not JSON ({exc}); a torn or overwritten file") from exc
    if not isinstance(document, dict):
        raise CorruptFile("not a journal document (a JSON object was expected)")
    if document.get("format") != JOURNAL_FORMAT:
        raise CorruptFile(f"unknown format {document.get('format')!r}")
    stored = document.get("sha256")
    body = document.get("intent")
    if not isinstance(stored, str) or body is None:
        raise CorruptFile("no checksum or no intent")
    if not hmac.compare_digest(stored, digest(_canonical_json(body))):
        raise CorruptFile("checksum mismatch; the file was torn or edited")
    try:
        intent = PendingWrite.model_validate(body)
    except ValidationError as exc:
        raise CorruptFile(f"the intent is invalid: {exc}") from exc
    if journal_file_name(intent.key) != name:
        raise CorruptFile(f"the name does not match the intent's key {intent.key!r}")
    return intent


class Journal:
    """The file mechanics of the ledger's journal directory (not thread-safe: the ledger locks).

    The directory is held open from construction to :meth:`close`, and every file operation is
    relative to that descriptor: if the directory is moved, the intents follow it, and a directory
    put in its place never receives one.

    Args:
        directory: the journal directory; created 0700 if missing, refused with
            :class:`JournalError` if it exists and is group/world-writable or owned by another
            uid, or if any directory on the way to it (ancestors of the resolved directory, and
            those holding a symlink of the path) is owned by someone other than root or this uid,
            or is group/world-writable without the sticky bit.

    Raises:
        JournalError: the directory or the way to it is unsafe, or it cannot be prepared.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        given = os.fspath(directory)
        try:
            self._directory, fd = open_private_directory(given)
        except OSError as exc:
            raise JournalError(
                f"cannot prepare pending-write journal directory {given!r}: {exc}", path=given
            ) from exc
        self._fd = fd
        self._closer = weakref.finalize(self, os.close, fd)
        self._counter = itertools.count()

    @property
    def directory(self) -> Path:
        """Where the journal directory was at construction (symlinks resolved once); for display.

        The journal never does I/O through this path: it uses the directory it holds open.
        """
        return self._directory

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has released the directory (or the finalizer has)."""
        return not self._closer.alive

    def close(self) -> None:
        """Release the directory descriptor; idempotent. Later operations raise JournalError."""
        self._closer()

    def file_for(self, path: str) -> Path:
        """Where the journal file of the intent for node ``path`` is, for display only."""
        return self._directory / journal_file_name(path)

    def dir_fd(self) -> int:
        """The descriptor of the directory, for the log's operations relative to it.

        Raises:
            JournalError: the journal is closed.
        """
        return self._dir_fd()

    def _dir_fd(self) -> int:
        if self.closed:  # the number may already belong to another file: never use it again
            raise JournalError(
                f"pending-write journal {str(self._directory)!r} is closed",
                path=str(self._directory),
            )
        return self._fd

    def verify_directory(self) -> None:
        """Check that the directory held open is still the one at its path (see
        :func:`~rxmesh.ledger._directory.verify_held`).

        Raises:
            DirectoryLost: it was deleted, or moved away (or something else is at the path now).
            JournalError: the journal is closed.
        """
        verify_held(self._directory, self._dir_fd())

    def write(self, intent: PendingWrite) -> Path:
        """Write ``intent`` durably (temp, fsync, replace, fsync directory); return its file.

        Raises:
            JournalError: the file could not be written (or the journal is closed); the intent is
                not recorded.
        """
        directory = self._dir_fd()
        name = journal_file_name(intent.key)
        final = self._directory / name
        temp = f".{name}.{os.getpid()}.{next(self._counter)}.tmp"
        try:
            data = encode_journal_file(intent)
        except ValueError as exc:  # UnicodeEncodeError: a lone surrogate cannot be UTF-8
            raise JournalError(
                f"could not encode the pending write for {intent.path!r} as a journal file: {exc}",
                path=str(final),
            ) from exc
        try:
            fd = os.open(temp, _WRITE_FLAGS, 0o600, dir_fd=directory)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
            os.fsync(directory)
        except OSError as exc:
            self.verify_after(exc)
            try:
                os.unlink(temp, dir_fd=directory)
            except FileNotFoundError:
                pass
            except OSError as cleanup:
                logger.bind(journal_dir=str(self._directory)).opt(exception=cleanup).error(
                    "could not remove the temp file {} of a failed journal write: {}", temp, cleanup
                )
            raise JournalError(
                f"could not write pending-write journal file {str(final)!r} for "
                f"{intent.path!r}: {exc}",
                path=str(final),
            ) from exc
        try:
            self.verify_directory()
        except DirectoryLost:
            # Not left where a rename back, or a copy, would load what was not recorded.
            try:
                os.unlink(name, dir_fd=directory)
            except OSError:
                pass  # a deleted directory takes it with it
            raise
        return final

    def verify_after(self, failure: OSError) -> None:
        """After a failed step: raise :class:`DirectoryLost` instead when that is the cause."""
        try:
            self.verify_directory()
        except DirectoryLost as lost:
            raise lost from failure

    def remove(self, path: str) -> bool:
        """Delete the file of node ``path``'s intent and fsync the directory.

        Returns:
            whether a file was there.

        Raises:
            JournalError: the file could not be deleted (it will be re-issued at the next start),
                or the journal is closed.
        """
        directory = self._dir_fd()
        name = journal_file_name(path)
        try:
            try:
                os.unlink(name, dir_fd=directory)
            except FileNotFoundError:
                return False
            os.fsync(directory)
        except OSError as exc:
            target = self._directory / name
            raise JournalError(
                f"could not delete pending-write journal file {str(target)!r} for {path!r}: {exc}",
                path=str(target),
            ) from exc
        return True

    def load(self) -> tuple[list[PendingWrite], int]:
        """Read every intent in the directory; quarantine the files that cannot be trusted.

        Never blocks on what it finds: a name that is not a regular file is not opened.

        Returns:
            the intents (ordered by ``recorded_at``) and how many files were moved aside.

        Raises:
            OSError: the directory itself cannot be listed.
            JournalError: the journal is closed.
        """
        directory = self._dir_fd()
        intents: list[PendingWrite] = []
        quarantined = 0
        leftover_corrupt = 0
        bound = logger.bind(journal_dir=str(self._directory))
        for name in sorted(os.listdir(directory)):
            if _FILE.fullmatch(name):
                try:
                    intents.append(self._read(name))
                except CorruptFile as exc:
                    if self.quarantine(name, str(exc)):
                        quarantined += 1
            elif _TEMP.fullmatch(name):
                bound.warning(
                    "removing {}: a journal write that never completed (its record never returned)",
                    name,
                )
                try:
                    os.unlink(name, dir_fd=directory)  # never opened: whatever it is, no blocking
                except OSError as exc:
                    bound.opt(exception=exc).error("could not remove {}: {}", name, exc)
            elif _LOG_NAME.fullmatch(name):
                continue  # the log's segments: read by its own loader
            elif name.endswith(".corrupt"):
                leftover_corrupt += 1
            else:
                bound.warning("ignoring unexpected file {} in the pending-write journal", name)
        if leftover_corrupt:
            bound.warning(
                "{} quarantined (*.corrupt) file(s) remain in pending-write journal {}; "
                "they are not loaded",
                leftover_corrupt,
                str(self._directory),
            )
        intents.sort(key=lambda intent: intent.recorded_at)
        return intents, quarantined

    @staticmethod
    def _check_trusted(info: os.stat_result) -> None:
        if not stat.S_ISREG(info.st_mode):
            raise CorruptFile(f"not a regular file but a {kind_of(info.st_mode)}; it is not read")
        if info.st_uid != os.geteuid():
            raise CorruptFile(f"owned by uid {info.st_uid}, not by this process")

    def _read(self, name: str) -> PendingWrite:
        return _decode(name, self.read_trusted(name, _MAX_FILE_BYTES))

    def read_trusted(self, name: str, limit: int) -> bytes:
        """The bytes of ``name`` if it is a regular file of ours no larger than ``limit``.

        Raises:
            CorruptFile: it is not one (it was not opened unless it was a regular file), or it
                cannot be read.
        """
        directory = self._fd
        try:
            before = os.stat(name, dir_fd=directory, follow_symlinks=False)
        except OSError as exc:
            raise CorruptFile(f"unreadable: {exc}") from exc
        self._check_trusted(before)  # a FIFO or device is never opened: it could block or act
        try:
            # O_NONBLOCK in case it became one anyway; a regular file ignores the flag.
            fd = os.open(name, _READ_FLAGS, dir_fd=directory)
        except OSError as exc:
            raise CorruptFile(f"unreadable: {exc}") from exc
        try:
            info = os.fstat(fd)
            self._check_trusted(info)
            if (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino):
                raise CorruptFile("replaced while it was being opened")
            if info.st_size > limit:
                raise CorruptFile(f"{info.st_size} bytes; larger than any intent")
            chunks: list[bytes] = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
        except OSError as exc:
            raise CorruptFile(f"unreadable: {exc}") from exc
        finally:
            os.close(fd)
        return b"".join(chunks)

    def exists(self, name: str) -> bool:
        """Whether the directory has an entry ``name`` (of any kind)."""
        try:
            os.stat(name, dir_fd=self._fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def quarantine(self, name: str, why: str) -> bool:
        """Move ``name`` aside as ``*.corrupt`` (durably) and report it at ERROR; say if it was."""
        directory = self._fd
        source = self._directory / name
        bound = logger.bind(journal_dir=str(self._directory), journal_file=str(source))
        target = f"{name}.corrupt"
        try:
            suffix = itertools.count(1)
            while self.exists(target):
                target = f"{name}.{next(suffix)}.corrupt"
            os.replace(name, target, src_dir_fd=directory, dst_dir_fd=directory)
            os.fsync(directory)
        except OSError as exc:
            bound.opt(exception=exc).error(
                "pending-write journal file {} cannot be trusted ({}) and could not be moved "
                "aside: {}; it is not loaded",
                str(source),
                why,
                exc,
            )
            return False
        bound.error(
            "pending-write journal file {} cannot be trusted ({}); moved aside as {}; "
            "its intent is NOT re-issued",
            str(source),
            why,
            target,
        )
        return True
