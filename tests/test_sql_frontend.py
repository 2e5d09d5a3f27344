"""The SQL front end: SQL → calculus text, the meaning of the translation on small databases with NULLs
and duplicate rows (checked against sqlite3 running the same query), and the errors it raises."""

from __future__ import annotations

import dataclasses
import datetime
import sqlite3
from collections import Counter
from decimal import Decimal

import pytest
import sqlglot

from spark_ivm.calculus.evaluator import Database, evaluate
from spark_ivm.calculus.expressions import AggSum
from spark_ivm.errors import (
    NonDeterministicError, ParseError, UnknownColumnError, UnknownTableError, UnsupportedQueryError,
)
from spark_ivm.frontend.translate import translate
from spark_ivm.frontend.view_query import ROW_COUNT, ViewQuery

SCHEMAS = {
    "R": ["A", "B"],
    "S": ["B", "C"],
    "T": ["C", "D"],
    "items": [("id", "int"), ("name", "string"), ("price", "double"), ("qty", "int"), ("cat", "string")],
}

ROWS = {
    "R": [(1, 1), (1, 1), (1, 2), (2, 2), (2, None), (None, 2), (3, 3), (None, None), (4, 1)],
    "S": [(1, 10), (2, 20), (2, 20), (2, None), (None, 5), (3, 30), (4, 40)],
    "T": [(10, "x"), (20, "y"), (20, "y"), (30, None), (None, "z"), (40, "xy")],
    "items": [
        (1, "apple", 1.5, 3, "fruit"), (2, "banana", 0.25, 12, "fruit"), (3, "carrot", 0.75, None, "veg"),
        (4, None, 2.0, 1, "veg"), (5, "apple", 1.5, 3, "fruit"), (5, "apple", 1.5, 3, "fruit"),
        (6, "date", None, 2, None), (7, "egg", 0.2, 0, "dairy"),
    ],
}


def database(rows=ROWS) -> Database:
    return Database({name: dict(Counter(table)) for name, table in rows.items()})


def text(sql: str, schemas=SCHEMAS) -> str:
    return translate(sql, schemas).explain()


# ---------------------------------------------------------------------------------------------------
# SQL → calculus


def test_join_sum_names_shared_columns_by_alias_and_others_bare():
    assert text("SELECT SUM(A) FROM R, S WHERE R.B = S.B") == "\n".join([
        "keys: []",
        "count := AggSum([], R(a, r_b) * S(s_b, c) * {r_b = s_b})",
        "sum_1 := AggSum([], R(a, r_b) * S(s_b, c) * {r_b = s_b} * a)",
        "nn_1 := AggSum([], R(a, r_b) * S(s_b, c) * {r_b = s_b} * {a IS NOT NULL})",
        "column sum(A) = CASE WHEN `nn_1` = 0 THEN NULL ELSE `sum_1` END",
    ])


def test_three_way_join_binds_all_relations_before_the_conditions():
    q = translate("SELECT t.d, COUNT(*), SUM(r.a * s.c) FROM R r JOIN S s ON r.b = s.b JOIN T t ON s.c = t.c "
                  "WHERE r.a > 1 GROUP BY t.d", SCHEMAS)
    assert q.keys == ("d",)
    assert [a.name for a in q.aggregates] == ["count", "sum_1", "nn_1"]
    assert str(q.aggregates[0].definition) == (
        "AggSum([d], R(a, r_b) * S(s_b, s_c) * T(t_c, d) * {r_b = s_b} * {s_c = t_c} * {a > 1})")
    assert str(q.aggregates[1].definition) == (
        "AggSum([d], R(a, r_b) * S(s_b, s_c) * T(t_c, d) * {r_b = s_b} * {s_c = t_c} * {a > 1} * a * s_c)")
    assert [(c.name, c.sql) for c in q.columns] == [
        ("D", "`d`"), ("count(1)", "`count`"), ("sum(a * c)", "CASE WHEN `nn_1` = 0 THEN NULL ELSE `sum_1` END")]
    assert q.relations == ("R", "S", "T") and not q.bag


def test_self_join_gets_one_variable_per_alias_and_column():
    q = translate("SELECT SUM(r1.a * r2.b) FROM R r1, R r2 WHERE r1.b = r2.a", SCHEMAS)
    assert str(q.aggregates[1].definition) == (
        "AggSum([], R(r1_a, r1_b) * R(r2_a, r2_b) * {r1_b = r2_a} * r1_a * r2_b)")
    assert q.relations == ("R",)


def test_conditions_push_not_down_and_expand_or():
    q = translate("SELECT COUNT(*) FROM R WHERE NOT (a > 1 OR b IS NULL) AND (a = 1 OR b <=> 2)", SCHEMAS)
    assert str(q.aggregates[0].definition) == (
        "AggSum([], R(a, b) * {a <= 1} * {b IS NOT NULL} * ({a = 1} + {b IS 2} + -1 * {a = 1} * {b IS 2}))")


def test_between_in_like_and_their_negations():
    q = translate("SELECT COUNT(*) FROM items WHERE qty BETWEEN 1 AND 3 AND price NOT BETWEEN 1 AND 2 "
                  "AND id IN (1, 2, NULL) AND cat NOT IN ('veg') AND name LIKE 'a%' AND name NOT LIKE '%x'",
                  SCHEMAS)
    assert str(q.aggregates[0].definition) == (
        "AggSum([], items(id, name, price, qty, cat) * {qty >= 1} * {qty <= 3} * ({price < 1} + {price > 2}) * "
        "{in(id, 1, 2, NULL) = 1} * {in(cat, 'veg') = 0} * {like(name, 'a%') = 1} * {like(name, '%x') = 0})")


def test_not_between_with_column_bounds_uses_inclusion_exclusion():
    q = translate("SELECT COUNT(*) FROM R, S WHERE S.c NOT BETWEEN R.a AND R.b", SCHEMAS)
    assert str(q.aggregates[0].definition) == (
        "AggSum([], R(a, r_b) * S(s_b, c) * ({c < a} + {c > r_b} + -1 * {c < a} * {c > r_b}))")


def test_literals_dates_intervals_and_casts_are_folded():
    q = translate("SELECT COUNT(*) FROM items WHERE price > 0.06 AND qty < 1e3 AND id <> 12L "
                  "AND CAST('1998-12-01' AS DATE) - INTERVAL '90' DAY < DATE '1998-09-03' + INTERVAL 1 MONTH "
                  "AND TRUE AND NOT FALSE", SCHEMAS)
    assert str(q.aggregates[0].definition) == (
        "AggSum([], items(id, name, price, qty, cat) * {price > 0.06BD} * {qty < 1000.0} * {id != 12})")


def test_functions_and_arithmetic():
    q = translate("SELECT SUM(price * (1 - qty) + length(upper(name)) / 2 - -qty), "
                  "SUM(CASE WHEN qty > 2 AND price < 1 THEN qty WHEN cat IS NULL THEN 0 ELSE -1 END) "
                  "FROM items", SCHEMAS)
    sums = {a.name: str(a.definition) for a in q.aggregates}
    body = "items(id, name, price, qty, cat)"
    assert sums["sum_1"] == f"AggSum([], {body} * {{price * (1 - qty) + length(upper(name)) / 2 - neg(qty)}})"
    assert sums["sum_2"] == (
        f"AggSum([], {body} * {{case((qty > 2) * (price < 1), qty, cat IS NULL, 0, -1)}})")


def test_product_of_values_stays_a_product_of_factors():
    q = translate("SELECT SUM(price * qty * 2) FROM items", SCHEMAS)
    assert str(q.aggregates[1].definition) == "AggSum([], 2 * items(id, name, price, qty, cat) * price * qty)"


def test_group_by_expression_gets_a_lifted_variable():
    q = translate("SELECT upper(name), (qty + 1) * 2 AS q2, COUNT(*) FROM items GROUP BY upper(name), qty + 1",
                  SCHEMAS)
    assert q.keys == ("g1", "g2")
    assert str(q.aggregates[0].definition) == (
        "AggSum([g1, g2], items(id, name, price, qty, cat) * (g1 ^= {upper(name)}) * (g2 ^= {qty + 1}))")
    assert [(c.name, c.sql) for c in q.columns] == [
        ("upper(name)", "`g1`"), ("q2", "`g2` * 2"), ("count(1)", "`count`")]


def test_generated_variables_avoid_column_names():
    q = translate("SELECT x + 1, COUNT(*) FROM t GROUP BY x + 1", {"t": ["g1", "x"]})
    assert q.keys == ("g2",)
    assert str(q.aggregates[0].definition) == "AggSum([g2], t(g1, x) * (g2 ^= {x + 1}))"


