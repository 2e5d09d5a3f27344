"""The policy's tunable thresholds: every UPPERCASE number of `spark_ivm.heuristics` is registered in
`heuristics.THRESHOLDS` with its type, default and meaning, and docs/design.md lists them (pure Python)."""

from __future__ import annotations

import re
from pathlib import Path

from spark_ivm import config, heuristics

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"


def _numeric_constants(module) -> dict[str, int | float]:
    return {name: value for name, value in vars(module).items()
            if re.fullmatch(r"[A-Z][A-Z0-9_]*", name) and isinstance(value, (int, float)) and not isinstance(value, bool)}


def test_every_numeric_constant_is_a_registered_threshold():
    constants = _numeric_constants(heuristics)
    assert set(constants) == set(heuristics.THRESHOLDS), "declare each threshold with heuristics._threshold"
    for name, threshold in heuristics.THRESHOLDS.items():
        assert threshold.name == name
        assert threshold.default == constants[name] and threshold.type is type(constants[name]), name
        assert threshold.doc and "\n" not in threshold.doc, name


def test_a_setting_whose_default_is_a_threshold_takes_it_from_there():
    assert config.FULL_REFRESH_PERCENT.default == heuristics.FULL_REFRESH_PERCENT


def _row(threshold) -> list[str]:
    return [f"`{threshold.name}`", threshold.type.__name__, f"{threshold.default:,}", threshold.doc]


def test_design_doc_lists_every_threshold():
    lines = DESIGN.read_text(encoding="utf-8").splitlines()
    start = lines.index("## Thresholds") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines[start:end]
            if line.startswith("|")]
    expected = [_row(t) for t in heuristics.THRESHOLDS.values()]
    table = "\n".join("| " + " | ".join(r) + " |" for r in expected)
    assert rows[2:] == expected, f"the table under '## Thresholds' in docs/design.md should read:\n{table}"
