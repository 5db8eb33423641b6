"""The journal: one durable file per pending intent, in a private directory (SPEC §5.1).

Each file is ``<sha256 of the path>.json`` (never the raw path), mode 0600, in a 0700 directory
owned by this process's user. A file is written durably before its intent counts as recorded:
temp file in the same directory, ``fsync``, ``os.replace`` onto the final name, ``fsync`` the
directory. Its body carries a sha256 of the canonical JSON of the intent, so a torn or edited file
is recognised; such a file (or any unreadable/invalid one) is moved aside as ``*.corrupt`` and
reported at ERROR, and the others still load.

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
from rxmesh.ledger._models import PendingWrite

__all__ = ["JOURNAL_FORMAT", "Journal", "JournalError", "encode_journal_file", "journal_file_name"]

JOURNAL_FORMAT = "rxmesh.pending-write/1"
"""The ``format`` tag of a journal file."""

_FILE = re.compile(r"[0-9a-f]{64}\.json")
_TEMP = re.compile(r"\.[0-9a-f]{64}\.json\.\d+\.\d+\.tmp")
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
_MAX_SYMLINKS = 40  # as the kernel's lookup (ELOOP beyond)
_MAX_FILE_BYTES = 16 * 1024 * 1024


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


def _check_ancestor(ancestor: Path, info: os.stat_result, given: str) -> None:
    """Refuse ``ancestor``, a directory the lookup of the journal ``given`` passes through.

    The rule of OpenSSH's ``StrictModes`` (``safe_path`` in its ``misc.c``): owned by root or by
    this uid, and not group- or world-writable, except that a sticky directory (``/tmp``) is
    accepted: there nobody but an entry's owner (or the directory's, checked here too) can rename
    or delete it, and the next component down is checked in its turn.
    """
    euid = os.geteuid()
    why: str | None = None
    if info.st_uid not in (0, euid):
        why = (
            f"it is owned by uid {info.st_uid}, neither root nor this process (uid {euid}), "
            "and its owner can replace anything below it"
        )
    elif info.st_mode & _WRITABLE_BY_OTHERS and not info.st_mode & stat.S_ISVTX:
        why = (
            f"its mode {stat.S_IMODE(info.st_mode):04o} is group- or world-writable without the "
            "sticky bit, so others can rename what is below it away and put their own in its place"
        )
    if why is not None:
        raise JournalError(
            f"refusing pending-write journal directory {given!r}: its ancestor {str(ancestor)!r} "
            f"is unsafe: {why}; whoever controls it could redirect the intents and re-issue "
            "creates under someone else's AccessContext",
            path=str(ancestor),
        )


def _check_directory(directory: Path, info: os.stat_result) -> None:
    """Refuse the journal directory itself unless it is ours and nobody else can write to it."""
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
    if info.st_mode & _WRITABLE_BY_OTHERS:
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


def _resolve_checked(given: str) -> tuple[Path, os.stat_result, bool]:
    """Resolve ``given`` as the kernel would, checking every directory the lookup passes through.

    That is each ancestor of the resolved directory AND each directory holding a symlink of the
    path as given (or of a symlink's target): whoever can write to any of them chooses where the
    journal is. Each such symlink must be owned by root or this uid too (in a sticky directory
    like ``/tmp`` its owner could replace it; Linux's ``protected_symlinks`` rule). Walks from
    ``/`` down, so nothing is created inside a directory that failed its check; a missing
    component is created 0755 (the journal directory itself 0700), narrowed by the umask.

    Returns:
        the resolved directory, its ``lstat``, and whether this call created it.
    """
    absolute = given if os.path.isabs(given) else os.path.join(os.getcwd(), given)
    pending = list(reversed(absolute.split("/")))
    resolved = Path("/")
    checked: set[Path] = set()
    info = os.lstat(resolved)
    created = False
    links = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            resolved = resolved.parent
            info = os.lstat(resolved)
            continue
        if not stat.S_ISDIR(info.st_mode):
            raise JournalError(
                f"pending-write journal {given!r} is not a directory: {str(resolved)!r} on its "
                "path is not one",
                path=str(resolved),
            )
        if resolved not in checked:
            _check_ancestor(resolved, info, given)
            checked.add(resolved)
        component = resolved / part
        try:
            info = os.lstat(component)
        except FileNotFoundError:
            last = not any(rest not in ("", ".") for rest in pending)
            try:
                os.mkdir(component, 0o700 if last else 0o755)
            except FileExistsError:
                pass  # made meanwhile: it is looked at below like any other
            else:
                created = last
            info = os.lstat(component)
        if stat.S_ISLNK(info.st_mode):
            if info.st_uid not in (0, os.geteuid()):  # in a sticky directory its owner may swap it
                raise JournalError(
                    f"refusing pending-write journal directory {given!r}: the symlink "
                    f"{str(component)!r} on the way to it is owned by uid {info.st_uid}, "
                    f"neither root nor this process (uid {os.geteuid()}); its owner chooses "
                    "where it points",
                    path=str(component),
                )
            links += 1
            if links > _MAX_SYMLINKS:
                raise JournalError(
                    f"pending-write journal {given!r}: too many levels of symbolic links",
                    path=given,
                )
            target = os.readlink(component)
            pending.extend(reversed(target.split("/")))
            if target.startswith("/"):
                resolved = Path("/")
            info = os.lstat(resolved)
            continue
        resolved = component
    return resolved, info, created


def _open_private_directory(given: str) -> tuple[Path, int]:
    """Check the journal ``given`` and the way to it, creating what is missing; open it.

    The descriptor is opened ``O_DIRECTORY|O_NOFOLLOW`` and must be the very directory that was
    checked (same ``st_dev``/``st_ino``); the directory's own checks run on its ``fstat``.

    Returns:
        the resolved directory (for display) and the descriptor every later operation goes through.
    """
    directory, info, created = _resolve_checked(given)
    if not stat.S_ISDIR(info.st_mode):
        _check_directory(directory, info)  # raises: not a directory
    fd = os.open(directory, _DIRECTORY_FLAGS)
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
            raise JournalError(
                f"refusing pending-write journal directory {str(directory)!r}: it was replaced "
                "while it was being checked",
                path=str(directory),
            )
        if created:
            os.fchmod(fd, 0o700)  # the umask may have narrowed it; never widen beyond 0700
            opened = os.fstat(fd)
        _check_directory(directory, opened)
    except BaseException:
        os.close(fd)
        raise
    return directory, fd


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
            self._directory, fd = _open_private_directory(given)
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

    def _dir_fd(self) -> int:
        if self.closed:  # the number may already belong to another file: never use it again
            raise JournalError(
                f"pending-write journal {str(self._directory)!r} is closed",
                path=str(self._directory),
            )
        return self._fd

    def write(self, intent: PendingWrite) -> Path:
        """Write ``intent`` durably (temp, fsync, replace, fsync directory); return its file.

        Raises:
            JournalError: the file could not be written (or the journal is closed); the intent is
                NOT recorded.
        """
        directory = self._dir_fd()
        name = journal_file_name(intent.path)
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
        return final

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
                except _CorruptFile as exc:
                    if self._quarantine(name, str(exc)):
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
        directory = self._fd
        try:
            before = os.stat(name, dir_fd=directory, follow_symlinks=False)
        except OSError as exc:
            raise _CorruptFile(f"unreadable: {exc}") from exc
        self._check_trusted(before)  # a FIFO or device is never opened: it could block or act
        try:
            # O_NONBLOCK in case it became one anyway; a regular file ignores the flag.
            fd = os.open(name, _READ_FLAGS, dir_fd=directory)
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

    def _exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self._fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def _quarantine(self, name: str, why: str) -> bool:
        directory = self._fd
        source = self._directory / name
        bound = logger.bind(journal_dir=str(self._directory), journal_file=str(source))
        target = f"{name}.corrupt"
        try:
            suffix = itertools.count(1)
            while self._exists(target):
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