def test_aggregates_are_shared_and_deduplicated():
    q = translate("SELECT b, SUM(a), COUNT(a), AVG(a), COUNT(*), COUNT(1), SUM(1) FROM R GROUP BY b", SCHEMAS)
    assert [a.name for a in q.aggregates] == ["count", "sum_1", "nn_1"]
    assert [c.sql for c in q.columns] == [
        "`b`", "CASE WHEN `nn_1` = 0 THEN NULL ELSE `sum_1` END", "`nn_1`", "(`sum_1` / NULLIF(`nn_1`, 0))",
        "`count`", "`count`", "CASE WHEN `count` = 0 THEN NULL ELSE `count` END"]


def test_sums_of_values_never_null_count_their_values_with_the_row_count():
    """SUM(CASE … THEN 1 ELSE 0 END) (TPC-H Q12) is never over a NULL value, so its non-NULL count is the
    group's row count, not a map of its own; without an ELSE, or with a column as a result, it is. The
    CASE's condition filters the rows summed (TPC-H Q14)."""
    q = translate("SELECT b, SUM(CASE WHEN a > 1 THEN 1 ELSE 0 END), SUM(coalesce(a, 0)), "
                  "SUM(CASE WHEN a > 1 THEN 1 END), SUM(CASE WHEN a > 1 THEN a ELSE 0 END) FROM R GROUP BY b", SCHEMAS)
    # A SUM of a CASE with an ELSE of 0, or none, sums its value over the rows its condition keeps: the
    # first and third SUMs are one sum, and the third's non-NULL values are the rows where a > 1 (that
    # sum again). Where a > 1 holds, a is not NULL: the fourth SUM never is.
    assert [a.name for a in q.aggregates] == ["count", "sum_1", "sum_2", "sum_3"]
    assert [c.sql for c in q.columns][1:] == ["CASE WHEN `count` = 0 THEN NULL ELSE `sum_1` END",
                                              "CASE WHEN `count` = 0 THEN NULL ELSE `sum_2` END",
                                              "CASE WHEN `sum_1` = 0 THEN NULL ELSE `sum_1` END",
                                              "CASE WHEN `count` = 0 THEN NULL ELSE `sum_3` END"]
    assert str(q.aggregates[3].definition) == "AggSum([b], R(a, b) * {a > 1} * a)"
    avg = translate("SELECT b, AVG(CASE WHEN b = 2 THEN a END), SUM(CASE WHEN b = 2 THEN a ELSE 1 END) "
                    "FROM R GROUP BY b", SCHEMAS)
    assert [str(a.definition) for a in avg.aggregates[1:]] == [
        "AggSum([b], R(a, b) * {b = 2} * a)", "AggSum([b], R(a, b) * {b = 2} * {a IS NOT NULL})",
        "AggSum([b], R(a, b) * {case(b = 2, a, 1)})",
        "AggSum([b], R(a, b) * (1 + -1 * {b = 2} * {a IS NULL}))"]


def test_having_order_by_and_limit():
    q = translate("SELECT r.a, SUM(s.c) AS total FROM R r, S s WHERE r.b = s.b GROUP BY r.a "
                  "HAVING COUNT(*) > 1 AND SUM(r.b) > 0 ORDER BY total DESC, 1 NULLS LAST LIMIT 5", SCHEMAS)
    assert [a.name for a in q.aggregates] == ["count", "sum_1", "nn_1", "sum_2", "nn_2"]
    assert q.having == "`count` > 1 AND CASE WHEN `nn_2` = 0 THEN NULL ELSE `sum_2` END > 0"
    assert q.order_by == ("`total` DESC", "`A` NULLS LAST")
    assert q.limit == 5


def test_order_by_expressions_of_output_columns_and_having_aliases():
    q = translate("SELECT b, COUNT(*) AS n FROM R GROUP BY b HAVING n > 1 ORDER BY COUNT(*) + 1, r.b", SCHEMAS)
    assert q.having == "`count` > 1"
    assert q.order_by == ("`n` + 1", "`B`")


def test_bag_query_keys_every_output_column():
    q = translate("SELECT a, a + b AS s, * FROM R WHERE b > 1", SCHEMAS)
    assert q.bag and q.keys == ("a", "g1", "b")
    assert [a.name for a in q.aggregates] == [ROW_COUNT]
    assert str(q.aggregates[0].definition) == "AggSum([a, g1, b], R(a, b) * {b > 1} * (g1 ^= {a + b}))"
    assert [(c.name, c.sql) for c in q.columns] == [("A", "`a`"), ("s", "`g1`"), ("A", "`a`"), ("B", "`b`")]


def test_derived_table_is_inlined_with_lifts_of_its_used_computed_columns():
    q = translate("SELECT x, SUM(y) FROM (SELECT a + 1 AS x, b AS y, a * 2 AS unused FROM R WHERE a > 0) s "
                  "GROUP BY x", SCHEMAS)
    assert str(q.aggregates[1].definition) == "AggSum([x], R(a, b) * {a > 0} * (x ^= {a + 1}) * b)"


def test_cte_used_twice_gets_fresh_variables():
    q = translate("WITH w AS (SELECT a, b * 2 AS bb FROM R) "
                  "SELECT w1.a, SUM(w2.bb) FROM w w1 JOIN w w2 ON w1.a = w2.a GROUP BY w1.a", SCHEMAS)
    assert str(q.aggregates[1].definition) == (
        "AggSum([r_a], R(r_a, r_b) * R(r_a_2, r_b_2) * (bb ^= {2 * r_b_2}) * {r_a = r_a_2} * bb)")


def test_table_and_column_names_resolve_case_insensitively_and_by_qualified_name():
    q = translate("SELECT SUM(`X.Y`) FROM DB.Events AS e JOIN Other ON e.id = other.ID, sales.events",
                  {"db.events": ["id", "x.y"], "OTHER": ["Id"], "events": ["id"]})
    assert q.relations == ("db.events", "OTHER", "events")
    assert str(q.aggregates[1].definition) == (
        "AggSum([], db.events(e_id, x_y) * OTHER(other_id) * events(events_id) * {e_id = other_id} * x_y)")


def test_columns_given_as_objects_with_a_name():
    class Field:
        def __init__(self, name):
            self.name = name

    q = translate("SELECT k, COUNT(*) FROM t GROUP BY k", {"t": [Field("k"), Field("v")]})
    assert str(q.aggregates[0].definition) == "AggSum([k], t(k, v))"


def test_column_named_like_an_aggregate_is_renamed():
    q = translate("SELECT count, SUM(sum_1) FROM t GROUP BY count", {"t": ["count", "sum_1"]})
    assert q.keys == ("t_count",)
    assert str(q.aggregates[1].definition) == "AggSum([t_count], t(t_count, t_sum_1) * t_sum_1)"


def test_functions_the_front_end_emits_have_reference_implementations():
    from spark_ivm.calculus import functions

    for name in ("in", "round", "add_months", "cast_decimal", "concat", "least", "datediff"):
        assert name in functions.FUNCTIONS


# ---------------------------------------------------------------------------------------------------
# Meaning: the maintained aggregates, read through the view's SQL, give what sqlite gives


def maintained_groups(query: ViewQuery, db: Database) -> dict[tuple, dict[str, object]]:
    """Per group key, every aggregate's value from the reference evaluator: the sums as evaluated, the
    aggregates kept as a multiset of values reduced here as the runtime reads them. Groups without a
    sum are dead; whether the others are live is the view's multiplicity."""
    groups: dict[tuple, dict[str, object]] = {}
    multisets: dict[tuple, list] = {}
    for aggregate in query.aggregates:
        for bindings, value in evaluate(aggregate.definition, db).items():
            values = dict(bindings)
            key = tuple(values[k] for k in query.keys)
            if aggregate.reduce is None:
                groups.setdefault(key, {})[aggregate.name] = value
            else:
                assert value > 0, f"multiplicity {value} of a value of {aggregate.name}"
                multisets.setdefault((key, aggregate.name), []).append(values[aggregate.value_keys[0]])
    if not query.keys:
        groups.setdefault((), {})  # a global aggregate has its one row even over no input
    assert {key for key, _ in multisets} <= set(groups), "a multiset of values in a group without rows"
    for key, aggregates in groups.items():
        for aggregate in query.aggregates:
            if aggregate.reduce is not None:
                aggregates[aggregate.name] = reduced(aggregate.reduce, multisets.get((key, aggregate.name), []))
    return groups


def reduced(reduce: str, values: list):
    """MIN, MAX, COUNT, SUM or AVG of the distinct values (those of positive multiplicity), NULLs ignored."""
    present = [v for v in values if v is not None]
    assert len(set(present)) == len(present)
    if reduce == "count_distinct":
        return len(present)
    if not present:
        return None
    return {"min": min, "max": max, "sum_distinct": sum,
            "avg_distinct": lambda vs: sum(vs) / len(vs)}[reduce](present)


