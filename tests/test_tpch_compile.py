"""The 22 TPC-H queries, as the specification writes them, translate and compile at depth 1 and with
unlimited depth; on small random TPC-H-shaped databases (keys from small domains so that joins match,
values that the queries' predicates select, no NULLs as in TPC-H), running the plan's triggers after
batches of inserts, deletes and updates of every table a query reads keeps every map equal to
re-evaluating its definition."""

from __future__ import annotations

import datetime
import random
from decimal import Decimal

import pytest

from spark_ivm import compile_view
from spark_ivm.analysis import map_names, reads_database
from spark_ivm.evaluator import Database, apply_batch, evaluate_map, initial_maps
from spark_ivm.heuristics import MAX_TRIGGER_STATEMENTS, default_depth_plan, statement_count
from spark_ivm.tpch import SCHEMAS as DDL
from spark_ivm.tpch import _split_columns, read_query

QUERIES = [f"q{n}" for n in range(1, 23)]

COLUMNS = {table: [tuple(c.strip().split(" ", 1)) for c in _split_columns(ddl)] for table, ddl in DDL.items()}
SCHEMAS = {table: [name for name, _ in columns] for table, columns in COLUMNS.items()}


@pytest.mark.parametrize("depth", [1, None], ids=["depth1", "unlimited"])
@pytest.mark.parametrize("name", QUERIES)
def test_tpch_query_compiles(name, depth):
    plan = compile_view(read_query(name).sql, SCHEMAS, depth=depth)
    assert plan.maps and plan.triggers
    assert set(plan.relations) == set(plan.query.relations)


def test_default_plan_stays_within_the_statement_budget():
    """Without a depth, a view gets full higher-order IVM unless that has too many trigger statements;
    then the deepest depth that stays within the budget (TPC-H Q8: 685 statements unlimited)."""
    def plan_at(name):
        return lambda depth: compile_view(read_query(name).sql, SCHEMAS, depth=depth)

    for name in QUERIES:
        plan = default_depth_plan(plan_at(name))
        unlimited = plan_at(name)(None)
        assert statement_count(plan) <= MAX_TRIGGER_STATEMENTS, name
        if statement_count(unlimited) <= MAX_TRIGGER_STATEMENTS:
            assert plan.depth is None, name
        else:
            assert plan.depth is not None and statement_count(plan_at(name)(plan.depth + 1)) > MAX_TRIGGER_STATEMENTS, name
    assert default_depth_plan(plan_at("q8")).depth == 1
    assert default_depth_plan(plan_at("q5")).depth is None


def test_oversized_delta_is_re_evaluated_from_the_maps_below():
    """Q15's lineitem delta (the global MAX compared with every supplier's revenue, before and after the
    batch) is too large to plan; its map is recomputed from the per-supplier maps and the batch, reading
    no base relation, and EXPLAIN says so. Deciding that declares no map that nothing reads."""
    plan = compile_view(read_query("q15").sql, SCHEMAS)
    (statement,) = [s for s in plan.trigger("lineitem").statements if s.target == "q_count"]
    assert statement.op == ":=" and not reads_database(statement.expr)
    assert "q_count[s_suppkey, s_name, s_address, s_phone, revenue0_total_revenue] := " in plan.explain()
    assert statement.text().endswith("-- re-evaluated")
    for name in QUERIES:
        plan = default_depth_plan(lambda depth: compile_view(read_query(name).sql, SCHEMAS, depth=depth))
        read = {m for t in plan.triggers for s in t.statements for m in map_names(s.expr)}
        assert {m.name for m in plan.maps if m.level > 0} <= read, name


# ---------------------------------------------------------------------------------------------------
# Random TPC-H-shaped data


def _dates(*texts):
    return [datetime.date.fromisoformat(t) for t in texts]


def _decimals(*values):
    return [Decimal(v) for v in values]


# Each date falls in the windows of several queries (Q4 and Q10 in 1993, Q5, Q6, Q12 and Q20 in 1994, Q3
# around 1995-03-15, Q7 and Q8 in 1995–1996, Q14 in 1995-09, Q15 in 1996-Q1, Q1 before 1998-09-02).
DATES = _dates("1993-07-15", "1993-11-15", "1994-06-01", "1995-03-10", "1995-03-20", "1995-09-05", "1996-01-15")

