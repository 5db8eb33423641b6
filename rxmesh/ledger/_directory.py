"""The journal directory's safety checks: who may redirect it, opening it once, and whether the
directory held open is still the one at its path.

Like OpenSSH's ``StrictModes``: every directory the lookup of the journal passes through must be
owned by root or this uid and not writable by others (unless sticky); the directory itself must be
ours and private. It is then opened once, ``O_DIRECTORY|O_NOFOLLOW``, and every later operation is
relative to that descriptor.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from loguru import logger

from rxmesh.exceptions import JournalError

__all__ = ["DirectoryLost", "kind_of", "open_private_directory", "verify_held"]

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
_MAX_SYMLINKS = 40  # as the kernel's lookup (ELOOP beyond)


def kind_of(mode: int) -> str:
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

    That is each ancestor of the resolved directory and each directory holding a symlink of the
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


def open_private_directory(given: str) -> tuple[Path, int]:
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


class DirectoryLost(JournalError):
    """The directory the journal holds open is no longer the directory at its path (it was
    deleted or moved away): what is written there is not what the next process will load."""


def verify_held(directory: Path, fd: int) -> None:
    """Check that ``fd``, the journal held open, is still the directory at ``directory``.

    A descriptor keeps a deleted or renamed directory usable: writes there succeed and ``fsync``
    returns, yet the next process, opening the path, never sees them. So a durable step counts
    only once this holds: the held directory still has a link (``st_nlink > 0``) and a fresh
    ``stat`` of the path names the same ``st_dev``/``st_ino``.

    Raises:
        DirectoryLost: it was deleted, or moved away (or something else is at the path now).
    """
    held = os.fstat(fd)
    where = str(directory)
    if held.st_nlink == 0:
        raise DirectoryLost(
            f"pending-write journal directory {where!r} was deleted while in use; what is "
            "written there is lost at exit (restart with a journal directory that exists)",
            path=where,
        )
    try:
        current = os.stat(directory)
    except OSError as exc:
        raise DirectoryLost(
            f"pending-write journal directory {where!r} is no longer at its path ({exc}); it "
            "was moved away or deleted, and the next process would not find what is written "
            "to it",
            path=where,
        ) from exc
    if (current.st_dev, current.st_ino) != (held.st_dev, held.st_ino):
        raise DirectoryLost(
            f"pending-write journal directory {where!r} was moved away or replaced while in "
            "use: the path names another directory now, and the next process would not find "
            "what is written to the one held open",
            path=where,
        )