def sqlite_with(rows=ROWS) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    for name, table in rows.items():
        columns = [c if isinstance(c, str) else c[0] for c in SCHEMAS[name]]
        db.execute(f"CREATE TABLE {name} ({', '.join(columns)})")
        db.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(columns))})", table)
    return db


def to_sqlite(spark_sql: str) -> str:
    return sqlglot.transpile(spark_sql, read="spark", write="sqlite")[0]


def view_rows(query: ViewQuery, db: Database) -> list[tuple]:
    """The view's rows: the maintained groups put in a table, the live ones (positive multiplicity)
    copied as many times as the multiplicity says (once when distinct), read with the view's own SQL."""
    names = list(query.keys) + [a.name for a in query.aggregates]
    columns = ", ".join(f"`{n}`" for n in names)
    view = sqlite3.connect(":memory:")
    view.execute(f"CREATE TABLE g ({columns})")
    view.execute(f"CREATE TABLE v ({columns})")
    for key, aggregates in maintained_groups(query, db).items():
        row = [_plain(v) for v in key] + [_plain(aggregates.get(a.name, 0)) for a in query.aggregates]
        assert all(aggregates.get(a.name, 0) >= 0 for a in query.aggregates if a.name.startswith(ROW_COUNT))
        view.execute(f"INSERT INTO g VALUES ({', '.join('?' * len(row))})", row)
    for *row, multiplicity in view.execute(to_sqlite(f"SELECT {columns}, {query.multiplicity} FROM g")).fetchall():
        if query.keys and not multiplicity > 0:
            continue  # a dead group; a global aggregate has its row whatever the count
        copies = multiplicity if query.bag and not query.distinct else 1
        assert copies == int(copies)
        view.executemany(f"INSERT INTO v VALUES ({', '.join('?' * len(row))})", [row] * int(copies))
    sql = f"SELECT {', '.join(f'{c.sql} AS `{c.name}`' for c in query.columns)} FROM v"
    if query.having:
        sql += f" WHERE {query.having}"
    if query.order_by:
        sql += f" ORDER BY {', '.join(query.order_by)}"
    if query.limit is not None:
        sql += f" LIMIT {query.limit}"
    return view.execute(to_sqlite(sql)).fetchall()


def _plain(value):
    return float(value) if isinstance(value, Decimal) else value


def normalized(rows, ordered: bool) -> list[tuple]:
    def cell(v):
        if isinstance(v, (int, float, Decimal)) and not isinstance(v, bool):
            v = round(float(v), 6)
            return int(v) if v == int(v) else v
        return v

    out = [tuple(cell(v) for v in row) for row in rows]
    return out if ordered else sorted(out, key=repr)


SEMANTIC_QUERIES = [
    "SELECT SUM(A) FROM R, S WHERE R.B = S.B",
    "SELECT r.a, SUM(s.c), COUNT(*) FROM R r, S s WHERE r.b = s.b GROUP BY r.a",
    "SELECT t.d, COUNT(*), SUM(r.a * s.c) FROM R r JOIN S s ON r.b = s.b JOIN T t ON s.c = t.c GROUP BY t.d",
    "SELECT SUM(r1.a * r2.b), COUNT(*) FROM R r1, R r2 WHERE r1.b = r2.a",
    "SELECT r1.a, COUNT(r2.b) FROM R r1 JOIN R r2 ON r1.b = r2.b AND r1.a < r2.a GROUP BY r1.a",
    "SELECT r.a, COUNT(*), SUM(s.c) FROM R r, S s WHERE r.b < s.b GROUP BY r.a",
    "SELECT COUNT(*), SUM(a), COUNT(b) FROM R WHERE a = 1 OR b = 2",
    "SELECT b, COUNT(*) FROM R WHERE NOT (a = 1 AND b = 1) GROUP BY b",
    "SELECT b, COUNT(*), SUM(a) FROM R WHERE NOT (a > 1 OR b IS NULL) GROUP BY b",
    "SELECT COUNT(*), SUM(c) FROM S WHERE c BETWEEN 10 AND 30 OR b = 4",
    "SELECT b, COUNT(*) FROM S WHERE c NOT BETWEEN 10 AND 20 GROUP BY b",
    "SELECT COUNT(*) FROM R r, S s WHERE s.c NOT BETWEEN r.a * 10 AND r.b * 10",
    "SELECT a, COUNT(*) FROM R WHERE a IN (1, 3, NULL) GROUP BY a",
    "SELECT COUNT(*) FROM R WHERE a NOT IN (1, NULL)",
    "SELECT b, COUNT(*) FROM R WHERE a NOT IN (1, 2) GROUP BY b",
    "SELECT cat, COUNT(*), SUM(qty) FROM items WHERE name LIKE 'a%' OR name LIKE '%an%' GROUP BY cat",
    "SELECT COUNT(*), COUNT(name) FROM items WHERE name NOT LIKE '%a%'",
    "SELECT COUNT(*), COUNT(b), SUM(b) FROM R WHERE a IS NULL OR b IS NOT NULL",
    "SELECT s.c, COUNT(*) FROM R r, S s WHERE r.b <=> s.b GROUP BY s.c",
    "SELECT CASE WHEN a > 1 THEN 'big' WHEN a IS NULL THEN 'none' ELSE 'small' END AS size, COUNT(*), "
    "SUM(CASE WHEN b = 2 THEN 1 ELSE 0 END) FROM R GROUP BY 1",
    "SELECT SUM(CASE b WHEN 1 THEN 10 WHEN 2 THEN 20 END), AVG(CASE WHEN a > 1 OR b > 1 THEN a END) FROM R",
    "SELECT cat, SUM(price * qty), SUM(price + qty), AVG(qty), SUM(qty % 5), SUM(-qty) FROM items GROUP BY cat",
    "SELECT cat, SUM(qty / price) FROM items WHERE price > 0 GROUP BY cat",
    "SELECT upper(name), COUNT(*), SUM(qty), AVG(price) FROM items GROUP BY upper(name)",
    "SELECT a + 1 AS a1, (a + 1) * 2, COUNT(*) FROM R GROUP BY a + 1",
    "SELECT a * 10 AS k, COUNT(*) FROM R GROUP BY k",
    "SELECT coalesce(name, 'none') || '-' || cat AS label, COUNT(*) FROM items GROUP BY 1",
    "SELECT x, SUM(y) FROM (SELECT a + 1 AS x, b AS y FROM R WHERE a IS NOT NULL) s GROUP BY x",
    "SELECT s2.d, COUNT(*) FROM R r, (SELECT s.b, t.d FROM S s JOIN T t ON s.c = t.c) s2 "
    "WHERE r.b = s2.b GROUP BY s2.d",
    "WITH w AS (SELECT a, b * 2 AS bb FROM R WHERE b IS NOT NULL) "
    "SELECT w1.a, SUM(w2.bb), COUNT(*) FROM w w1, w w2 WHERE w1.a = w2.a GROUP BY w1.a",
    "WITH j AS (SELECT R.a, S.c FROM R JOIN S ON R.b = S.b), k AS (SELECT c, a + c AS ac FROM j) "
    "SELECT c, SUM(ac) FROM k GROUP BY c",
    "SELECT q.k, COUNT(*) FROM (SELECT k FROM (SELECT a + b AS k FROM R) i WHERE k > 2) q GROUP BY q.k",
    "SELECT COUNT(*), SUM(r.a + s.c) FROM R r CROSS JOIN S s",
    "SELECT COUNT(*) FROM R r JOIN S s ON r.b = s.b AND s.c > 10 WHERE r.a IS NOT NULL AND TRUE",
    "SELECT COUNT(*), SUM(a), AVG(a) FROM R WHERE a > 100",
    "SELECT COUNT(1), SUM(1), COUNT(NULL) FROM R",
    "SELECT SUM(CASE WHEN a > 1 THEN 1 ELSE 0 END), SUM(coalesce(b, 0)), AVG(CASE WHEN b = 1 THEN 2 ELSE 1 END) "
    "FROM R WHERE a > 100",
    "SELECT b, SUM(CASE WHEN a > 1 THEN 1 ELSE 0 END), AVG(coalesce(a, 5)) FROM R GROUP BY b",
    "SELECT b, AVG(CASE WHEN b = 2 THEN a END), SUM(CASE WHEN b = 2 THEN a ELSE 1 END), "
    "AVG(CASE WHEN b > 1 THEN b ELSE 0 END), COUNT(CASE WHEN a = 1 THEN b END) FROM R GROUP BY b",
    "SELECT cat, SUM(CASE WHEN price > 1 THEN qty END), AVG(CASE WHEN qty > 2 THEN price ELSE 0 END), "
    "SUM(CASE WHEN qty IS NULL THEN price ELSE 0 END) FROM items GROUP BY cat",
    "SELECT b, SUM(a) AS total FROM R GROUP BY b HAVING total > 1 OR COUNT(*) = 1",
    "SELECT a, b FROM R WHERE a IS NOT NULL",
    "SELECT * FROM R r1, R r2 WHERE r1.a = r2.b",
    "SELECT r.a + r.b AS s, upper(t.d) FROM R r JOIN S s ON r.b = s.b JOIN T t ON s.c = t.c",
    "SELECT name, qty FROM items WHERE cat = 'fruit' OR qty IS NULL",
    "SELECT s.* FROM (SELECT a AS x, b * 2 AS y FROM R) s WHERE s.y > 2",
]


