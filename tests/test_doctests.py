"""The examples in the modules' docstrings run and print what they show (pure Python)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Installed as spark_ivm.rules and spark_ivm.udfs (see pyproject.toml).
PACKAGES = {"spark_ivm": "spark_ivm", "rules": "spark_ivm.rules", "udfs": "spark_ivm.udfs"}


def _modules_with_examples() -> list[str]:
    found = []
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ">>> " in path.read_text(encoding="utf-8"):
                parts = path.relative_to(ROOT / folder).with_suffix("").parts
                parts = parts[:-1] if parts[-1] == "__init__" else parts
                found.append(".".join((package, *parts)))
    return found


MODULES = _modules_with_examples()


def test_some_modules_have_examples():
    assert MODULES, "no docstring examples found: the search is broken"


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name}: no example ran"
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed (run pytest -s to see them)"
