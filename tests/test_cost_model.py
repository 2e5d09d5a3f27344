"""The materialization policy by cost (compiler/estimate.py, heuristics.materializes): with the relations'
statistics, a map extracted from a delta is kept only where it is much smaller than the relations it
reads; otherwise the statements that would read it read the relations. Pure Python: estimates of small
calculus expressions, the decisions on the 22 TPC-H queries with the statistics of TPC-H at SF 1, what
EXPLAIN shows of them, and plans with maps left to their relations keeping every map equal to its
definition through random batches (the reference evaluator)."""

from __future__ import annotations

import functools
import random

import pytest

from spark_ivm.bench.tpch import read_query
from spark_ivm.calculus.expressions import Rel
from spark_ivm.calculus.parser import parse
from spark_ivm.compiler.estimate import Statistics, estimated_rows, source_rows
from spark_ivm.compiler.viewlet import compile_query
from spark_ivm.frontend.translate import translate
from spark_ivm.heuristics import MAP_ROWS_PERCENT_OF_SOURCE, Policy, default_depth_plan, materializes

from test_tpch_compile import QUERIES, SCHEMAS, check_maps_through_batches

# TPC-H at SF 1: rows per table (the specification's) and distinct values of the columns that join or
# group (the specification's, or as dbgen draws them: two thirds of the customers have orders).
TPCH_ROWS = {"region": 5, "nation": 25, "supplier": 10_000, "customer": 150_000, "part": 200_000,
             "partsupp": 800_000, "orders": 1_500_000, "lineitem": 6_001_215}
TPCH_DISTINCT = {
    "region": {"r_regionkey": 5},
    "nation": {"n_nationkey": 25, "n_regionkey": 5},
    "supplier": {"s_suppkey": 10_000, "s_nationkey": 25},
    "customer": {"c_custkey": 150_000, "c_nationkey": 25, "c_mktsegment": 5},
    "part": {"p_partkey": 200_000, "p_brand": 25, "p_type": 150, "p_size": 50, "p_container": 40},
    "partsupp": {"ps_partkey": 200_000, "ps_suppkey": 10_000},
    "orders": {"o_orderkey": 1_500_000, "o_custkey": 100_000, "o_orderdate": 2_406, "o_orderpriority": 5,
               "o_orderstatus": 3},
    "lineitem": {"l_orderkey": 1_500_000, "l_partkey": 200_000, "l_suppkey": 10_000, "l_shipdate": 2_526,
                 "l_commitdate": 2_466, "l_receiptdate": 2_554, "l_returnflag": 3, "l_linestatus": 2,
                 "l_shipmode": 7, "l_shipinstruct": 4, "l_linenumber": 7, "l_quantity": 50},
}
TPCH_SF1 = Statistics.of(TPCH_ROWS, TPCH_DISTINCT, SCHEMAS)

SMALL = Statistics.of({"O": 1_500, "L": 6_000, "C": 150},
                      {"O": {"ok": 1_500, "ck": 100}, "L": {"ok": 1_500, "pk": 200}, "C": {"ck": 150, "nk": 25}},
                      {"O": ["ok", "ck"], "L": ["ok", "pk"], "C": ["ck", "nk"]})


@functools.cache
def plans(name: str) -> tuple:
    """The query's default plan, and the plan at the same depth with TPC-H SF 1's statistics."""
    query = translate(read_query(name).sql, SCHEMAS)
    plain = default_depth_plan(lambda depth: compile_query(query, name=name, depth=depth))
    costed = compile_query(query, name=name, depth=plain.depth, policy=Policy(plain.depth, statistics=TPCH_SF1))
    return plain, costed


@pytest.mark.parametrize("text, rows", [
    ("AggSum([], O(o, c))", 1),  # a global sum: one row
    ("AggSum([o], L(o, p))", 1_500),  # grouped by a key with 1,500 values
    ("AggSum([o, p], L(o, p))", 6_000),  # by more keys than rows: the rows
    ("AggSum([c], O(o, c) * L(o, p))", 100),  # the join's 6,000 rows, by c's 100 values
    ("AggSum([n, p], C(c, n) * O(o, c) * L(o, p))", 5_000),  # 1,500 * 6,000 * 150 / (1,500 * 150) * 150 / 150…
    ("AggSum([o], L(o, p) * {p = 7})", 30),  # an `=` with a constant keeps 1/200 of the rows
    ("AggSum([o], L(o, p) * {p < 7})", 1_500),  # a range keeps a third: 2,000 rows, by 1,500 keys
    ("AggSum([o], L(o, p) * O(o, c) + L(o, p))", 3_000),  # a sum: its terms' rows
])
def test_estimated_rows_of_small_maps(text, rows):
    assert estimated_rows(parse(text), SMALL) == rows


def test_no_estimate_without_statistics_of_a_relation():
    definition = parse("AggSum([o], L(o, p) * X(p))")
    assert estimated_rows(definition, SMALL) is None and source_rows(definition, SMALL) is None
    assert materializes(None, 10) and materializes(10, None)


def test_a_map_is_kept_up_to_the_share_of_its_relations_rows():
    assert materializes(MAP_ROWS_PERCENT_OF_SOURCE, 100)
    assert not materializes(MAP_ROWS_PERCENT_OF_SOURCE + 1, 100)


@pytest.mark.parametrize("name", QUERIES)
def test_tpch_maps_with_statistics_are_smaller_than_what_they_read(name):
    plain, costed = plans(name)
    assert {m.name for m in costed.maps if m.level == 0} == {m.name for m in plain.maps if m.level == 0}
    for m in costed.maps:
        if m.level > 0:
            rows, read = estimated_rows(m.definition, TPCH_SF1), source_rows(m.definition, TPCH_SF1)
            assert 100 * rows <= MAP_ROWS_PERCENT_OF_SOURCE * read, (m.name, rows, read)
            assert any(n.startswith(f"kept: {m.name}, about {rows:,} rows") for n in costed.notes), m.name
    left = [n for n in costed.notes if n.startswith("not kept: ")]
    explained = costed.explain()
    assert all(f"-- {n}" in explained for n in costed.notes)
    # The statements that would read a map left out read base relations.
    if left:
        assert any(isinstance(x, Rel) for t in costed.triggers for s in t.statements for x in s.expr.walk())


def test_tpch_maps_as_large_as_lineitem_are_left_to_it():
    """Q5, Q9, Q17 and Q21 kept maps of a row per lineitem (6 million at SF 1); with statistics no map of
    any query is estimated at more than half of lineitem's rows."""
    def big(plan):
        return [m.name for m in plan.maps
                if m.level > 0 and estimated_rows(m.definition, TPCH_SF1) >= TPCH_ROWS["lineitem"]]

    for name in ("q5", "q9", "q17", "q21"):
        plain, costed = plans(name)
        assert big(plain) and not big(costed), name
        assert any("not kept: " in n and "lineitem" in n for n in costed.notes), costed.notes


@pytest.mark.parametrize("name", QUERIES)
def test_tpch_triggers_with_maps_left_to_relations_keep_maps_equal_to_their_definitions(name):
    """As test_tpch_compile's test of the same name without statistics: after each batch of an example on
    which the view selects rows and changes."""
    check_maps_through_batches(plans(name)[1], name, random.Random(f"{name}-costed"))
