"""Fixtures shared by the operator tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loguru import logger


@pytest.fixture
def warnings_logged() -> Iterator[list[str]]:
    """rxmesh's WARNING-and-above lines, as ``"<LEVEL> <message>"``, for this test only."""
    lines: list[str] = []
    logger.enable("rxmesh")
    sink = logger.add(lambda m: lines.append(m), level="WARNING", format="{level} {message}")
    try:
        yield lines
    finally:
        logger.remove(sink)
        logger.disable("rxmesh")