# S's columns declared NOT NULL (its rows without NULLs): a count of their non-NULL values is the row
# count, except where an outer join pads them with NULL.
NOT_NULL_SCHEMAS = {**SCHEMAS, "S": [("B", "int", False), ("C", "int", False)]}
NOT_NULL_ROWS = {**ROWS, "S": [row for row in ROWS["S"] if None not in row]}
NOT_NULL_QUERIES = [
    "SELECT r.a, SUM(s.c), AVG(s.c), COUNT(s.c), SUM(s.c * 2 + s.b) FROM R r JOIN S s ON r.b = s.b GROUP BY r.a",
    "SELECT r.a, SUM(s.c), AVG(s.c), COUNT(s.c) FROM R r LEFT JOIN S s ON r.b = s.b GROUP BY r.a",
    "SELECT s.c, SUM(s.b), COUNT(r.a) FROM S s FULL JOIN R r ON r.b = s.b GROUP BY s.c",
    "SELECT SUM(c), AVG(b) FROM S WHERE c > 100",
    "SELECT s.b, SUM(s.c - s.b), SUM(r.a) FROM S s JOIN R r ON r.b = s.b GROUP BY s.b",
]


@pytest.mark.parametrize("sql, not_null",
                         [(q, False) for q in SEMANTIC_QUERIES] + [(q, True) for q in NOT_NULL_QUERIES])
def test_view_rows_match_sqlite(sql, not_null):
    schemas, rows = (NOT_NULL_SCHEMAS, NOT_NULL_ROWS) if not_null else (SCHEMAS, ROWS)
    query = translate(sql, schemas)
    expected = sqlite_with(rows).execute(to_sqlite(sql)).fetchall()
    assert normalized(view_rows(query, database(rows)), False) == normalized(expected, False)


def test_counts_of_not_null_columns_are_the_row_count_but_under_an_outer_join():
    inner = translate("SELECT r.a, SUM(s.c), AVG(s.c), COUNT(s.c), SUM(r.a) FROM R r JOIN S s ON r.b = s.b "
                      "GROUP BY r.a", NOT_NULL_SCHEMAS)
    assert [a.name for a in inner.aggregates] == ["count", "sum_1", "sum_2", "nn_2"]
    outer = translate("SELECT r.a, SUM(s.c) FROM R r LEFT JOIN S s ON r.b = s.b GROUP BY r.a", NOT_NULL_SCHEMAS)
    assert [a.name for a in outer.aggregates] == ["count", "sum_1", "nn_1"]


ORDERED_QUERIES = [
    "SELECT r.a, SUM(s.c) AS total FROM R r, S s WHERE r.b = s.b GROUP BY r.a HAVING COUNT(*) > 1 "
    "ORDER BY total DESC LIMIT 2",
    "SELECT a, b FROM R ORDER BY a DESC NULLS LAST, b LIMIT 4",
    "SELECT cat, COUNT(*) AS n FROM items GROUP BY cat ORDER BY n DESC, cat NULLS LAST",
]


@pytest.mark.parametrize("sql", ORDERED_QUERIES)
def test_ordered_view_rows_match_sqlite(sql):
    query = translate(sql, SCHEMAS)
    expected = sqlite_with().execute(to_sqlite(sql)).fetchall()
    assert normalized(view_rows(query, database()), True) == normalized(expected, True)


# Each aggregate on its own: `count` is the group's row count, `sum_N` the SUM with NULLs as 0 and
# `nn_N` the COUNT of non-NULL values; the oracle lists the group keys, then the aggregates in order.
AGGREGATE_ORACLES = [
    ("SELECT r.a, SUM(s.c), AVG(r.b) FROM R r JOIN S s ON r.b = s.b GROUP BY r.a",
     "SELECT r.a, COUNT(*), TOTAL(s.c), COUNT(s.c), TOTAL(r.b), COUNT(r.b) FROM R r JOIN S s ON r.b = s.b "
     "GROUP BY r.a"),
    ("SELECT t.d, SUM(r.a * s.c), COUNT(r.a) FROM R r, S s, T t WHERE r.b = s.b AND s.c = t.c GROUP BY t.d",
     "SELECT t.d, COUNT(*), TOTAL(r.a * s.c), COUNT(r.a * s.c), COUNT(r.a) FROM R r, S s, T t "
     "WHERE r.b = s.b AND s.c = t.c GROUP BY t.d"),
    ("SELECT cat, SUM(CASE WHEN price > 1 OR qty > 2 THEN qty END) FROM items GROUP BY cat",
     "SELECT cat, COUNT(*), TOTAL(CASE WHEN price > 1 OR qty > 2 THEN qty END), "
     "COUNT(CASE WHEN price > 1 OR qty > 2 THEN qty END) FROM items GROUP BY cat"),
    ("SELECT SUM(r1.a * r2.b) FROM R r1, R r2 WHERE r1.b = r2.a AND NOT (r1.a = 2 OR r2.b IS NULL)",
     "SELECT COUNT(*), TOTAL(r1.a * r2.b), COUNT(r1.a * r2.b) FROM R r1, R r2 "
     "WHERE r1.b = r2.a AND NOT (r1.a = 2 OR r2.b IS NULL)"),
]


@pytest.mark.parametrize("sql, oracle", AGGREGATE_ORACLES)
def test_each_aggregate_matches_its_sql_meaning(sql, oracle):
    query = translate(sql, SCHEMAS)
    actual = [key + tuple(values.get(a.name, 0) for a in query.aggregates)
              for key, values in maintained_groups(query, database()).items()]
    assert normalized(actual, False) == normalized(sqlite_with().execute(oracle).fetchall(), False)


def test_every_aggregate_groups_by_the_view_keys():
    for sql in SEMANTIC_QUERIES:
        query = translate(sql, SCHEMAS)
        assert query.aggregates[0].name == ROW_COUNT
        for aggregate in query.aggregates:
            assert isinstance(aggregate.definition, AggSum) and aggregate.definition.group == query.keys, sql


DATED_SCHEMAS = {"lineitem": ["orderkey", "shipdate", "price", "discount"]}
DATED_ROWS = [
    (1, datetime.date(1998, 8, 1), Decimal("100.00"), Decimal("0.05")),
    (1, datetime.date(1998, 9, 2), Decimal("50.00"), Decimal("0.10")),
    (2, datetime.date(1998, 9, 3), Decimal("10.00"), Decimal("0.00")),
    (2, datetime.date(1997, 1, 31), Decimal("20.00"), None),
    (3, None, Decimal("30.00"), Decimal("0.01")),
    (3, datetime.date(1998, 8, 1), Decimal("100.00"), Decimal("0.05")),
]


def dated_groups(sql: str) -> tuple[ViewQuery, dict]:
    query = translate(sql, DATED_SCHEMAS)
    db = Database({"lineitem": dict(Counter(DATED_ROWS))})
    return query, maintained_groups(query, db)


def test_dates_intervals_and_decimals_on_the_evaluator():
    query, groups = dated_groups(
        "SELECT year(shipdate), SUM(price * (1 - discount)), COUNT(*) FROM lineitem "
        "WHERE shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY GROUP BY year(shipdate)")
    cutoff = datetime.date(1998, 9, 2)
    expected: dict = {}
    for key, date, price, discount in DATED_ROWS:
        if date is not None and date <= cutoff:
            group = expected.setdefault((date.year,), {"count": 0, "sum": Decimal(0), "nn": 0})
            group["count"] += 1
            if discount is not None:
                group["sum"] += price * (1 - discount)
                group["nn"] += 1
    assert {k: (v["count"], v.get("sum_1", 0), v.get("nn_1", 0)) for k, v in groups.items()} == {
        k: (v["count"], v["sum"], v["nn"]) for k, v in expected.items()}


