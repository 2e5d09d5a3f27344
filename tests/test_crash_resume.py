"""Crash and resume: a REFRESH killed at any of its steps leaves the view consistent, and the next
REFRESH, in a new process, finishes the job exactly once.

The runtime ends the process with ``os._exit(17)`` at the refresh step named by the environment
variable ``SPARK_IVM_CRASH_AT`` (the steps are the ``crash_point("…")`` calls in refresh.py, read from
the source so that a new step is tested as soon as it exists). One warehouse, one chain of processes,
each crashing at the next step (embedded Derby admits one process per warehouse, and a chain starts
one Spark process per step plus one, instead of two per step):

1. ``crash_worker.py setup --crash-at STEP1`` creates two tables and a join + group-by view with NULL
   keys and values, changes both tables, and runs REFRESH → must exit with code 17;
2. ``crash_worker.py verify --crash-at STEP2 --round 1`` sees the view unchanged (crash before the
   commit) or fully refreshed (crash after it), runs REFRESH → the view equals the query, and a
   further REFRESH is "up to date"; then it changes both tables again and runs REFRESH → exit 17;
3. and so on; the last process verifies the last step and exits 0.

The chains run once, both at the same time, in the background from the session's first test on (a worker
keeps about one of the two cores busy; see crash_chains.py and conftest.py); every parametrized test checks
its own step's outcome.

A second chain (``crash_worker.py ddl --stage N``, on a warehouse of its own) kills CREATE, REFRESH … FULL,
a compacting REFRESH and DROP at their crash points (``crash_worker.DDL_STAGES``; the points are
``crash_point`` calls in engine.py and refresh.py), and checks that the statement a user would run next, in
a new process, finishes the job: the view equals its query and refreshes on, or is gone entirely. Its last
stages kill REFRESH INCREMENTAL VIEWS inside the one commit of two views sharing a map store, before the
write and after it: a plain REFRESH INCREMENTAL VIEWS then applies the changes to both exactly once.
Nothing here is skipped; the module carries the `runtime` marker (select it with `-m runtime`).
"""

from __future__ import annotations

import pytest

# End-to-end (see pyproject.toml): part of ./build.sh test; all runtime suites: ./build.sh test -m runtime
pytestmark = pytest.mark.runtime

import spark_ivm.runtime.refresh as refresh
# tests/ is on the path of its test modules
from crash_chains import EXPECTED_STEPS, crash_steps
from crash_worker import DB, DDL_STAGES, SHARED, SHARED_STORE

COMMITTED_STEPS = {"after_write", "before_view"}  # steps after the write, the one commit of a refresh
STEPS = crash_steps()


@pytest.fixture(scope="module")
def chains(crash_chains):
    """The refresh chain's outcome by step and the DDL chain's runs (see crash_chains.py): started with the
    session's first test, run beside the others; this module's tests run last (conftest.py)."""
    return crash_chains.outcome()


def test_engine_has_the_documented_crash_points():
    assert refresh.CRASH_ENV == "SPARK_IVM_CRASH_AT"
    assert EXPECTED_STEPS <= set(STEPS), STEPS


@pytest.mark.parametrize("step", STEPS)
def test_refresh_resumes_after_crash(step, chains):
    crashed, resumed = chains[0][step]
    assert crashed.proc.returncode == 17, f"REFRESH with SPARK_IVM_CRASH_AT={step} should exit with 17" + crashed.log()
    assert crashed.found("REFRESHED") is None  # it died inside REFRESH
    created = crashed.found("CREATED")
    assert created is not None and created["created_view"] == created["created_query"], crashed.log()

    assert resumed is not None, crashed.log()
    out = resumed.found("RESULT")
    assert out is not None, resumed.log()
    assert resumed.proc.returncode in (0, 17), resumed.log()  # 17: it went on to crash at the next step
    assert created["created_view"] != out["query"], "the changes must alter the view for the test to mean anything"

    # A crash never leaves a half-applied refresh visible: the view shows the query either as of
    # the last refresh (crash before the commit, or before the view's definition was rewritten after
    # it) or as of now.
    if step in COMMITTED_STEPS:
        assert out["before_view"] in (created["created_view"], out["query"])
        assert out["refresh1"]["status"] == "up to date", out["refresh1"]
    elif step in EXPECTED_STEPS:
        assert out["before_view"] == created["created_view"]
        assert out["refresh1"]["status"] == "refreshed", out["refresh1"]
    else:  # a step added later: either side of the commit, nothing in between
        assert out["before_view"] in (created["created_view"], out["query"])

    # resumed: the view is the query, exactly once, and there is nothing left to do
    assert out["view_schema"] == out["query_schema"]
    assert out["view"] == out["query"]
    assert out["refresh2"] == {"status": "up to date", "rows_written": 0}


# -- crashes inside CREATE, REFRESH … FULL, a compacting REFRESH and DROP -------------------------------
# One more chain of processes on a warehouse of its own (crash_worker.py ddl): process N is killed inside
# the statement of DDL_STAGES[N], process N + 1 runs the statement a user would run next and goes on to
# be killed at the next stage.

