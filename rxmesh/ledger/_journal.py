"""The journal: one durable file per pending intent, in a private directory (SPEC §5.1).

Each file is ``<sha256 of the path>.json`` (never the raw path), mode 0600, in a 0700 directory
owned by this process's user. A file is written durably before its intent counts as recorded:
temp file in the same directory, ``fsync``, ``os.replace`` onto the final name, ``fsync`` the
directory. Its body carries a sha256 of the canonical JSON of the intent, so a torn or edited file
is recognised; such a file (or any unreadable/invalid one) is moved aside as ``*.corrupt`` and
reported at ERROR, and the others still load. So is anything under a journal file's name that is not
a regular file owned by this uid: it is ``lstat``-ed before it is opened and never opened unless
regular (a FIFO or a device would block or act on open), then opened ``O_NONBLOCK|O_NOFOLLOW`` and
``fstat``-ed again.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import re
import stat
from pathlib import Path

from loguru import logger
from pydantic import ValidationError

from rxmesh.exceptions import RxMeshError
from rxmesh.ledger._models import PendingWrite

__all__ = ["JOURNAL_FORMAT", "Journal", "JournalError", "encode_journal_file", "journal_file_name"]

JOURNAL_FORMAT = "rxmesh.pending-write/1"
"""The ``format`` tag of a journal file."""

_FILE = re.compile(r"[0-9a-f]{64}\.json")
_TEMP = re.compile(r"\.[0-9a-f]{64}\.json\.\d+\.\d+\.tmp")
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_FILE_BYTES = 16 * 1024 * 1024


class JournalError(RxMeshError):
    """The pending-write journal cannot be used: an unsafe directory, or a write that failed.

    Args:
        message: what happened, naming the directory or file.
        path: the directory or file concerned.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class _CorruptFile(Exception):
    """Internal: a journal file that cannot be trusted (the text says why)."""


def journal_file_name(path: str) -> str:
    """The journal file name of the intent for node ``path``: its sha256 in hex plus ``.json``."""
    return hashlib.sha256(path.encode("utf-8")).hexdigest() + ".json"


def _canonical(intent: PendingWrite) -> str:
    return _canonical_json(intent.model_dump(mode="json"))


def _canonical_json(body: object) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _digest(canonical: str) -> str:
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def encode_journal_file(intent: PendingWrite) -> bytes:
    """The bytes of the journal file for ``intent``: format tag, checksum, canonical intent."""
    canonical = _canonical(intent)
    return (
        f'{{"format":"{JOURNAL_FORMAT}","sha256":"{_digest(canonical)}","intent":{canonical}}}\n'
    ).encode()


def _decode(name: str, data: bytes) -> PendingWrite:
    try:
        document = json.loads(data)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise _CorruptFile(f"not JSON ({exc}); a torn or overwritten file") from exc
    if not isinstance(document, dict):
        raise _CorruptFile("not a journal document (a JSON object was expected)")
    if document.get("format") != JOURNAL_FORMAT:
        raise _CorruptFile(f"unknown format {document.get('format')!r}")
    stored = document.get("sha256")
    body = document.get("intent")
    if not isinstance(stored, str) or body is None:
        raise _CorruptFile("no checksum or no intent")
    if not hmac.compare_digest(stored, _digest(_canonical_json(body))):
        raise _CorruptFile("checksum mismatch; the file was torn or edited")
    try:
        intent = PendingWrite.model_validate(body)
    except ValidationError as exc:
        raise _CorruptFile(f"the intent is invalid: {exc}") from exc
    if journal_file_name(intent.path) != name:
        raise _CorruptFile(f"the name does not match the intent's path {intent.path!r}")
    return intent


