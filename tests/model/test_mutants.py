"""Each invariant of the machine catches a deliberately broken variant of the product.

Every mutant (``tests/model/_mutants.py``) is applied with ``monkeypatch`` for one test and
undone after it. The machine runs with only the mutant's invariant armed (the others are
silenced, so a finding of another kind cannot stand in for it). It must fail on that invariant.
The map of invariants to mutants is in the docstring of ``tests/model/test_machine.py``.

The four mutants that put back the defects of issue 20 are checked here by replaying their
shortest sequences (fast, deterministic). The search for them takes about 45 s in all, so it
runs only with ``RXMESH_MODEL_MUTANT_SEARCH=1``.
"""

from __future__ import annotations

import os

import pytest

from ._harness import INVARIANTS, InvariantViolation
from ._machine import machine, profile, run
from ._mutants import MUTANTS, Mutant

SEARCH = profile(examples=3000, steps=12, shrink=False)
"""Stops at the first failure; every mutant below is caught within it (most in well under a
second, ``two-rows`` in ~7 s, the bug mutants in 4-30 s)."""

BUGS = {"bug1", "bug2", "bug3", "bug4"}
SEARCH_BUGS = os.environ.get("RXMESH_MODEL_MUTANT_SEARCH", "") not in ("", "0")


def test_every_invariant_has_a_mutant() -> None:
    assert {m.invariant for m in MUTANTS} == set(INVARIANTS)


@pytest.mark.parametrize(
    "mutant",
    [
        pytest.param(
            m,
            marks=[]
            if m.name not in BUGS or SEARCH_BUGS
            else [
                pytest.mark.skip(
                    reason="set RXMESH_MODEL_MUTANT_SEARCH=1 (replayed in test_found.py)"
                )
            ],
        )
        for m in MUTANTS
    ],
    ids=repr,
)
def test_the_machine_catches_the_mutant(mutant: Mutant, monkeypatch: pytest.MonkeyPatch) -> None:
    mutant.apply(monkeypatch)
    with pytest.raises(InvariantViolation) as caught:
        run(machine(only=frozenset({mutant.invariant})), SEARCH)
    assert caught.value.invariant == mutant.invariant, caught.value
