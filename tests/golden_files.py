"""Golden files: text a test compares with a file under tests/golden/, rewritten only on purpose:

    SPARK_IVM_REGOLD=1 ./build.sh test tests/test_compiler_golden.py tests/test_golden_plans.py

A mismatch fails with a unified diff of the file against the text compiled now.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"
REGOLD = bool(os.environ.get("SPARK_IVM_REGOLD"))
MAX_DIFF_LINES = 120  # a plan that changes everywhere still fails with a readable message


def check_golden(name: str, text: str) -> None:
    """`text` equals tests/golden/<name>.plan (written first under SPARK_IVM_REGOLD)."""
    path = GOLDEN / f"{name}.plan"
    shown = f"tests/golden/{name}.plan"
    if REGOLD:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if not path.exists():
        pytest.fail(f"missing golden file {shown}; run with SPARK_IVM_REGOLD=1 to create it", pytrace=False)
    expected = path.read_text(encoding="utf-8")
    if text == expected:
        return
    diff = list(difflib.unified_diff(expected.splitlines(), text.splitlines(), shown, "compiled now", lineterm=""))
    if len(diff) > MAX_DIFF_LINES:
        diff = diff[:MAX_DIFF_LINES] + [f"… {len(diff) - MAX_DIFF_LINES} more lines of diff"]
    pytest.fail(f"the plan differs from {shown} (SPARK_IVM_REGOLD=1 rewrites it if the change is meant):\n"
                + "\n".join(diff), pytrace=False)
