"""Plan stability: the compiled plans of the 22 TPC-H queries (sql/tpch/) and the five order-book queries
(sql/orderbook/), as EXPLAIN prints them, equal the text files under tests/golden/tpch/ and
tests/golden/orderbook/. A change to the front end, the rules, the compiler or the policy that changes a
plan shows here as a diff of the plan, to be read and, if meant, taken by rewriting the files:

    SPARK_IVM_REGOLD=1 ./build.sh test tests/test_golden_plans.py

Each query has the plan CREATE INCREMENTAL VIEW gives it without a depth (`<query>.default.plan`, the
depth that `heuristics.default_depth_plan` chooses, printed in its header) and, when that depth is not
1, its plan at depth 1 (`<query>.depth1.plan`), the other depth the views are tested at. Pure Python.
"""

from __future__ import annotations

import functools

import pytest

from spark_ivm.bench import orderbook, tpch
from spark_ivm.compiler.viewlet import compile_view
from spark_ivm.heuristics import default_depth_plan

from golden_files import GOLDEN, REGOLD, check_golden

SUITES = {
    "tpch": (tpch.read_query, tpch.column_names(), [f"q{n}" for n in range(1, 23)]),
    "orderbook": (orderbook.read_query, orderbook.SCHEMAS, list(orderbook.QUERIES)),
}
CASES = [(suite, name) for suite, (_, _, names) in SUITES.items() for name in names]


@functools.cache  # compiled once for both tests
def plans(suite: str, name: str) -> dict[str, str]:
    """The printed plans of one query by golden file name: its default plan, and depth 1 if that differs."""
    read_query, schemas, _ = SUITES[suite]
    sql = read_query(name).sql
    default = default_depth_plan(lambda depth: compile_view(sql, schemas, depth=depth))
    found = {f"{suite}/{name}.default": default.explain()}
    if default.depth != 1:
        found[f"{suite}/{name}.depth1"] = compile_view(sql, schemas, depth=1).explain()
    return found


@pytest.mark.parametrize("suite, name", CASES, ids=[f"{s}-{n}" for s, n in CASES])
def test_plan_equals_its_golden_file(suite, name):
    for golden_name, text in plans(suite, name).items():
        check_golden(golden_name, text)


def test_no_stale_golden_files():
    """Every golden file of these suites belongs to a plan compiled above (a query or depth dropped leaves
    none behind); SPARK_IVM_REGOLD=1 removes the others."""
    expected = {golden_name for suite, name in CASES for golden_name in plans(suite, name)}
    stale = sorted(
        f"{suite}/{path.name.removesuffix('.plan')}" for suite in SUITES for path in (GOLDEN / suite).glob("*.plan")
        if f"{suite}/{path.name.removesuffix('.plan')}" not in expected)
    if REGOLD:
        for golden_name in stale:
            (GOLDEN / f"{golden_name}.plan").unlink()
        stale = []
    assert not stale, f"golden files of no compiled plan: {stale}; SPARK_IVM_REGOLD=1 removes them"
