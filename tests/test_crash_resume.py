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

The chain runs once in a module fixture; every parametrized test checks its own step's outcome.
Nothing here is skipped; the module carries the `runtime` marker (select it with `-m runtime`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# End-to-end (see pyproject.toml): part of ./build.sh test; all runtime suites: ./build.sh test -m runtime
pytestmark = pytest.mark.runtime

import spark_ivm.runtime.refresh as refresh

WORKER = Path(__file__).with_name("crash_worker.py")
TIMEOUT = 1200  # seconds per subprocess; a session start alone is ~15 s on an idle machine
EXPECTED_STEPS = {"after_progress", "after_deltas", "before_write", "after_write", "before_view"}
COMMITTED_STEPS = {"after_write", "before_view"}  # steps after the write, the one commit of a refresh


def crash_steps() -> list[str]:
    source = Path(refresh.__file__).read_text()
    steps = list(dict.fromkeys(re.findall(r"""crash_point\(\s*["']([A-Za-z0-9_]+)["']\s*\)""", source)))
    return steps or sorted(EXPECTED_STEPS)


STEPS = crash_steps()


@dataclass
class Run:
    proc: subprocess.CompletedProcess

    def found(self, tag: str) -> dict | None:
        """The json of the worker's first line `TAG <json>`."""
        for line in self.proc.stdout.splitlines():
            if line.startswith(tag + " "):
                return json.loads(line[len(tag) + 1:])
        return None

    def log(self) -> str:
        return (f"\n--- exit {self.proc.returncode}; stdout ---\n{self.proc.stdout[-3000:]}"
                f"\n--- stderr ---\n{self.proc.stderr[-5000:]}")


def run_worker(warehouse: Path, *args: str) -> Run:
    try:
        proc = subprocess.run([sys.executable, str(WORKER), str(warehouse), *args],
                              capture_output=True, text=True, timeout=TIMEOUT, cwd=str(WORKER.parent))
    except subprocess.TimeoutExpired as exc:
        proc = subprocess.CompletedProcess(exc.cmd, -1, str(exc.stdout or ""), f"timed out\n{exc.stderr or ''}")
    return Run(proc)


@pytest.fixture(scope="module")
def pipelines(request, tmp_path_factory) -> dict[str, tuple[Run, Run | None]]:
    """Step -> (the process that crashed at it, the process that resumed after it), for every
    selected step, from one chain of processes on one warehouse."""
    selected = [s for s in STEPS if any(
        getattr(item, "callspec", None) is not None and item.callspec.params.get("step") == s
        for item in request.session.items)]
    warehouse = tmp_path_factory.mktemp("crash") / "wh"
    outcome: dict[str, tuple[Run, Run | None]] = {}
    process = run_worker(warehouse, "setup", "--crash-at", selected[0]) if selected else None
    for k, step in enumerate(selected):
        if process.proc.returncode != 17:  # the chain is broken: this step and the later ones fail
            outcome.update({s: (process, None) for s in selected[k:]})
            break
        more = ["--crash-at", selected[k + 1], "--round", str(k + 1)] if k + 1 < len(selected) else []
        resumed = run_worker(warehouse, "verify", *more)
        outcome[step] = (process, resumed)
        process = resumed
    return outcome


def test_engine_has_the_documented_crash_points():
    assert refresh.CRASH_ENV == "SPARK_IVM_CRASH_AT"
    assert EXPECTED_STEPS <= set(STEPS), STEPS


@pytest.mark.parametrize("step", STEPS)
def test_refresh_resumes_after_crash(step, pipelines):
    crashed, resumed = pipelines[step]
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
