"""The path rule's one-match shortcut (``PLAIN_PATH``) takes only paths the rule itself accepts.

The shortcut is shared by :func:`rxmesh.model.validate_path`, the importer's reader and the
change feed's row check; the rule (``path_by_rule``) names what it refuses.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rxmesh.model._rules import PLAIN_PATH, path_by_rule


@given(
    st.one_of(
        st.text(alphabet="aZ09-._/", min_size=1, max_size=40),
        st.lists(st.text(alphabet="a-._", min_size=0, max_size=130), min_size=1, max_size=18).map(
            "/".join
        ),
    )
)
@settings(max_examples=600, deadline=None)
def test_the_path_shortcut_accepts_only_what_the_path_rule_accepts(path: str) -> None:
    """validate_path's one-match shortcut (shared by the reader) never accepts a path the rule
    itself refuses, even without reserved segments (the strictest reading)."""
    if PLAIN_PATH.fullmatch(path) is not None and len(path) <= 512:
        assert path_by_rule(path, allow_reserved=False) == path


@pytest.mark.parametrize(
    "path", ["_x", "a/_b", "a//b", "a/", "/a", ".", "a/..", "a/.b", "p" * 49, "a/" + "s" * 129]
)
def test_negative_control_the_shortcut_takes_no_path_the_rule_refuses_or_must_judge(
    path: str,
) -> None:
    """The property above holds only if the shortcut is strict: paths the rule refuses (or
    accepts only after a closer look, like '.b') never match it."""
    assert PLAIN_PATH.fullmatch(path) is None
