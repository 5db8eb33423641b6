"""rxmesh.logs.route_to_stdlib: rxmesh's loguru records in ``logging``, seen through caplog.

Fails at 1d389e8 because there was no route: under uvicorn (stdlib ``logging``) rxmesh's records
went nowhere (five feed losses, zero log lines).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from loguru import logger

from rxmesh.health import HealthRegistry
from rxmesh.logs import route_to_stdlib


def failing_check() -> None:
    raise ConnectionRefusedError("store away")


def report_once() -> None:
    """One real rxmesh record: a health check that raises is logged at ERROR by rxmesh.health,
    with the check's name and the error's type bound."""
    registry = HealthRegistry()
    registry.register("store", failing_check)
    asyncio.run(registry.report())


@pytest.fixture
def caplog_rxmesh(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    yield caplog
    logger.disable("rxmesh")


def rxmesh_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("rxmesh")]


def test_records_reach_logging_under_the_modules_name_with_level_and_bound_fields(
    caplog_rxmesh: pytest.LogCaptureFixture,
) -> None:
    route = route_to_stdlib()
    try:
        report_once()
    finally:
        route.stop()
    (record,) = rxmesh_records(caplog_rxmesh)
    assert record.name == "rxmesh.health"
    assert record.levelno == logging.ERROR
    assert record.getMessage() == "health check 'store' raised ConnectionRefusedError: store away"
    assert record.__dict__["check"] == "store"
    assert record.__dict__["error_type"] == "ConnectionRefusedError"
    assert record.exc_info is not None and record.exc_info[0] is ConnectionRefusedError
    assert record.funcName == "_raised"


def test_control_other_loguru_users_are_not_routed(
    caplog_rxmesh: pytest.LogCaptureFixture,
) -> None:
    route = route_to_stdlib()
    try:
        logger.bind(user="app").error("the application's own record")
    finally:
        route.stop()
    assert caplog_rxmesh.records == []


def test_control_stopping_or_disabling_stops_the_route(
    caplog_rxmesh: pytest.LogCaptureFixture,
) -> None:
    report_once()  # the library's default: disabled, nothing routed
    route = route_to_stdlib()
    logger.disable("rxmesh")
    report_once()
    route.stop()
    assert not route.active
    report_once()
    assert rxmesh_records(caplog_rxmesh) == []


def test_the_logging_configuration_decides_and_levels_map(
    caplog_rxmesh: pytest.LogCaptureFixture,
) -> None:
    logging.getLogger("rxmesh.health").setLevel(logging.CRITICAL)
    route = route_to_stdlib()
    try:
        report_once()  # ERROR below the logger's CRITICAL: not written
        logging.getLogger("rxmesh.health").setLevel(logging.NOTSET)
        logger.patch(lambda r: r.update(name="rxmesh.web")).success("a success")
        logger.patch(lambda r: r.update(name="rxmesh.web")).trace("a trace")
    finally:
        route.stop()
        logging.getLogger("rxmesh.health").setLevel(logging.NOTSET)
    assert [(r.name, r.levelno) for r in rxmesh_records(caplog_rxmesh)] == [
        ("rxmesh.web", logging.INFO),
        ("rxmesh.web", logging.DEBUG),
    ]
