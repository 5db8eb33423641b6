"""The way to the journal: every directory the lookup passes through must be safe.

The rule is OpenSSH's ``StrictModes``: each directory from the journal up to ``/`` is owned by
root or by this uid and is not group- or world-writable, unless it has the sticky bit (``/tmp``).
It covers the resolved directory's ancestors AND the directories holding a symlink of the path as
given. "Another user" is simulated with ``os.chown`` (root only, hence the skips).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from rxmesh.exceptions import JournalError
from rxmesh.ledger import PendingWriteLedger
from tests.ledger._fakes import make_intent

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="giving a directory to another uid needs root"
)

OTHER_UID = 12345


def _tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    """``grandparent/parent/journal``; the journal itself is not created."""
    grandparent = tmp_path / "grandparent"
    parent = grandparent / "parent"
    parent.mkdir(parents=True, mode=0o755)
    os.chmod(grandparent, 0o755)
    os.chmod(parent, 0o755)
    return grandparent, parent, parent / "journal"


def _accepted(journal: Path) -> None:
    ledger = PendingWriteLedger(journal)
    ledger.record(make_intent())
    assert len(os.listdir(journal)) == 1


@pytest.mark.parametrize("journal_exists", [True, False], ids=["existing", "missing"])
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o757, 0o722])
def test_a_parent_others_can_write_without_the_sticky_bit_is_refused_naming_the_parent(
    tmp_path: Path, mode: int, journal_exists: bool
) -> None:
    """FAILS against the old code, which looked at the journal directory only."""
    _, parent, journal = _tree(tmp_path)
    if journal_exists:
        journal.mkdir(mode=0o700)
    os.chmod(parent, mode)

    with pytest.raises(JournalError, match=re.escape(f"ancestor {str(parent)!r}")) as caught:
        PendingWriteLedger(journal)

    assert caught.value.path == str(parent)
    assert f"{mode:04o}" in str(caught.value)
    assert "sticky" in str(caught.value)
    assert journal.exists() is journal_exists  # nothing is created under a refused ancestor


@pytest.mark.parametrize("mode", [0o1777, 0o1770, 0o1757])
def test_the_same_parent_with_the_sticky_bit_is_accepted(tmp_path: Path, mode: int) -> None:
    # Negative control of the refusal above: a sticky directory is how /tmp is safe.
    _, parent, journal = _tree(tmp_path)
    os.chmod(parent, mode)

    _accepted(journal)


def test_a_group_writable_ancestor_two_levels_up_is_refused_naming_it(tmp_path: Path) -> None:
    """FAILS against the old code, which looked at the journal directory only."""
    grandparent, parent, journal = _tree(tmp_path)
    os.chmod(grandparent, 0o775)

    with pytest.raises(JournalError, match=re.escape(f"ancestor {str(grandparent)!r}")) as caught:
        PendingWriteLedger(journal)

    assert caught.value.path == str(grandparent)
    assert "0775" in str(caught.value)
    assert not parent.joinpath("journal").exists()


@needs_root
def test_an_ancestor_owned_by_another_uid_is_refused_naming_it(tmp_path: Path) -> None:
    """FAILS against the old code, which looked at the journal directory only."""
    grandparent, _, journal = _tree(tmp_path)
    os.chown(grandparent, OTHER_UID, OTHER_UID)  # mode 0755: only its owner can write there

    with pytest.raises(JournalError, match=re.escape(f"ancestor {str(grandparent)!r}")) as caught:
        PendingWriteLedger(journal)

    assert caught.value.path == str(grandparent)
    assert f"owned by uid {OTHER_UID}" in str(caught.value)


def test_ancestors_owned_by_this_uid_and_closed_to_others_are_accepted(tmp_path: Path) -> None:
    # Negative control of both refusals above (the chain up to / is root's or ours, 0755 or 0700).
    _, _, journal = _tree(tmp_path)

    _accepted(journal)


def test_ancestors_the_journal_creates_are_never_group_writable_whatever_the_umask(
    tmp_path: Path,
) -> None:
    """FAILS against the old code, which created missing ancestors 0777 narrowed by the umask
    (0775 here); now they are 0755, so the journal never builds a chain it would refuse."""
    directory = tmp_path / "new" / "chain" / "journal"
    previous = os.umask(0o002)
    try:
        _accepted(directory)
    finally:
        os.umask(previous)

    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700


def test_a_symlink_in_a_directory_others_can_write_is_refused_though_its_target_is_safe(
    tmp_path: Path,
) -> None:
    """FAILS against the old code: whoever can write where the symlink is chooses the journal.

    The old code resolved the path and checked only where it led.
    """
    _, _, journal = _tree(tmp_path)
    journal.mkdir(mode=0o700)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    (shared / "journal").symlink_to(journal)

    with pytest.raises(JournalError, match=re.escape(f"ancestor {str(shared)!r}")):
        PendingWriteLedger(shared / "journal")


def test_a_symlink_into_a_chain_others_can_write_is_refused_naming_the_real_ancestor(
    tmp_path: Path,
) -> None:
    """FAILS against the old code, which looked at the resolved journal directory only."""
    _, parent, journal = _tree(tmp_path)
    journal.mkdir(mode=0o700)
    os.chmod(parent, 0o777)
    link = tmp_path / "link"
    link.symlink_to(journal)

    with pytest.raises(JournalError, match=re.escape(f"ancestor {str(parent)!r}")):
        PendingWriteLedger(link)


def test_a_symlink_in_a_safe_directory_to_a_safe_journal_is_accepted_and_resolved(
    tmp_path: Path,
) -> None:
    # Negative control of the two symlink refusals above.
    _, _, journal = _tree(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(journal)  # dangling until the journal creates its target

    ledger = PendingWriteLedger(link)
    ledger.record(make_intent())

    assert ledger.journal_dir == journal
    assert len(os.listdir(journal)) == 1


@needs_root
@pytest.mark.parametrize(("owner", "refused"), [(OTHER_UID, True), (0, False)])
def test_a_symlink_in_a_sticky_directory_must_be_ours(
    tmp_path: Path, owner: int, refused: bool
) -> None:
    """With another owner: FAILS against the old code. In /tmp-like directories the owner of an
    entry can replace it, so a symlink there is trusted only if root or this uid owns it (the
    ``owner=0`` case is the negative control)."""
    _, _, journal = _tree(tmp_path)
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    link = sticky / "journal"
    link.symlink_to(journal)
    os.lchown(link, owner, owner)

    if refused:
        with pytest.raises(JournalError, match=re.escape(f"symlink {str(link)!r}")) as caught:
            PendingWriteLedger(link)
        assert caught.value.path == str(link)
        assert f"owned by uid {owner}" in str(caught.value)
    else:
        _accepted(link)
