"""A query as SQL: the partitions it can reach, and the conditions of its statements (the path
prefix, the node type, the content filter), parameters only."""

from __future__ import annotations

from rxmesh.model import Filter, NodeQuery, partition_of, validate_path
from rxmesh.providers.postgres._filters import to_sql

__all__ = ["conditions", "scope"]


def scope(query: NodeQuery) -> tuple[str, list[str] | None]:
    """The path prefix of ``query`` (no trailing ``/``) and the partitions it can match
    (``None``: every partition there is; checked partition names)."""
    prefix = query.path_prefix.rstrip("/")
    wanted: list[str] | None = None
    if query.partition is not None:
        wanted = [query.partition]
    if prefix:
        head = partition_of(prefix)
        wanted = [] if wanted is not None and head not in wanted else [head]
    for partition in wanted or ():
        validate_path(partition, allow_reserved=False)
    return prefix, wanted


def conditions(
    prefix: str, node_type: str | None, where: Filter | None, args: list[object]
) -> tuple[list[str], list[str]]:
    """The conditions on where a row is (under ``prefix``) and on what it holds (its type, its
    content), their parameters appended to ``args``. Each appears only when asked for: a
    condition a parameter switched off would get one generic plan for every shape."""
    under: list[str] = []
    if prefix:
        args.append(prefix)
        under.append(f"(path = ${len(args)} OR starts_with(path, ${len(args)} || '/'))")
    holds: list[str] = []
    if node_type is not None:
        args.append(node_type)
        holds.append(f"node_type = ${len(args)}")
    if where is not None:
        sql, values = to_sql(where, len(args) + 1)
        args.extend(values)
        holds.append(sql)
    return under, holds