def test_interval_arithmetic_on_columns_and_date_functions():
    query, groups = dated_groups(
        "SELECT shipdate + INTERVAL 1 MONTH AS next_month, COUNT(*) FROM lineitem "
        "WHERE date_add(shipdate, 31) >= DATE '1997-03-03' AND date_sub(shipdate, 1) < DATE '1998-09-02' "
        "AND extract(month FROM shipdate) >= 1 AND datediff(shipdate, DATE '1998-01-01') > -365 GROUP BY 1")
    assert "add_months(shipdate, 1)" in str(query.aggregates[0].definition)
    assert {k: v["count"] for k, v in groups.items()} == {
        (datetime.date(1998, 9, 1),): 2, (datetime.date(1998, 10, 2),): 1, (datetime.date(1997, 2, 28),): 1}


def test_datediff_counts_days_from_the_second_argument_to_the_first():
    query, groups = dated_groups(
        "SELECT SUM(datediff(shipdate, DATE '1998-09-01')) AS days FROM lineitem WHERE orderkey = 2")
    assert groups[()]["sum_1"] == 2 + (datetime.date(1997, 1, 31) - datetime.date(1998, 9, 1)).days


def test_casts_to_decimal_and_string():
    query, groups = dated_groups(
        "SELECT CAST(orderkey AS STRING) || ':' AS k, SUM(CAST(price AS DECIMAL(10, 1)) * 2) FROM lineitem "
        "GROUP BY 1")
    assert {k: v["sum_1"] for k, v in groups.items()} == {
        ("1:",): Decimal("300.0"), ("2:",): Decimal("60.0"), ("3:",): Decimal("260.0")}


# ---------------------------------------------------------------------------------------------------
# SELECT DISTINCT, MIN, MAX and DISTINCT aggregates


def test_select_distinct_is_a_bag_of_its_columns_read_once():
    q = translate("SELECT DISTINCT a, b + 1 FROM R WHERE a > 1", SCHEMAS)
    assert (q.bag, q.distinct, q.multiplicity, q.keys) == (True, True, "`count`", ("a", "g1"))
    assert str(q.aggregates[0].definition) == "AggSum([a, g1], R(a, b) * {a > 1} * (g1 ^= {b + 1}))"
    assert q.explain().splitlines()[2] == "multiplicity `count` (distinct)"


def test_select_distinct_of_group_keys_drops_the_group_by():
    q = translate("SELECT DISTINCT b FROM R GROUP BY a, b ORDER BY b", SCHEMAS)
    assert (q.bag, q.distinct, q.keys, q.order_by) == (True, True, ("b",), ("`B`",))
    assert str(q.aggregates[0].definition) == "AggSum([b], R(a, b))"


def test_select_distinct_over_groups_that_are_all_shown_changes_nothing():
    q = translate("SELECT DISTINCT b, a, COUNT(*) FROM R GROUP BY a, b", SCHEMAS)
    assert q == dataclasses.replace(translate("SELECT b, a, COUNT(*) FROM R GROUP BY a, b", SCHEMAS), sql=q.sql)
    assert not q.bag and not q.distinct


def test_min_max_and_distinct_aggregates_keep_the_multiset_of_their_value():
    q = translate("SELECT b, MIN(a), MAX(a) AS m, COUNT(DISTINCT a), SUM(DISTINCT a * 2), AVG(DISTINCT a * 2), "
                  "SUM(a), MAX(b) FROM R GROUP BY b HAVING MIN(a) > 0 ORDER BY m", SCHEMAS)
    assert q.explain() == "\n".join([
        "keys: [b]",
        "count := AggSum([b], R(a, b))",
        "sum_1 := AggSum([b], R(a, b) * a)",
        "nn_1 := AggSum([b], R(a, b) * {a IS NOT NULL})",
        "min_1 := AggSum([b, a], R(a, b))  -- read as min(a) over positive multiplicities",
        "max_1 := AggSum([b, a], R(a, b))  -- read as max(a) over positive multiplicities",
        "cntd_1 := AggSum([b, a], R(a, b))  -- read as count_distinct(a) over positive multiplicities",
        "sumd_2 := AggSum([b, x1], R(a, b) * (x1 ^= {2 * a}))  -- read as sum_distinct(x1) over positive "
        "multiplicities",
        "avgd_2 := AggSum([b, x1], R(a, b) * (x1 ^= {2 * a}))  -- read as avg_distinct(x1) over positive "
        "multiplicities",
        "max_3 := AggSum([b, x2], R(a, b) * (x2 ^= b))  -- read as max(x2) over positive multiplicities",
        "column B = `b`",
        "column min(a) = `min_1`",
        "column m = `max_1`",
        "column count(DISTINCT a) = `cntd_1`",
        "column sum(DISTINCT a * 2) = `sumd_2`",
        "column avg(DISTINCT a * 2) = `avgd_2`",
        "column sum(a) = CASE WHEN `nn_1` = 0 THEN NULL ELSE `sum_1` END",
        "column max(b) = `max_3`",
        "having `min_1` > 0",
        "order by `m`",
    ])
    assert [(a.value_keys, a.reduce) for a in q.aggregates if a.reduce] == [
        (("a",), "min"), (("a",), "max"), (("a",), "count_distinct"), (("x1",), "sum_distinct"),
        (("x1",), "avg_distinct"), (("x2",), "max")]


def test_min_and_max_of_distinct_values_and_of_null():
    q = translate("SELECT MIN(DISTINCT a), MAX(a), COUNT(DISTINCT NULL), SUM(DISTINCT NULL) FROM R", SCHEMAS)
    assert [a.name for a in q.aggregates] == ["count", "min_1", "max_1"]
    assert [c.sql for c in q.columns] == ["`min_1`", "`max_1`", "0", "NULL"]


def test_reduced_aggregates_of_a_computed_key_and_a_derived_column():
    q = translate("SELECT a + 1, MAX(a + 1), MIN(y) FROM (SELECT a, b * 2 AS y FROM R) s GROUP BY a + 1", SCHEMAS)
    assert [str(a.definition) for a in q.aggregates] == [
        "AggSum([g1], R(a, b) * (y ^= {2 * b}) * (g1 ^= {a + 1}))",
        "AggSum([g1, x1], R(a, b) * (y ^= {2 * b}) * (g1 ^= {a + 1}) * (x1 ^= {a + 1}))",
        "AggSum([g1, y], R(a, b) * (y ^= {2 * b}) * (g1 ^= {a + 1}))"]


def test_columns_named_like_reduced_aggregates_are_renamed():
    q = translate("SELECT min_1, MAX(cntd_1) FROM t GROUP BY min_1", {"t": ["min_1", "cntd_1"]})
    assert q.keys == ("t_min_1",) and q.aggregates[1].value_keys == ("t_cntd_1",)


# ---------------------------------------------------------------------------------------------------
# Set operations


def test_union_all_is_one_count_of_both_operands_lifted_to_the_output_keys():
    q = translate("SELECT a, b FROM R WHERE a > 1 UNION ALL SELECT s.b, t.d FROM S s JOIN T t ON s.c = t.c",
                  SCHEMAS)
    assert q.explain() == "\n".join([
        "keys: [u1, u2]",
        "count := AggSum([u1, u2], R(a, r_b) * {a > 1} * (u1 ^= a) * (u2 ^= r_b) + "
        "S(s_b, s_c) * T(t_c, d) * {s_c = t_c} * (u1 ^= s_b) * (u2 ^= d))",
        "column A = `u1`",
        "column B = `u2`",
    ])
    assert (q.bag, q.distinct, q.relations) == (True, False, ("R", "S", "T"))


@pytest.mark.parametrize("operation, multiplicity, distinct", [
    ("UNION", None, True),
    ("EXCEPT ALL", "GREATEST(`count` - `count_r`, 0)", False),
    ("EXCEPT", "CASE WHEN `count` > 0 AND `count_r` = 0 THEN 1 ELSE 0 END", True),
    ("MINUS", "CASE WHEN `count` > 0 AND `count_r` = 0 THEN 1 ELSE 0 END", True),
    ("INTERSECT ALL", "LEAST(`count`, `count_r`)", False),
    ("INTERSECT", "CASE WHEN `count` > 0 AND `count_r` > 0 THEN 1 ELSE 0 END", True),
])
def test_set_operations_count_each_operand_and_combine_the_counts(operation, multiplicity, distinct):
    q = translate(f"SELECT a FROM R {operation} SELECT c FROM S", SCHEMAS)
    assert (q.bag, q.distinct, q.keys) == (True, distinct, ("u1",))
    if multiplicity is None:
        assert q.multiplicity == "`count`"
        assert [str(a.definition) for a in q.aggregates] == ["AggSum([u1], R(a, r_b) * (u1 ^= a) + S(s_b, c) * (u1 ^= c))"]
    else:
        assert q.multiplicity == multiplicity
        assert [(a.name, str(a.definition)) for a in q.aggregates] == [
            ("count", "AggSum([u1], R(a, r_b) * (u1 ^= a))"), ("count_r", "AggSum([u1], S(s_b, c) * (u1 ^= c))")]


