"""The chains of worker processes of test_crash_resume.py (not a test module), run in the background.

The chains take minutes, and their workers keep a little more than one of the two cores busy, so the test
session starts them with its first test (conftest.py) and goes on with the other tests meanwhile; the
crash tests, run last, read the outcome (`outcome`). Each worker is a process of its own (crash_worker.py);
`stop` kills those still running when the session ends before the chains do.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import spark_ivm.runtime.refresh as refresh
from crash_worker import DDL_STAGES

WORKER = Path(__file__).with_name("crash_worker.py")
TIMEOUT = 1200  # seconds per subprocess: far above a worker's few statements, even on a loaded machine
EXPECTED_STEPS = {"after_progress", "after_deltas", "before_write", "after_write", "before_view"}
MODULE = "test_crash_resume.py"


def crash_steps() -> list[str]:
    """The crash points of a refresh, read from the source so that a new step is tested as soon as it exists."""
    source = Path(refresh.__file__).read_text()
    steps = list(dict.fromkeys(re.findall(r"""crash_point\(\s*["']([A-Za-z0-9_]+)["']\s*\)""", source)))
    return steps or sorted(EXPECTED_STEPS)


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


class Chains:
    """The refresh chain and the DDL chain, run at the same time in threads of their own."""

    def __init__(self):
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._stopped = False
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="crash-chain")
        self._refreshes: Future | None = None
        self._ddl: Future | None = None
        # Each worker gets its own copy of this environment: with env=None, a worker started while the test
        # session's thread sets a variable (the Spark session does, when it starts) can read the process's
        # environment while it is reallocated, and fail to start ("Bad address").
        self._environment = dict(os.environ)

    def start(self, steps: list[str], ddl: bool, folder: Path) -> None:
        self._refreshes = self._pool.submit(self._refresh_chain, folder / "crash" / "wh", steps)
        self._ddl = self._pool.submit(self._ddl_chain, folder / "crash_ddl" / "wh") if ddl else None

    def outcome(self) -> tuple[dict[str, tuple[Run, Run | None]], list[Run]]:
        """Step -> (the process that crashed at it, the one that resumed after it); the DDL chain's runs."""
        return self._refreshes.result(), (self._ddl.result() if self._ddl is not None else [])

    def stop(self) -> None:
        """Kill the workers still running, start no more, and wait for the chains' threads."""
        with self._lock:
            self._stopped = True
            for proc in self._running:
                proc.kill()
        self._pool.shutdown(wait=True)

    def _run(self, warehouse: Path, *args: str) -> Run:
        with self._lock:
            if self._stopped:
                return Run(subprocess.CompletedProcess(args, -1, "", "not run: the test session ended"))
            proc = subprocess.Popen([sys.executable, str(WORKER), str(warehouse), *args], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, cwd=str(WORKER.parent),
                                    env=self._environment)
            self._running.add(proc)
        try:
            out, err = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err = f"timed out\n{err}"
        finally:
            with self._lock:
                self._running.discard(proc)
        return Run(subprocess.CompletedProcess(proc.args, proc.returncode, out or "", err or ""))

    def _refresh_chain(self, warehouse: Path, selected: list[str]) -> dict[str, tuple[Run, Run | None]]:
        """Step -> (the process that crashed at it, the process that resumed after it), for every
        selected step, from one chain of processes on one warehouse."""
        warehouse.parent.mkdir(parents=True, exist_ok=True)
        outcome: dict[str, tuple[Run, Run | None]] = {}
        process = self._run(warehouse, "setup", "--crash-at", selected[0]) if selected else None
        for k, step in enumerate(selected):
            if process.proc.returncode != 17:  # the chain is broken: this step and the later ones fail
                outcome.update({s: (process, None) for s in selected[k:]})
                break
            more = ["--crash-at", selected[k + 1], "--round", str(k + 1)] if k + 1 < len(selected) else []
            resumed = self._run(warehouse, "verify", *more)
            outcome[step] = (process, resumed)
            process = resumed
        return outcome

    def _ddl_chain(self, warehouse: Path) -> list[Run]:
        """Process N is killed inside the statement of DDL_STAGES[N], process N + 1 runs the statement a user
        would run next and goes on to be killed at the next stage."""
        warehouse.parent.mkdir(parents=True, exist_ok=True)
        chain = [self._run(warehouse, "ddl", "--stage", "0")]
        for stage in range(1, len(DDL_STAGES) + 1):
            if chain[-1].proc.returncode != 17:  # the chain is broken: the later stages fail
                break
            chain.append(self._run(warehouse, "ddl", "--stage", str(stage)))
        return chain


def selected(items, param: str) -> list:
    """The values of `param` of the selected tests of test_crash_resume.py."""
    return [item.callspec.params[param] for item in items
            if Path(str(item.fspath)).name == MODULE and getattr(item, "callspec", None) is not None
            and param in item.callspec.params]