# Values per column (by name), chosen so that the queries' predicates hold for some rows and not others.
VALUES = {
    "r_name": ["EUROPE", "AMERICA", "ASIA"],
    "n_name": ["FRANCE", "GERMANY", "BRAZIL", "CANADA", "SAUDI ARABIA"],
    "p_name": ["forest green puff", "navy forest", "green almond"],
    "p_type": ["ECONOMY ANODIZED STEEL", "MEDIUM POLISHED TIN", "PROMO BURNISHED BRASS"],
    "p_brand": ["Brand#12", "Brand#23", "Brand#45"],
    "p_container": ["MED BOX", "SM PKG", "LG CASE"],
    "p_size": [3, 15, 49],
    "s_comment": ["Customer Complaints pending", "quick deposits"],
    "o_comment": ["special requests apply", "regular"],
    "c_mktsegment": ["BUILDING", "AUTOMOBILE"],
    "c_phone": ["13-111-1111", "31-222-2222", "99-333-3333", "18-444-4444"],
    "o_orderstatus": ["F", "O"],
    "o_orderpriority": ["1-URGENT", "2-HIGH", "5-LOW"],
    "l_returnflag": ["R", "A", "N"],
    "l_linestatus": ["O", "F"],
    "l_shipmode": ["MAIL", "SHIP", "AIR", "AIR REG"],
    "l_shipinstruct": ["DELIVER IN PERSON", "NONE"],
    "l_quantity": _decimals("1", "15", "25", "200"),
    "l_discount": _decimals("0.05", "0.06", "0.07"),
    "l_tax": _decimals("0.01", "0.08"),
    "ps_availqty": [1, 50, 5000],
    "ps_supplycost": _decimals("10.00", "20.50", "10.00"),
    "c_acctbal": _decimals("-10.00", "0.00", "500.00", "7000.00"),
    "s_acctbal": _decimals("100.00", "900.00"),
    "o_shippriority": [0],
}


def column_value(rng: random.Random, name: str, sql_type: str):
    if name in VALUES:
        return rng.choice(VALUES[name])
    if name.endswith("regionkey"):
        return rng.randint(1, 3)
    if name.endswith("key"):
        return rng.randint(1, 3)
    if sql_type == "DATE":
        return rng.choice(DATES)
    if sql_type.startswith("DECIMAL"):
        return rng.choice(_decimals("100.00", "900.50", "1500.00"))
    if sql_type == "INT":
        return rng.randint(1, 3)
    return rng.choice(["a", "b"])


def random_row(rng: random.Random, table: str) -> tuple:
    return tuple(column_value(rng, name, sql_type) for name, sql_type in COLUMNS[table])


def random_table(rng: random.Random, table: str, rows: int) -> dict:
    out: dict = {}
    for _ in range(rows):
        row = random_row(rng, table)
        out[row] = out.get(row, 0) + 1
    return out


def random_batch(rng: random.Random, table: str, current: dict) -> dict:
    """Inserts, deletes and updates (a row deleted and the same row with one value changed inserted)."""
    batch: dict = {}

    def add(row, m):
        batch[row] = batch.get(row, 0) + m

    for _ in range(rng.randint(1, 2)):
        add(random_row(rng, table), 1)
    existing = sorted(current, key=repr)
    for row in rng.sample(existing, min(len(existing), rng.randint(1, 2))):
        add(row, -1)
        if rng.random() < 0.5:  # an update: the row comes back with a value changed
            i = rng.randrange(len(row))
            name, sql_type = COLUMNS[table][i]
            add(row[:i] + (column_value(rng, name, sql_type),) + row[i + 1:], 1)
    return {r: m for r, m in batch.items() if m}


def apply(current: dict, batch: dict) -> None:
    for row, m in batch.items():
        n = current.get(row, 0) + m
        if n:
            current[row] = n
        else:
            current.pop(row, None)


ROWS_PER_TABLE = 6


@pytest.mark.parametrize("depth", [1, None], ids=["depth1", "unlimited"])
@pytest.mark.parametrize("name", QUERIES)
def test_tpch_triggers_keep_maps_equal_to_their_definitions(name, depth):
    plan = compile_view(read_query(name).sql, SCHEMAS, depth=depth)
    rng = random.Random(f"{name}-{depth}")
    relations = {t: random_table(rng, t, ROWS_PER_TABLE) for t in plan.query.relations}
    db = Database({t: dict(rows) for t, rows in relations.items()})
    initial_maps(plan, db)
    for table in plan.query.relations:  # every table the query reads changes
        batch = random_batch(rng, table, db.relations[table])
        apply_batch(plan, db, table, batch)
        for m in plan.maps:
            expected = evaluate_map(m.definition, m.keys, db)
            assert db.maps[m.name] == expected, f"{name}: map {m.name} after a batch of {table} {batch}"
