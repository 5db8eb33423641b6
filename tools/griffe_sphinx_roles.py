"""A griffe extension for the API reference (configured in mkdocs.yml).

- rxmesh's docstrings use Sphinx roles (``:class:`~rxmesh.cache.SyncedQueryCache```), which
  mkdocstrings would print raw. Each role becomes an optional cross-reference: a link when the
  object is in the reference, the name in code otherwise (never a broken link, so
  ``mkdocs build --strict`` stays meaningful).
- A pydantic model documents its fields under ``Args:``; griffe sees no ``__init__`` and would
  show each as a "required" parameter. The descriptions move onto the fields themselves, which
  are then listed as attributes with their types and defaults.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Attribute, Class, Docstring, Extension, Object

ROLE = re.compile(r":(?:py:)?(?:class|meth|func|data|attr|exc|mod|obj|const):`(~?)([^`<>]+)`")
ENTRY = re.compile(r"^ {4}(\w+)(?: \([^)]*\))?: (.*)$")


def args_section(text: str) -> tuple[int, int, dict[str, str]] | None:
    """Where the ``Args:`` section of ``text`` starts and ends (line numbers), and its entries."""
    lines = text.split("\n")
    if "Args:" not in lines:
        return None
    start = lines.index("Args:")
    entries: dict[str, str] = {}
    end = start + 1
    while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
        entry = ENTRY.match(lines[end])
        if entry:
            name = entry.group(1)
            entries[name] = entry.group(2)
        elif lines[end].strip() and entries:
            entries[name] += " " + lines[end].strip()
        elif not lines[end].strip() and end + 1 < len(lines) and not lines[end + 1].startswith(" "):
            break
        end += 1
    return start, end, entries


def render(text: str) -> str:
    """``text`` with each Sphinx role as an optional autorefs cross-reference."""

    def one(match: re.Match[str]) -> str:
        short, target = match.group(1) == "~", match.group(2).strip()
        identifier = target.removesuffix("()")
        shown = target.rsplit(".", 1)[-1] if short else target
        return f'<autoref identifier="{identifier}" optional><code>{shown}</code></autoref>'

    return ROLE.sub(one, text)


class SphinxRoles(Extension):
    """Renders Sphinx roles, and lists pydantic models' fields with their defaults."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = render(obj.docstring.value)

    def on_class_members(self, *, cls: Class, **kwargs: Any) -> None:
        if cls.docstring is None or "__init__" in cls.members:
            return
        section = args_section(cls.docstring.value)
        if section is None:
            return
        first, last, entries = section
        fields = {
            name: member
            for name, member in cls.members.items()
            if isinstance(member, Attribute) and name in entries
        }
        if not entries or set(entries) != set(fields):
            return  # not a model's field list
        for name, field in fields.items():
            field.docstring = Docstring(entries[name], parent=field)
        lines = cls.docstring.value.split("\n")
        cls.docstring.value = "\n".join(lines[:first] + lines[last:]).strip()
