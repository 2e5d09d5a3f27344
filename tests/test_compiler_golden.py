"""Golden tests: the worked examples of the design compile to exactly the maps and triggers shown
there. Plans are compared with text fixtures in tests/golden/, rewritten only on purpose:

    SPARK_IVM_REGOLD=1 ./build.sh test tests/test_compiler_golden.py

(see tests/golden_files.py; the TPC-H and order-book plans are in test_golden_plans.py).
"""

from __future__ import annotations

import pytest

from spark_ivm import compile_view
from spark_ivm.calculus.analysis import map_names
from spark_ivm.calculus.evaluator import Database, apply_batch, initial_maps
from spark_ivm.calculus.parser import parse
from spark_ivm.compiler.viewlet import compile_maps
from spark_ivm.heuristics import Policy

from golden_files import check_golden


def statements(plan, relation):
    return [s.text() for s in plan.trigger(relation).statements]


def test_orders_lineitem_exchange_rate():
    plan = compile_maps([("q", parse("AggSum([], O(k, r) * L(k, p) * p * r)"))], strict=True)
    assert [m.name for m in plan.maps] == ["q", "q_mO", "q_mL"]
    assert plan.map("q_mO").text() == "DECLARE MAP q_mO[k] := AggSum([k], L(k, p) * p);"
    assert plan.map("q_mL").text() == "DECLARE MAP q_mL[k] := AggSum([k], O(k, r) * r);"
    assert statements(plan, "O") == [
        "q[] += AggSum([], ΔO(k, r) * r * q_mO[k]);",
        "q_mL[k] += AggSum([k], ΔO(k, r) * r);",
    ]
    assert statements(plan, "L") == [
        "q[] += AggSum([], ΔL(k, p) * p * q_mL[k]);",
        "q_mO[k] += AggSum([k], ΔL(k, p) * p);",
    ]
    check_golden("orders_lineitem", plan.explain())


def test_tutorial_query_and_its_numbers():
    plan = compile_maps([("Q", parse("AggSum([], R(A, B) * S(B, C) * A)"))], strict=True)
    assert plan.map("Q_mS").text() == "DECLARE MAP Q_mS[B] := AggSum([B], R(A, B) * A);"
    assert statements(plan, "S")[0] == "Q[] += AggSum([], ΔS(B, C) * Q_mS[B]);"
    assert statements(plan, "R")[0] == "Q[] += AggSum([], ΔR(A, B) * A * Q_mR[B]);"
    db = Database({"R": {(1, 1): 1, (1, 2): 1, (2, 2): 1}, "S": {(1, 1): 2, (2, 2): 1}})
    initial_maps(plan, db)
    assert db.maps["Q"] == {(): 5}
    assert db.maps["Q_mS"][(2,)] == 3
    apply_batch(plan, db, "S", {(2, 1): 1})
    assert db.maps["Q"] == {(): 8}
    check_golden("tutorial", plan.explain())


def test_tutorial_query_from_sql_has_the_query_map_and_m_s():
    plan = compile_view("SELECT SUM(A) FROM R, S WHERE R.B = S.B", {"R": ["A", "B"], "S": ["B", "C"]}, name="q")
    sum_map = next(m for m in plan.maps if m.name.startswith("q_sum"))
    s_statement = next(s for s in plan.trigger("S").statements if s.target == sum_map.name)
    (extracted,) = map_names(s_statement.expr)
    m_s = plan.map(extracted)
    assert len(m_s.keys) == 1 and "R(" in m_s.text() and "S(" not in m_s.text()
    check_golden("tutorial_sql", plan.explain())


def test_self_join_batch_joins_with_itself():
    plan = compile_view("SELECT SUM(r1.A * r2.B) FROM R r1, R r2 WHERE r1.B = r2.A", {"R": ["A", "B"]}, name="q")
    db = Database({"R": {(1, 1): 2}})
    initial_maps(plan, db)
    target = next(m.name for m in plan.maps if m.name.startswith("q_sum"))
    assert db.maps[target] == {(): 4}
    apply_batch(plan, db, "R", {(1, 1): 1})
    assert db.maps[target] == {(): 9}
    apply_batch(plan, db, "R", {(1, 1): -1})
    assert db.maps[target] == {(): 4}
    check_golden("self_join_sql", plan.explain())


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_depth_limits_the_hierarchy(depth):
    plan = compile_maps([("q", parse("AggSum([], O(k, r) * L(k, p) * p * r)"))], strict=True)
    limited = compile_maps([("q", parse("AggSum([], O(k, r) * L(k, p) * p * r)"))], Policy(depth), strict=True)
    if depth == 0:
        assert [m.name for m in limited.maps] == ["q"]
        assert all(s.op == ":=" for t in limited.triggers for s in t.statements)
    elif depth == 1:
        assert [m.name for m in limited.maps] == ["q"]
        assert "L(k, p)" in statements(limited, "O")[0]
    else:
        assert len(limited.maps) == len(plan.maps)
