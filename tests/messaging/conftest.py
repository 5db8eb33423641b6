"""Fixtures for the messaging tests: a loguru capture."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from loguru import logger


@pytest.fixture
def log_records() -> Iterator[list[dict[str, Any]]]:
    """Every rxmesh log record emitted during the test (level name, message, extra)."""
    records: list[dict[str, Any]] = []

    def sink(message: Any) -> None:
        record = message.record
        records.append(
            {"level": record["level"].name, "message": record["message"], "extra": record["extra"]}
        )

    logger.enable("rxmesh")
    handler_id = logger.add(sink, level="DEBUG")
    try:
        yield records
    finally:
        logger.remove(handler_id)
        logger.disable("rxmesh")
