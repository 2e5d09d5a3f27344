"""Crash and resume: a REFRESH killed at any of its steps leaves the view consistent, and the next
REFRESH, in a new process, finishes the job exactly once.

The runtime ends the process with ``os._exit(17)`` at the refresh step named by the environment
variable ``SPARK_IVM_CRASH_AT`` (the steps are the ``_crash_point("…")`` calls in engine.py, read from
the source so that a new step is tested as soon as it exists). For every step, with a warehouse of
its own (embedded Derby admits one process per warehouse):

1. ``crash_worker.py setup --crash-at STEP`` creates two tables and a join + group-by view with NULL
   keys and values, changes both tables, and runs REFRESH → must exit with code 17;
2. ``crash_worker.py verify`` sees the view unchanged (crash before the MERGE commit) or fully
   refreshed (crash after it), runs REFRESH → the view equals the query, and a further REFRESH is
   "up to date".

The pipelines of the steps are independent, so a module fixture runs them side by side (each is two
Spark processes in a row) and every parametrized test checks its own step's outcome. Nothing here is
skipped; the module carries the `runtime` marker (select it with `-m runtime`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

# End-to-end runtime suites: run with `./build.sh test -m runtime` (see pyproject.toml).
pytestmark = pytest.mark.runtime

import spark_ivm.runtime.engine as engine

WORKER = Path(__file__).with_name("crash_worker.py")
TIMEOUT = 1200  # seconds per subprocess; a session start alone is ~15 s on an idle machine
PARALLEL = int(os.environ.get("SPARK_IVM_TEST_PROCESSES", str(min(4, os.cpu_count() or 2))))
EXPECTED_STEPS = {"after_progress", "after_deltas", "before_merge", "after_merge"}
COMMITTED_STEPS = {"after_merge"}  # steps after the MERGE, the one commit of a refresh


def crash_steps() -> list[str]:
    source = Path(engine.__file__).read_text()
    steps = list(dict.fromkeys(re.findall(r"""_crash_point\(\s*["']([A-Za-z0-9_]+)["']\s*\)""", source)))
    return steps or sorted(EXPECTED_STEPS)


STEPS = crash_steps()


@dataclass
class Run:
    proc: subprocess.CompletedProcess
    result: dict | None  # the worker's last `TAG <json>` line

    def log(self) -> str:
        return (f"\n--- exit {self.proc.returncode}; stdout ---\n{self.proc.stdout[-3000:]}"
                f"\n--- stderr ---\n{self.proc.stderr[-5000:]}")


def run_worker(warehouse: Path, *args: str, tag: str = "RESULT") -> Run:
    try:
        proc = subprocess.run([sys.executable, str(WORKER), str(warehouse), *args],
                              capture_output=True, text=True, timeout=TIMEOUT, cwd=str(WORKER.parent))
    except subprocess.TimeoutExpired as exc:
        proc = subprocess.CompletedProcess(exc.cmd, -1, str(exc.stdout or ""), f"timed out\n{exc.stderr or ''}")
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith(tag + " "):
            result = json.loads(line[len(tag) + 1:])
    return Run(proc, result)


def crash_then_resume(warehouse: Path, step: str) -> tuple[Run, Run | None]:
    crashed = run_worker(warehouse, "setup", "--crash-at", step, tag="CREATED")
    if crashed.proc.returncode != 17:
        return crashed, None
    return crashed, run_worker(warehouse, "verify")


@pytest.fixture(scope="module")
def pipelines(request, tmp_path_factory) -> dict[str, tuple[Run, Run | None]]:
    """Crash-then-resume of every selected step, run side by side."""
    selected = [s for s in STEPS if any(
        getattr(item, "callspec", None) is not None and item.callspec.params.get("step") == s
        for item in request.session.items)]
    with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL, len(selected)))) as pool:
        futures = {s: pool.submit(crash_then_resume, tmp_path_factory.mktemp(f"crash_{s}") / "wh", s)
                   for s in selected}
        return {s: f.result() for s, f in futures.items()}


def test_engine_has_the_documented_crash_points():
    assert engine.CRASH_ENV == "SPARK_IVM_CRASH_AT"
    assert EXPECTED_STEPS <= set(STEPS), STEPS


@pytest.mark.parametrize("step", STEPS)
def test_refresh_resumes_after_crash(step, pipelines):
    crashed, resumed = pipelines[step]
    assert crashed.proc.returncode == 17, f"REFRESH with SPARK_IVM_CRASH_AT={step} should exit with 17" + crashed.log()
    assert "RESULT " not in crashed.proc.stdout  # it died inside REFRESH
    created = crashed.result
    assert created is not None and created["created_view"] == created["created_query"], crashed.log()

    assert resumed is not None and resumed.proc.returncode == 0 and resumed.result is not None, resumed.log()
    out = resumed.result
    assert created["created_view"] != out["query"], "the changes must alter the view for the test to mean anything"

    # A crash never leaves a half-applied refresh visible: the view shows the query either as of
    # the last refresh (crash before the commit) or as of now (after it).
    if step in COMMITTED_STEPS:
        assert out["before_view"] == out["query"]
        assert out["refresh1"]["status"] == "up to date", out["refresh1"]
    elif step in EXPECTED_STEPS:
        assert out["before_view"] == created["created_view"]
        assert out["refresh1"]["status"] == "refreshed", out["refresh1"]
    else:  # a step added later: either side of the commit, nothing in between
        assert out["before_view"] in (created["created_view"], out["query"])

    # resumed: the view is the query, exactly once, and there is nothing left to do
    assert out["view_schema"] == out["query_schema"]
    assert out["view"] == out["query"]
    assert out["refresh2"] == {"status": "up to date", "rows_merged": 0}