def test_chains_of_one_set_operation():
    q = translate("SELECT a FROM R EXCEPT ALL SELECT b FROM S EXCEPT ALL SELECT c FROM T", SCHEMAS)
    assert q.multiplicity == "GREATEST(`count` - `count_r`, 0)"
    assert str(q.aggregates[1].definition) == "AggSum([u1], S(s_b, s_c) * (u1 ^= s_b) + T(t_c, d) * (u1 ^= t_c))"
    q = translate("SELECT a FROM R INTERSECT SELECT b FROM S INTERSECT SELECT c FROM T", SCHEMAS)
    assert q.multiplicity == "CASE WHEN `count` > 0 AND `count_r` > 0 AND `count_r2` > 0 THEN 1 ELSE 0 END"
    q = translate("SELECT a FROM R UNION ALL SELECT b FROM S UNION ALL SELECT c FROM T", SCHEMAS)
    assert [a.name for a in q.aggregates] == ["count"] and q.multiplicity == "`count`"


def test_mixed_set_operations_combine_counts_left_to_right():
    q = translate("SELECT DISTINCT a FROM R UNION ALL (SELECT b FROM S INTERSECT ALL SELECT c FROM T) "
                  "EXCEPT ALL SELECT a FROM R", SCHEMAS)
    assert q.multiplicity == (
        "GREATEST((CASE WHEN `count` > 0 THEN 1 ELSE 0 END + LEAST(`count_r`, `count_r2`)) - `count_r3`, 0)")
    assert not q.distinct
    q = translate("SELECT a FROM R UNION SELECT b FROM S INTERSECT SELECT c FROM T", SCHEMAS)  # INTERSECT first
    assert q.multiplicity == "(`count` + CASE WHEN `count_r` > 0 AND `count_r2` > 0 THEN 1 ELSE 0 END)"
    assert q.distinct


def test_set_operation_order_by_limit_and_ctes():
    q = translate("WITH w AS (SELECT a AS x, b FROM R WHERE a > 0) "
                  "SELECT * FROM w UNION ALL SELECT * FROM S ORDER BY 2 DESC, x + 1 LIMIT 3", SCHEMAS)
    assert q.order_by == ("`B` DESC", "`x` + 1") and q.limit == 3
    assert [c.name for c in q.columns] == ["x", "B"]
    assert str(q.aggregates[0].definition) == (
        "AggSum([u1, u2], R(a, r_b) * {a > 0} * (u1 ^= a) * (u2 ^= r_b) + S(s_b, c) * (u1 ^= s_b) * (u2 ^= c))")


def test_union_all_in_a_derived_table_is_a_sum_factor():
    q = translate("SELECT t.x, COUNT(*), MAX(r.a) FROM R r, (SELECT b AS x FROM S UNION ALL SELECT c FROM T "
                  "WHERE d IS NOT NULL) t WHERE r.b = t.x GROUP BY t.x", SCHEMAS)
    assert str(q.aggregates[0].definition) == (
        "AggSum([x], R(a, r_b) * (S(s_b, s_c) * (x ^= s_b) + T(t_c, d) * {d IS NOT NULL} * (x ^= t_c)) * {r_b = x})")


def test_union_all_cte_with_column_aliases():
    q = translate("WITH u(k) AS (SELECT a FROM R UNION ALL SELECT b FROM S) SELECT k, COUNT(*) FROM u GROUP BY k",
                  SCHEMAS)
    assert str(q.aggregates[0].definition) == "AggSum([k], R(a, r_b) * (k ^= a) + S(s_b, c) * (k ^= s_b))"


DISTINCT_AND_REDUCED_QUERIES = [
    "SELECT DISTINCT a FROM R",
    "SELECT DISTINCT a, b FROM R WHERE a IS NULL OR b > 1",
    "SELECT DISTINCT * FROM R",
    "SELECT DISTINCT r.b, s.c FROM R r JOIN S s ON r.b = s.b",
    "SELECT DISTINCT a + b AS s, upper(t.d) FROM R r, T t WHERE r.a * 10 = t.c OR t.c IS NULL",
    "SELECT DISTINCT b FROM R GROUP BY a, b",
    "SELECT DISTINCT b, COUNT(*) FROM R GROUP BY b",
    "SELECT DISTINCT COUNT(*) FROM R WHERE a > 100",
    "SELECT DISTINCT cat FROM items WHERE qty > 100",
    "SELECT b, MIN(a), MAX(a), COUNT(DISTINCT a), SUM(DISTINCT a), AVG(DISTINCT a) FROM R GROUP BY b",
    "SELECT a, MIN(b), MAX(b), COUNT(DISTINCT b), COUNT(b), SUM(DISTINCT b), AVG(b) FROM R GROUP BY a",
    "SELECT MIN(a), MAX(b), COUNT(DISTINCT b), SUM(DISTINCT a), AVG(DISTINCT b) FROM R WHERE a > 100",
    "SELECT MIN(a), MAX(b), COUNT(DISTINCT b), SUM(DISTINCT a), AVG(DISTINCT b) FROM R",
    "SELECT cat, MIN(price), MAX(name), COUNT(DISTINCT price), SUM(DISTINCT qty), AVG(DISTINCT price) "
    "FROM items GROUP BY cat",
    "SELECT b, MAX(b), MIN(b + a), COUNT(DISTINCT b), SUM(DISTINCT b) FROM R GROUP BY b",
    "SELECT r.a, MAX(s.c), COUNT(DISTINCT s.c), SUM(s.c), MIN(s.c * r.b) FROM R r JOIN S s ON r.b = s.b GROUP BY r.a",
    "SELECT b, MAX(a) - MIN(a) AS spread, COUNT(DISTINCT a) * 10 FROM R GROUP BY b HAVING MAX(a) > 1",
    "SELECT COUNT(DISTINCT NULL), MIN(NULL), COUNT(*) FROM R",
    "SELECT b, MIN(DISTINCT a), MAX(DISTINCT a) FROM R GROUP BY b",
    "SELECT x, MAX(y), COUNT(DISTINCT y) FROM (SELECT a + 1 AS x, b * 2 AS y FROM R) s GROUP BY x",
    "SELECT a % 2 AS parity, COUNT(DISTINCT b), MAX(b) FROM R GROUP BY a % 2",
    "SELECT upper(name), MIN(qty), MAX(CASE WHEN price > 1 THEN name END) FROM items GROUP BY upper(name)",
    "SELECT r1.a, COUNT(DISTINCT r2.b), MIN(r2.a) FROM R r1, R r2 WHERE r1.b = r2.a OR r2.a IS NULL GROUP BY r1.a",
    "SELECT x, COUNT(*), SUM(y), MIN(y) FROM (SELECT a AS x, b AS y FROM R UNION ALL SELECT b, c FROM S "
    "WHERE c > 10) t GROUP BY x",
    "WITH u AS (SELECT a FROM R UNION ALL SELECT c FROM T) SELECT a, COUNT(*) FROM u GROUP BY a",
    "SELECT COUNT(*), MAX(t.x) FROM R r, (SELECT b AS x FROM S UNION ALL SELECT c / 10 FROM T) t WHERE r.a = t.x",
    "SELECT t.x FROM (SELECT a AS x FROM R UNION ALL SELECT b FROM S UNION ALL SELECT c / 10 FROM T) t WHERE t.x > 1",
    "SELECT DISTINCT x FROM (SELECT a AS x FROM R UNION ALL SELECT b FROM S) t",
]


@pytest.mark.parametrize("sql", DISTINCT_AND_REDUCED_QUERIES)
def test_distinct_and_reduced_view_rows_match_sqlite(sql):
    query = translate(sql, SCHEMAS)
    expected = sqlite_with().execute(to_sqlite(sql)).fetchall()
    assert normalized(view_rows(query, database()), False) == normalized(expected, False)


def set_operation_rows(sql: str) -> list[tuple]:
    """The rows of a set operation by its definition over its operands' rows (sqlite has no EXCEPT ALL
    nor INTERSECT ALL, and reads A UNION B INTERSECT C left to right): rows compare NULL-safely."""
    tree = sqlglot.parse_one(sql, read="spark")
    with_ = tree.args.get("with_")
    prefix = with_.sql(dialect="spark") + " " if with_ is not None else ""
    db = sqlite_with()

    def bag(node) -> Counter:
        while isinstance(node, sqlglot.exp.Subquery):
            node = node.this
        if isinstance(node, sqlglot.exp.Select):
            rows = Counter(db.execute(to_sqlite(prefix + node.sql(dialect="spark"))).fetchall())
            return Counter(set(rows)) if node.args.get("distinct") else rows
        left, right = bag(node.this), bag(node.expression)
        all_rows = node.args.get("distinct") is False
        if not all_rows:
            left, right = Counter(set(left)), Counter(set(right))
        if isinstance(node, sqlglot.exp.Union):
            out = left + right
        elif isinstance(node, sqlglot.exp.Except):
            out = left - right
        else:
            out = left & right
        return out if all_rows else Counter(set(out))

    return list(bag(tree).elements())