def _kind(mode: int) -> str:
    """What a non-regular file is, in words (for the quarantine's log line)."""
    for test, kind in (
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return kind
    return "special file"


def _ensure_private_directory(directory: Path) -> None:
    """Create ``directory`` 0700 if missing; refuse an existing one others could write to."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(directory, 0o700)  # the umask may have narrowed it; never widen beyond 0700
    info = os.stat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise JournalError(
            f"pending-write journal {str(directory)!r} is not a directory", path=str(directory)
        )
    if info.st_uid != os.geteuid():
        raise JournalError(
            f"refusing pending-write journal directory {str(directory)!r}: it is owned by uid "
            f"{info.st_uid}, not by this process (uid {os.geteuid()}); whoever can write there "
            "could re-issue creates under someone else's AccessContext",
            path=str(directory),
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise JournalError(
            f"refusing pending-write journal directory {str(directory)!r}: mode "
            f"{stat.S_IMODE(info.st_mode):04o} is group- or world-writable; whoever can write "
            "there could re-issue creates under someone else's AccessContext (use 0700)",
            path=str(directory),
        )
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        logger.bind(journal_dir=str(directory)).warning(
            "pending-write journal directory {} has mode {:04o}; others can read the intents' "
            "access contexts (0700 is expected)",
            str(directory),
            stat.S_IMODE(info.st_mode),
        )


class Journal:
    """The file mechanics of the ledger's journal directory (not thread-safe: the ledger locks).

    Args:
        directory: the journal directory; created 0700 if missing, refused with
            :class:`JournalError` if it exists and is group/world-writable or owned by another uid.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._directory = Path(os.path.realpath(os.fspath(directory)))
        try:
            _ensure_private_directory(self._directory)
        except OSError as exc:
            raise JournalError(
                f"cannot prepare pending-write journal directory {str(self._directory)!r}: {exc}",
                path=str(self._directory),
            ) from exc
        self._counter = itertools.count()

    @property
    def directory(self) -> Path:
        """The journal directory (symlinks resolved once, at construction)."""
        return self._directory

    def file_for(self, path: str) -> Path:
        """The journal file of the intent for node ``path``."""
        return self._directory / journal_file_name(path)

    def _sync_directory(self) -> None:
        fd = os.open(self._directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write(self, intent: PendingWrite) -> Path:
        """Write ``intent`` durably (temp, fsync, replace, fsync directory); return its file.

        Raises:
            JournalError: the file could not be written; the intent is NOT recorded.
        """
        final = self.file_for(intent.path)
        temp = self._directory / f".{final.name}.{os.getpid()}.{next(self._counter)}.tmp"
        data = encode_journal_file(intent)
        try:
            fd = os.open(temp, _WRITE_FLAGS, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, final)
            self._sync_directory()
        except OSError as exc:
            try:
                os.unlink(temp)
            except FileNotFoundError:
                pass
            raise JournalError(
                f"could not write pending-write journal file {str(final)!r} for "
                f"{intent.path!r}: {exc}",
                path=str(final),
            ) from exc
        return final

    def remove(self, path: str) -> bool:
        """Delete the file of node ``path``'s intent and fsync the directory.

        Returns:
            whether a file was there.

        Raises:
            JournalError: the file could not be deleted (it will be re-issued at the next start).
        """
        target = self.file_for(path)
        try:
            try:
                os.unlink(target)
            except FileNotFoundError:
                return False
            self._sync_directory()
        except OSError as exc:
            raise JournalError(
                f"could not delete pending-write journal file {str(target)!r} for {path!r}: {exc}",
                path=str(target),
            ) from exc
        return True

    def load(self) -> tuple[list[PendingWrite], int]:
        """Read every intent in the directory; quarantine the files that cannot be trusted.

        Returns:
            the intents (ordered by ``recorded_at``) and how many files were moved aside.
        """
        intents: list[PendingWrite] = []
        quarantined = 0
        leftover_corrupt = 0
        bound = logger.bind(journal_dir=str(self._directory))
        for name in sorted(os.listdir(self._directory)):
            if _FILE.fullmatch(name):
                try:
                    intents.append(self._read(name))
                except _CorruptFile as exc:
                    if self._quarantine(name, str(exc)):
                        quarantined += 1
            elif _TEMP.fullmatch(name):
                bound.warning(
                    "removing {}: a journal write that never completed (its record never returned)",
                    name,
                )
                try:
                    os.unlink(self._directory / name)  # never opened: whatever it is, no blocking
                except OSError as exc:
                    bound.opt(exception=exc).error("could not remove {}: {}", name, exc)
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
            raise _CorruptFile(f"not a regular file but a {_kind(info.st_mode)}; it is not read")
        if info.st_uid != os.geteuid():
            raise _CorruptFile(f"owned by uid {info.st_uid}, not by this process")

    def _read(self, name: str) -> PendingWrite:
        source = self._directory / name
        try:
            before = os.lstat(source)
        except OSError as exc:
            raise _CorruptFile(f"unreadable: {exc}") from exc
        self._check_trusted(before)  # a FIFO or device is never opened: it could block or act
        try:
            # O_NONBLOCK in case it became one anyway; a regular file ignores the flag.
            fd = os.open(source, _READ_FLAGS)
        except OSError as exc:
            raise _CorruptFile(f"unreadable: {exc}") from exc
        try:
            info = os.fstat(fd)
            self._check_trusted(info)
            if (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino):
                raise _CorruptFile("replaced while it was being opened")
            if info.st_size > _MAX_FILE_BYTES:
                raise _CorruptFile(f"{info.st_size} bytes; larger than any intent")
            chunks: list[bytes] = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
        except OSError as exc:
            raise _CorruptFile(f"unreadable: {exc}") from exc
        finally:
            os.close(fd)
        return _decode(name, b"".join(chunks))

    def _quarantine(self, name: str, why: str) -> bool:
        source = self._directory / name
        target = self._directory / f"{name}.corrupt"
        suffix = itertools.count(1)
        while target.exists():
            target = self._directory / f"{name}.{next(suffix)}.corrupt"
        bound = logger.bind(journal_dir=str(self._directory), journal_file=str(source))
        try:
            os.replace(source, target)
            self._sync_directory()
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
            target.name,
        )
        return True
