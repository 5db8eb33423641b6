"""rxmesh: a reactive data mesh on RxPY that answers honestly when its store cannot be reached."""

from __future__ import annotations

from loguru import logger

logger.disable("rxmesh")

__all__: list[str] = []

__version__ = "0.1.0"
