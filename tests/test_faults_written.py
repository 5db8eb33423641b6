"""describe_not_attempted(..., written=...): "Nothing was written" only when nothing was."""

from __future__ import annotations

from rxmesh.faults import describe_not_attempted


def test_with_records_written_the_text_names_them_and_never_says_nothing_was_written() -> None:
    text = describe_not_attempted("Node creation at 'p/x'", written=["p/_owner", "p"])
    assert "Nothing was written" not in text
    assert "'p/_owner'" in text
    assert "'p'" in text
    assert "unreachable" in text
    assert "same node id" in text
    assert "Unexpected error" not in text


def test_negative_control_with_nothing_written_the_text_is_the_spec_one() -> None:
    text = describe_not_attempted("Node creation at 'p/x'")
    assert text == describe_not_attempted("Node creation at 'p/x'", written=())
    assert "Nothing was written" in text
    assert "same node id" in text
