"""Each invariant of the machine catches a deliberately broken variant of the product.

Every mutant (``tests/machine/_mutants.py``) is applied with ``monkeypatch`` for one test and
undone after it. The machine runs with only the mutant's invariant armed (the others are
silenced, so a finding of another kind cannot stand in for it). It must fail on that invariant.
The map of invariants to mutants is in the docstring of ``tests/machine/test_machine.py``.

The four mutants that put back the defects of issue 20 are checked in CI by replaying their
shortest sequences (``tests/machine/test_found.py``: fast, deterministic). Searching for them
takes ~5 minutes (measured: bug 3 1 s, bug 2 4 s, bug 1 41 s, bug 4 255 s), so the search runs
only with ``RXMESH_MODEL_MUTANT_SEARCH=1``. So do the four of issue 31 (``stranger-settles``,
``paths-race``, ``basis-forgets-its-write``, ``reuse-is-landed``): the search catches each within
:data:`SEARCH` (measured: 8 s, 46 s, 26 s, 16 s), and ``test_found.py`` replays a sequence for
each, which fails with the mutant put back.
"""

from __future__ import annotations

import os

import pytest

from ._harness import INVARIANTS, InvariantViolation
from ._machine import machine, profile, run
from ._mutants import MUTANTS, Mutant

SEARCH = profile(examples=3000, steps=12, shrink=False)
"""Stops at the first failure; every mutant run in CI is caught within it (most in well under a
second, ``two-rows`` in ~3 s)."""

BUG_SEARCH = profile(examples=8000, steps=24, shrink=False)
"""For the four mutants of issue 20 (opt-in): each needs a few hundred to a few thousand
examples, depending on the seed."""

BUGS = {"bug1", "bug2", "bug3", "bug4"}
ISSUE31 = {"stranger-settles", "paths-race", "basis-forgets-its-write", "reuse-is-landed"}
SEARCH_BUGS = os.environ.get("RXMESH_MODEL_MUTANT_SEARCH", "") not in ("", "0")


def test_every_invariant_has_a_mutant() -> None:
    assert {m.invariant for m in MUTANTS} == set(INVARIANTS)


def _marks(mutant: Mutant) -> list[pytest.MarkDecorator]:
    if mutant.name not in BUGS | ISSUE31:
        return []
    if SEARCH_BUGS:
        return [pytest.mark.timeout(1800)]
    return [pytest.mark.skip(reason="set RXMESH_MODEL_MUTANT_SEARCH=1 (replayed: test_found.py)")]


@pytest.mark.parametrize("mutant", [pytest.param(m, marks=_marks(m)) for m in MUTANTS], ids=repr)
def test_the_machine_catches_the_mutant(mutant: Mutant, monkeypatch: pytest.MonkeyPatch) -> None:
    mutant.apply(monkeypatch)
    with pytest.raises(InvariantViolation) as caught:
        run(
            machine(only=frozenset({mutant.invariant})),
            BUG_SEARCH if mutant.name in BUGS else SEARCH,
        )
    assert caught.value.invariant == mutant.invariant, caught.value
