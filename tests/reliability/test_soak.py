"""The chaos soak's short variant (bench/soak.py --short) as a CI check of its invariants:
creates, updates, deletes and moves mixed, concurrent creates of one partition grouped, 0 lost,
0 duplicates, 0 overwritten-newer."""

from __future__ import annotations

import pytest

from tests.conftest import IN_CI
from tests.helpers import load_bench

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.mark.timeout(120)
def test_a_short_chaos_soak_loses_nothing_duplicates_nothing_and_empties_the_journal() -> None:
    soak = load_bench("soak")
    try:
        from rxmesh.testing import TemporaryPostgresCluster

        TemporaryPostgresCluster()
    except FileNotFoundError as exc:
        if IN_CI:
            pytest.fail(f"CI needs PostgreSQL server binaries: {exc}")
        pytest.skip(str(exc))

    report = soak.main(["--short", "--seed", "3"])

    assert report["writes_attempted"] == 4 * 150 + 150  # and the burst writer's 150
    # The burst writer's creates share one partition, 16 in flight: some went as write groups
    # (one statement for what waited behind busy lanes), under the same chaos and checks.
    assert report["write_groups"] > 0
    assert report["chaos"]["restarts"] == 1
    assert report["lost"] == 0, report["examples"]
    assert report["duplicates"] == 0
    assert report["request_id_mismatches"] == 0
    # Not asserted: dropped_but_present. A re-issue whose reply was lost after its INSERT
    # committed is settled by one confirming read (test_pinned.py); if the store is away again
    # for that read too, the verdict is an honest DROPPED "could not be confirmed".
    assert "dropped_but_present" in report
    assert report["unaccounted"] == 0, report["examples"]
    assert report["journal_files_left"] == 0, report["examples"]
    assert report["recover_seconds"] is not None
    assert report["evidence_write_created"]
    answered = (
        report["answered_created"]
        + report["answered_unavailable"]
        + sum(report["answered_judged"].values())
    )
    assert answered == report["writes_attempted"]  # every request answered exactly once
    assert report["answered_unavailable"] == (
        report["landed"] + report["already_present"] + report["dropped"]
    )  # and every UNAVAILABLE create got exactly one verdict
    # The verbs mixed in (issue 18): updates, deletes and moves all ran; every one recorded
    # got exactly one verdict, none acknowledged is missing, no newer write was overwritten.
    verbs = report["verbs"]
    assert verbs.get("update", 0) and verbs.get("delete", 0) and verbs.get("move", 0), verbs
    assert report["verbs_unaccounted"] == 0, report["verbs_examples"]
    assert report["verbs_lost"] == 0, report["verbs_examples"]
    assert report["overwritten_newer"] == 0, report["verbs_examples"]