SET_OPERATIONS = [
    "SELECT a FROM R UNION ALL SELECT b FROM S",
    "SELECT a, b FROM R UNION SELECT b, c / 10 FROM S",
    "SELECT b FROM R EXCEPT ALL SELECT b FROM S",
    "SELECT b FROM R EXCEPT SELECT b FROM S WHERE c > 10",
    "SELECT b FROM R MINUS SELECT a FROM R WHERE b IS NOT NULL",
    "SELECT b FROM R INTERSECT ALL SELECT b FROM S",
    "SELECT b FROM R INTERSECT SELECT b FROM S",
    "SELECT a, b FROM R INTERSECT ALL SELECT b, c / 10 FROM S",
    "SELECT * FROM R EXCEPT ALL SELECT * FROM R WHERE a = 1",
    "SELECT a FROM R UNION ALL SELECT b FROM S UNION ALL SELECT c / 10 FROM T",
    "SELECT a FROM R EXCEPT ALL SELECT b FROM S EXCEPT ALL SELECT c / 10 FROM T",
    "SELECT b FROM R INTERSECT ALL SELECT b FROM S INTERSECT ALL SELECT a FROM R",
    "SELECT b FROM R INTERSECT SELECT b FROM S INTERSECT SELECT a FROM R",
    "SELECT a FROM R UNION SELECT b FROM S UNION SELECT c / 10 FROM T",
    "(SELECT b FROM R UNION SELECT c / 10 FROM T) EXCEPT ALL SELECT b FROM S",
    "SELECT b FROM R UNION ALL SELECT b FROM S EXCEPT SELECT a FROM R",
    "SELECT a FROM R UNION SELECT b FROM S INTERSECT ALL SELECT b FROM R",
    "SELECT DISTINCT b FROM R UNION ALL SELECT b FROM S",
    "SELECT DISTINCT b FROM R UNION SELECT DISTINCT b FROM S",
    "SELECT b FROM R EXCEPT ALL (SELECT b FROM S UNION SELECT a FROM R)",
    "(SELECT b FROM R EXCEPT ALL SELECT b FROM S) INTERSECT ALL SELECT a FROM R",
    "SELECT b FROM R INTERSECT ALL (SELECT b FROM S EXCEPT ALL SELECT a FROM R WHERE a = 2)",
    "SELECT r.a, s.c FROM R r JOIN S s ON r.b = s.b UNION ALL SELECT c / 10, c FROM T WHERE d IS NOT NULL",
    "SELECT r.a, t.d FROM R r, S s, T t WHERE r.b = s.b AND s.c = t.c EXCEPT SELECT a, 'x' FROM R",
    "SELECT a + 1 FROM R UNION SELECT b * 2 FROM S",
    "WITH w AS (SELECT a, b FROM R WHERE a IS NOT NULL) SELECT * FROM w INTERSECT SELECT b, c / 10 FROM S",
    "SELECT a FROM R WHERE a > 100 UNION ALL SELECT b FROM S WHERE b > 100",
    "SELECT a FROM R WHERE a > 100 EXCEPT SELECT b FROM S",
    "SELECT b FROM R INTERSECT ALL SELECT b FROM S WHERE b > 100",
    "SELECT x FROM (SELECT a AS x FROM R UNION ALL SELECT b FROM S) t EXCEPT ALL SELECT c / 10 FROM T",
]


@pytest.mark.parametrize("sql", SET_OPERATIONS)
def test_set_operation_view_rows_match_their_definition(sql):
    query = translate(sql, SCHEMAS)
    assert normalized(view_rows(query, database()), False) == normalized(set_operation_rows(sql), False)


SQLITE_SET_OPERATIONS = [s for s in SET_OPERATIONS if " ALL" not in s.replace("UNION ALL", "")
                         and "INTERSECT" not in s.split("UNION")[-1] and "(" not in s and "WITH" not in s]


@pytest.mark.parametrize("sql", SQLITE_SET_OPERATIONS)
def test_set_operation_view_rows_match_sqlite(sql):
    query = translate(sql, SCHEMAS)
    expected = sqlite_with().execute(to_sqlite(sql)).fetchall()
    assert normalized(view_rows(query, database()), False) == normalized(expected, False)


ORDERED_SET_OPERATIONS = [
    "SELECT a FROM R UNION ALL SELECT b FROM S ORDER BY a DESC NULLS LAST LIMIT 5",
    "SELECT a, b AS y FROM R UNION SELECT c / 10, b FROM S ORDER BY 2, a NULLS LAST LIMIT 4",
    "SELECT b FROM R EXCEPT SELECT c / 10 FROM T ORDER BY b DESC",
]


@pytest.mark.parametrize("sql", ORDERED_SET_OPERATIONS)
def test_ordered_set_operation_rows_match_sqlite(sql):
    query = translate(sql, SCHEMAS)
    expected = sqlite_with().execute(to_sqlite(sql)).fetchall()
    assert normalized(view_rows(query, database()), True) == normalized(expected, True)


def test_new_aggregates_group_by_the_view_keys_and_their_value():
    for sql in DISTINCT_AND_REDUCED_QUERIES + SET_OPERATIONS:
        query = translate(sql, SCHEMAS)
        assert query.aggregates[0].name == ROW_COUNT
        for aggregate in query.aggregates:
            assert isinstance(aggregate.definition, AggSum), sql
            assert aggregate.definition.group == query.keys + aggregate.value_keys, sql
            assert not set(aggregate.value_keys) & set(query.keys), sql


# ---------------------------------------------------------------------------------------------------
# Errors

MULTI_LINE = """SELECT r.a,
       SUM(s.c)
FROM R r
  {join} S s ON r.b = s.b
WHERE {where}
GROUP BY r.a"""


def multi_line(join="JOIN", where="r.a > 0") -> str:
    return MULTI_LINE.format(join=join, where=where)


def raises(error_class, sql, schemas=SCHEMAS):
    with pytest.raises(error_class) as caught:
        translate(sql, schemas)
    return caught.value


@pytest.mark.parametrize("join, construct, column", [
    ("LEFT SEMI JOIN", "LEFT SEMI JOIN", 3), ("LEFT ANTI JOIN", "LEFT ANTI JOIN", 3),
    ("NATURAL JOIN", "NATURAL JOIN", 3),
])
def test_semi_anti_and_natural_joins_are_named_with_their_position(join, construct, column):
    error = raises(UnsupportedQueryError, multi_line(join=join))
    assert (error.construct, error.line, error.column) == (construct, 4, column)
    assert f"{construct} at line 4, column {column}" in str(error)


@pytest.mark.parametrize("where, construct, column", [
    ("r.b + 1 = (SELECT MAX(c) FROM S) + 1", "MAX in a subquery", 25),
    ("r.b = (SELECT c FROM S)", "scalar subquery without an aggregate", 14),
    ("r.b = (SELECT SUM(c) FROM S GROUP BY b)", "GROUP BY in a scalar subquery", 44),
    ("r.b = ANY (SELECT c FROM S)", "ANY subquery", 18),
    ("r.b IN (SELECT c, b FROM S)", "IN subquery of several columns", 15),
    ("r.b NOT IN (SELECT c FROM S GROUP BY c)", "NOT IN of a grouped subquery", 15),
    ("r.b = (SELECT COUNT(DISTINCT c) FROM S)", "COUNT(DISTINCT) in a subquery", 21),
    ("r.a > 0 AND ROW_NUMBER() OVER (ORDER BY r.a) = 1", "window function ROW_NUMBER", 19),
    ("MIN(r.a) > 0", "aggregate in WHERE", 7),
    ("SUM(r.a) > 0", "aggregate in WHERE", 7),
    ("CAST(r.a AS BOOLEAN)", "CAST to BOOLEAN", 7),
    ("sqrt(r.a) > 1", "function SQRT", 7),
    ("r.a > 0 AND r.b = r.a + INTERVAL 3 HOUR", "INTERVAL … HOUR", 31),
])
def test_unsupported_conditions_are_named_with_their_position(where, construct, column):
    error = raises(UnsupportedQueryError, multi_line(where=where))
    assert (error.construct, error.line, error.column) == (construct, 5, column)


