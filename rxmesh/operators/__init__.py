"""Pipeable reactivex operators of rxmesh."""

from __future__ import annotations

__all__: list[str] = []