@pytest.mark.parametrize("stage", range(len(DDL_STAGES)), ids=[f"{k}-{s}" for k, s in DDL_STAGES])
def test_statement_killed_inside_is_finished_by_the_next(stage, chains):
    runs = chains[1]
    kind, step = DDL_STAGES[stage]
    assert len(runs) > stage, "an earlier process of the chain did not crash" + runs[-1].log()
    crashed = runs[stage]
    assert crashed.proc.returncode == 17, f"{kind} with SPARK_IVM_CRASH_AT={step} should exit with 17" + crashed.log()
    assert crashed.found("NOCRASH") is None and crashed.found("RESET") is None, crashed.log()
    before = crashed.found("BEFORE")
    assert len(runs) > stage + 1, crashed.log()
    recovered = runs[stage + 1]
    out = recovered.found("RECOVERED")
    assert out is not None, recovered.log()
    assert recovered.proc.returncode in (0, 17), recovered.log()
    found = out["found"]

    if kind == "create":
        # The CREATE left a store (and a view definition) without a catalog entry; CREATE again removes
        # them, says so, and makes the view afresh: its maps are not added to the dead CREATE's.
        assert not found["entry"] and found["store"] and found["view"] == (step == "build_after_view"), out
        assert "ok" in out["create"], out["create"]
        assert "leftovers of a CREATE" in recovered.proc.stdout, recovered.log()
    elif kind == "full":
        assert found["entry"], out
        # The view definition stays readable through a rebuild: its old rows, or once rewritten the new ones.
        assert out["view_before"].get("ok") in (before["view"]["ok"], out["query_before"]), out["view_before"]
        refresh = out["refresh"]
        if "error" in refresh:  # the maps are gone or not the catalog entry's: an error asking for FULL
            assert refresh["ivm"] and "FULL" in refresh["message"] and f"{DB}.d" in refresh["message"], refresh
            assert out["full"] == {"ok": "rebuilt"}, out
        else:
            assert refresh["ok"] in ("refreshed", "up to date"), refresh
    elif kind == "compact":
        assert found == {"entry": True, "store": True, "view": True, "folder": True}, out
        # committed before the crash: the view shows the store before or after it, and nothing is applied twice
        assert out["view_before"]["ok"] in (before["view"]["ok"], before["query"]), out
        assert out["refresh"] == {"ok": "up to date"}, out
    elif kind == "drop":
        assert found["entry"] and not found["store"] and found["view"] == (step == "drop_after_store"), out
        assert out["drop"] == {"ok": f"dropped incremental view {DB}.d"}, out
        assert out["dropped"] == {"entry": False, "store": False, "view": False, "folder": False}, out
        assert "ok" in out["create"], out["create"]
    elif kind == "shared":
        check_shared_recovery(step, before, out)

    # whatever the crash: the view equals its query, and goes on refreshing
    assert out["equal"] == {"ok": True}, out
    # (after a shared stage, REFRESH INCREMENTAL VIEWS has just refreshed d too)
    assert out["refresh_after"] == {"ok": "up to date" if kind == "shared" else "refreshed"}, out
    assert out["equal_after"] == {"ok": True}, out
    assert out["parts_after"] == {"entry": True, "store": True, "view": True, "folder": True}, out


def check_shared_recovery(step: str, before: dict, out: dict) -> None:
    """REFRESH INCREMENTAL VIEWS killed inside the shared store's refresh (`before`: the views, their
    queries and the store just before it), then run again in a new process (`out`)."""
    views, queries = before["shared"]["views"], before["shared"]["queries"]
    assert all(views[v]["ok"] != queries[v] for v in SHARED), "the changes must alter both views"
    found, parts = out["shared_found"], before["parts"]
    # Nothing half made: both catalog entries and views, no table but those there were, and the store at
    # the version before the refresh (killed before its write) or one commit on (killed after it).
    assert found["entries"] == found["views"] == sorted(SHARED) and found["tables"] == parts["tables"], found
    assert SHARED_STORE in parts["tables"] and not {f"{v}__ivm_maps" for v in SHARED} & set(parts["tables"]), parts
    committed = step != "before_write"
    assert found["version"] == parts["version"] + committed, (found, parts)
    # Both views show the same side of the commit: each its rows before the refresh, or (once committed,
    # should a definition read the store) both their queries' rows.
    seen = out["shared_before"]
    assert seen["queries"] == queries, seen
    sides = {v: "before" if seen["views"][v] == views[v] else "query" if seen["views"][v] == {"ok": queries[v]}
             else seen["views"][v] for v in SHARED}
    assert set(sides.values()) == {"before"} or (committed and set(sides.values()) == {"query"}), sides

    # Recovery by a plain REFRESH INCREMENTAL VIEWS: the changes applied once (committed by the dead
    # refresh, or now in one more commit), the definitions rewritten, each view its query.
    qualified = [f"{DB}.{v}" for v in SHARED]
    status = "up to date" if committed else "refreshed"
    assert out["refresh_all"] == {"ok": {**{v: status for v in qualified}, f"{DB}.d": "up to date"}}, out["refresh_all"]
    recovered = out["shared_recovered"]
    assert recovered["version"] == parts["version"] + 1 and recovered["tables"] == parts["tables"], recovered
    assert out["shared_equal"] == {v: {"ok": True} for v in SHARED}, out["shared_equal"]

    # and both go on: a change to both tables, one commit for both views, each its query
    assert out["refresh_all_after"] == {"ok": {v: "refreshed" for v in [*qualified, f"{DB}.d"]}}, out
    assert out["shared_equal_after"] == {v: {"ok": True} for v in SHARED}, out["shared_equal_after"]
    after = out["shared_after"]
    assert after["version"] == parts["version"] + 2 and after["tables"] == parts["tables"], after
    assert after["entries"] == after["views"] == sorted(SHARED), after