@pytest.mark.parametrize("sql, construct, line, column", [
    ("SELECT COUNT(*) FROM (SELECT a FROM R\nUNION SELECT b FROM S) t", "UNION in a derived table", 2, 1),
    ("WITH u AS (SELECT a FROM R INTERSECT SELECT b FROM S) SELECT COUNT(*) FROM u",
     "INTERSECT in a derived table", 1, 28),
    ("SELECT COUNT(*) FROM (SELECT a FROM R UNION ALL SELECT b FROM S LIMIT 2) t",
     "LIMIT of a set operation in a derived table", 1, 65),
    ("SELECT a FROM R EXCEPT SELECT b, c FROM S", "EXCEPT of SELECTs with 1 and 2 columns", 1, 17),
    ("SELECT a FROM R UNION ALL SELECT SUM(b) FROM S", "aggregate in a set operation", 1, 34),
    ("SELECT a FROM R UNION ALL SELECT b FROM S GROUP BY b", "aggregate in a set operation", 1, 52),
    ("SELECT a FROM R UNION ALL (SELECT b FROM S LIMIT 2)", "LIMIT in a set operation", 1, 44),
    ("SELECT a FROM R UNION ALL (SELECT b FROM S UNION SELECT c FROM T LIMIT 2)",
     "LIMIT of a set operation inside another", 1, 66),
    ("SELECT a FROM R UNION ALL SELECT b FROM S ORDER BY S.b",
     "ORDER BY an expression that is not in the select list", 1, 52),
    ("SELECT a FROM R UNION ALL SELECT b FROM S ORDER BY 2", "position 2 that is not in the select list", 1, 52),
    ("SELECT a FROM R UNION ALL SELECT b FROM S ORDER BY COUNT(*)", "aggregate in ORDER BY of a set operation", 1, 52),
    ("SELECT a FROM R UNION ALL SELECT b FROM S LIMIT 2 OFFSET 1", "OFFSET", 1, 51),
    ("SELECT a FROM R WHERE a IN (SELECT a FROM R UNION SELECT b FROM S)", "UNION", 1, 45),
    ("SELECT COUNT(*), (SELECT COUNT(*) FROM S) FROM R", "scalar subquery in an aggregate view without GROUP BY",
     1, 19),
    ("SELECT a FROM R, S\nRIGHT JOIN T ON S.c = T.c", "RIGHT JOIN after a comma or CROSS JOIN", 2, 1),
    ("SELECT a FROM R LEFT JOIN S ON R.b = S.b AND EXISTS (SELECT 1 FROM T)",
     "subquery in the ON condition of a LEFT JOIN", 1, 46),
    ("SELECT DISTINCT a, COUNT(*) FROM R GROUP BY a, b", "SELECT DISTINCT over aggregates", 1, 8),
    ("SELECT DISTINCT a FROM R GROUP BY a, b HAVING COUNT(*) > 1", "SELECT DISTINCT over aggregates", 1, 8),
    ("SELECT x FROM (SELECT DISTINCT a AS x FROM R) s", "SELECT DISTINCT in a derived table", 1, 23),
    ("SELECT COUNT(DISTINCT a, b) FROM R", "COUNT(DISTINCT) of several expressions", 1, 8),
    ("SELECT b, MAX(a) FROM R GROUP BY b ORDER BY MIN(a)",
     "ORDER BY an expression that is not in the select list", 1, 45),
    ("SELECT stddev(DISTINCT a) FROM R", "aggregate function STDDEV", 1, 8),
    ("SELECT stddev(a) FROM R", "aggregate function STDDEV", 1, 8),
    ("WITH RECURSIVE t AS (SELECT a FROM R) SELECT * FROM t", "recursive CTE", 1, 6),
    ("SELECT a, COUNT(*) FROM R\nGROUP BY ROLLUP (a)", "ROLLUP", 2, 10),
    ("SELECT a, COUNT(*) FROM R GROUP BY GROUPING SETS ((a), ())", "GROUPING SETS", 1, 36),
    ("SELECT a FROM R\n  LATERAL VIEW explode(array(a)) t AS x", "LATERAL VIEW", 2, 3),
    ("SELECT a FROM R TABLESAMPLE (10 PERCENT)", "TABLESAMPLE", 1, 17),
    ("SELECT s.x FROM (SELECT SUM(a) AS x FROM R LIMIT 3) s", "LIMIT in a derived table", 1, 44),
    ("SELECT s.a FROM (SELECT a FROM R LIMIT 3) s", "LIMIT in a derived table", 1, 34),
    ("SELECT a, SUM(b) FROM R", "column a that is neither grouped nor aggregated", 1, 8),
    ("SELECT b, SUM(a) FROM R GROUP BY b ORDER BY a", "column a that is neither grouped nor aggregated", 1, 45),
    ("SELECT b, SUM(a) FROM R GROUP BY b ORDER BY COUNT(*)", "ORDER BY an expression that is not in the select list",
     1, 45),
    ("SELECT a FROM R LIMIT 2 OFFSET 1", "OFFSET", 1, 25),
    ("SELECT a FROM R JOIN S USING (b)", "JOIN … USING", 1, 24),
    ("SELECT a FROM R, LATERAL (SELECT 1)", "LATERAL", 1, 18),
    ("SELECT * FROM VALUES (1, 2) AS v(a, b)", "VALUES", 1, 15),
    ("SELECT SUM(a) FILTER (WHERE a > 1) FROM R", "aggregate FILTER", 1, 15),
    ("SELECT 1", "SELECT without FROM", 1, 1),
    ("SELECT a FROM R;\nSELECT b FROM S", "several statements", 2, 1),
    ("SELECT TRY_CAST(a AS INT) FROM R", "TRY_CAST", 1, 8),
    ("INSERT INTO R VALUES (1, 2)", "INSERT statement", 1, 1),
])
def test_unsupported_queries_name_the_construct_and_where_it_is(sql, construct, line, column):
    error = raises(UnsupportedQueryError, sql)
    assert (error.construct, error.line, error.column) == (construct, line, column)


@pytest.mark.parametrize("call, name", [
    ("rand()", "rand"), ("random()", "random"), ("randn(7)", "randn"), ("uuid()", "uuid"), ("now()", "now"),
    ("current_date", "current_date"), ("current_date()", "current_date"),
    ("current_timestamp()", "current_timestamp"), ("monotonically_increasing_id()", "monotonically_increasing_id"),
    ("spark_partition_id()", "spark_partition_id"), ("shuffle(array(a))", "shuffle"),
    ("input_file_name()", "input_file_name"), ("unix_timestamp()", "unix_timestamp"),
])
def test_nondeterministic_functions_are_refused_by_name_and_position(call, name):
    error = raises(NonDeterministicError, f"SELECT a,\n  {call} AS x\nFROM R")
    assert isinstance(error, UnsupportedQueryError)
    assert (error.line, error.column) == (2, 3)
    assert f"non-deterministic function {name} at line 2, column 3" in str(error)


def test_nondeterministic_function_inside_a_condition():
    error = raises(NonDeterministicError, multi_line(where="r.a > rand() * 10"))
    assert (error.line, error.column) == (5, 13)


def test_unknown_table():
    error = raises(UnknownTableError, "SELECT a\nFROM R, Missing m")
    assert str(error) == "unknown table Missing at line 2, column 9"
    assert (error.line, error.column) == (2, 9)


@pytest.mark.parametrize("sql, message", [
    ("SELECT a,\n  r.zz FROM R r", "unknown column r.zz at line 2, column 3"),
    ("SELECT a FROM R WHERE\n  x.a = 1", "unknown column x.a (no FROM item x) at line 2, column 3"),
    ("SELECT a FROM R, S\nWHERE b = 1", "ambiguous column b (in r and s) at line 2, column 7"),
    ("SELECT S.a FROM R r", "unknown column S.a (no FROM item S) at line 1, column 8"),
    ("SELECT y FROM (SELECT a AS x FROM R) s", "unknown column y at line 1, column 8"),
])
def test_unknown_and_ambiguous_columns(sql, message):
    assert str(raises(UnknownColumnError, sql)) == message


@pytest.mark.parametrize("sql, line, column, fragment", [
    ("SELECT a FROM R\nWHERE a = = 1", 2, 11, "incomplete EQ at '='"),
    ("SELECT a FROM R WHERE", 1, 17, "incomplete WHERE"),
    ("SELECT a,\n  'abc FROM R", 2, 3, "Missing '"),
    ("SELECT a FROM R WHERE (a = 1", 1, 28, "Expecting )"),
])
def test_syntax_errors_carry_line_and_column(sql, line, column, fragment):
    error = raises(ParseError, sql)
    assert (error.line, error.column) == (line, column)
    assert fragment in str(error) and f"(line {line}, column {column})" in str(error)


def test_invalid_date_literal():
    error = raises(ParseError, "SELECT a FROM R WHERE a > DATE '1998-13-45'")
    assert "invalid literal" in str(error)
