"""Long and deep expressions, without Spark.

A view whose SELECT or WHERE holds a chain of a thousand terms (+ and -, ||, AND, OR, NOT of an AND, IN,
CASE WHEN, UNION ALL) compiles, its calculus stays a few levels deep, and on the reference evaluator its
triggers keep every map equal to its definition, and the view's aggregates equal to what the query
computes (computed here in Python), after every batch; the runtime's SQL of its maps and triggers and its
catalog entry are written too. Nesting as deep as a thousand levels (parentheses, function calls, CASE,
NOT, subqueries, EXISTS) is an UnsupportedQueryError that says so, not Python's RecursionError; a few
dozen levels compile."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import sqlglot

from spark_ivm import compile_view
from spark_ivm.calculus.evaluator import Database, apply_batch, evaluate_map, initial_maps
from spark_ivm.calculus.expressions import Rel
from spark_ivm.compiler.plan_json import plan_from_json, plan_to_json
from spark_ivm.errors import UnsupportedQueryError
from spark_ivm.frontend.values import disjunction_of
from spark_ivm.runtime.sqlgen import Sources, quote, statement_sql

from corpus import deep

N = 1000  # terms of a chain
SCHEMAS = {"t": ["a", "b"], "u": ["c", "d"]}
VALUES = (0, 1, 2, 7, N + 5, None)  # inside and outside the chains' ranges, and NULL


def chain(op: str, term) -> str:
    return f" {op} ".join(term(i) for i in range(N))


def rows_of(bag: dict) -> list[tuple]:
    return [row for row, m in bag.items() for _ in range(m)]


def grouped(rows, key, value=lambda r: 1, keep=lambda r: True) -> dict:
    """{(key,): sum of value} over the rows kept, without the keys whose sum is 0 (as maps hold them)."""
    out: Counter = Counter()
    for r in rows:
        if keep(r):
            out[(key(r),)] += value(r)
    return {k: v for k, v in out.items() if v}


def total(rows, value=lambda r: 1, keep=lambda r: True) -> dict:
    s = sum(value(r) for r in rows if keep(r))
    return {(): s} if s else {}


# The chain's sign pattern: a term in three is subtracted.
SIGNS = [1 if i % 3 else -1 for i in range(N)]
SIGNED = "a" + "".join(f" {'+' if sign > 0 else '-'} a" for sign in SIGNS[1:])

# (query, {aggregate: its expected map, a function of the rows of t and u})
CASES = {
    "sum": (f"SELECT b, SUM({chain('+', lambda i: 'a')}) AS s FROM t GROUP BY b", {
        "count": lambda t, u: grouped(t, lambda r: r[1]),
        "sum_1": lambda t, u: grouped(t, lambda r: r[1], lambda r: N * r[0], lambda r: r[0] is not None),
        "nn_1": lambda t, u: grouped(t, lambda r: r[1], keep=lambda r: r[0] is not None)}),
    "plus and minus": (f"SELECT b, SUM({SIGNED}) AS s FROM t GROUP BY b", {
        "sum_1": lambda t, u: grouped(t, lambda r: r[1], lambda r: (1 + sum(SIGNS[1:])) * r[0],
                                      lambda r: r[0] is not None)}),
    "concatenation": (f"SELECT {chain('||', lambda i: 'CAST(a AS STRING)')} AS s FROM t", {
        "count": lambda t, u: grouped(t, lambda r: None if r[0] is None else str(r[0]) * N)}),
    "and": (f"SELECT b, COUNT(*) FROM t WHERE {chain('AND', lambda i: f'a <> {i}')} GROUP BY b", {
        "count": lambda t, u: grouped(t, lambda r: r[1], keep=lambda r: r[0] is not None and r[0] >= N)}),
    "or": (f"SELECT b, COUNT(*) FROM t WHERE {chain('OR', lambda i: f'a = {i}')} GROUP BY b", {
        "count": lambda t, u: grouped(t, lambda r: r[1], keep=lambda r: r[0] is not None and r[0] < N)}),
    "or with a join": (f"SELECT COUNT(*) FROM t, u WHERE t.b = u.c AND ({chain('OR', lambda i: f't.a = {i}')})", {
        "count": lambda t, u: total([(x, y) for x in t for y in u],
                                    keep=lambda p: p[0][1] is not None and p[0][1] == p[1][0]
                                    and p[0][0] is not None and p[0][0] < N)}),
    "not and": (f"SELECT b, COUNT(*) FROM t WHERE NOT ({chain('AND', lambda i: f'a = {i}')}) GROUP BY b", {
        "count": lambda t, u: grouped(t, lambda r: r[1], keep=lambda r: r[0] is not None)}),
    "in": (f"SELECT b, COUNT(*) FROM t WHERE a IN ({', '.join(str(i) for i in range(N))}) GROUP BY b", {
        "count": lambda t, u: grouped(t, lambda r: r[1], keep=lambda r: r[0] is not None and r[0] < N)}),
    "case": (f"SELECT b, SUM(CASE {' '.join(f'WHEN a = {i} THEN {10 * i}' for i in range(N))} ELSE -1 END) "
             f"FROM t GROUP BY b", {
        "sum_1": lambda t, u: grouped(t, lambda r: r[1], lambda r: 10 * r[0] if r[0] is not None and r[0] < N else -1)}),
    "union all": (" UNION ALL ".join(["SELECT a FROM t"] * N), {
        "count": lambda t, u: grouped(t, lambda r: r[0], lambda r: N)}),
}


def depth(e) -> int:
    deepest, pending = 0, [(e, 1)]
    while pending:
        node, d = pending.pop()
        deepest = max(deepest, d)
        pending += [(c, d + 1) for c in node.children()]
    return deepest


def random_bag(rng: random.Random, arity: int, rows: int) -> dict:
    bag: Counter = Counter(tuple(rng.choice(VALUES) for _ in range(arity)) for _ in range(rows))
    return dict(bag)


@pytest.mark.parametrize("case", CASES)
def test_a_chain_of_a_thousand_terms_is_maintained(case):
    sql, expected = CASES[case]
    plan = compile_view(sql, SCHEMAS)
    assert max(depth(m.definition) for m in plan.maps) <= 40  # a balanced chain, not a thousand levels
    rng = random.Random(case)
    db = Database({name: random_bag(rng, len(cols), 5) for name, cols in SCHEMAS.items()})
    initial_maps(plan, db)
    batches = [(name, random_bag(rng, len(SCHEMAS[name]), 2)) for name in ("t", "u", "t")]
    batches.append(("t", {row: -1 for row in list(db.relations["t"])[:2]}))  # deletes
    for step, (name, batch) in enumerate([(None, None)] + batches):
        if name is not None:
            apply_batch(plan, db, name, batch)
        for m in plan.maps:
            assert db.maps[m.name] == evaluate_map(m.definition, m.keys, db), f"{m.name} after batch {step}"
        t, u = rows_of(db.relations["t"]), rows_of(db.relations.get("u", {}))
        for aggregate, computed in expected.items():
            assert db.maps[f"q_{aggregate}"] == computed(t, u), f"{aggregate} after batch {step}"


@pytest.mark.parametrize("case", CASES)
def test_the_runtime_writes_a_chain_of_a_thousand_terms(case):
    """What CREATE does with the plan besides: the SQL of every map and trigger statement (which Spark's
    parser reads back), and the catalog entry's JSON (which reads back as the same plan)."""
    plan = compile_view(CASES[case][0], SCHEMAS)
    keys = {m.name: m.keys for m in plan.maps}
    sources = Sources(relation=quote, delta=lambda r: quote(f"batch_{r}"), map=lambda m: quote(f"map_{m}"),
                      columns=lambda r: SCHEMAS[r], map_keys=lambda m: keys[m])
    expressions = [(m.definition, m.keys) for m in plan.maps]
    expressions += [(s.expr, s.keys) for t in plan.triggers for s in t.statements]
    for e, map_keys in expressions:
        assert len(sqlglot.parse(statement_sql(e, map_keys, sources), read="spark")) == 1
    read_back = plan_from_json(plan_to_json(plan))
    assert (read_back.maps, read_back.triggers) == (plan.maps, plan.triggers)


NESTINGS = ["parentheses", "functions", "case", "not", "negation", "subqueries", "exists", "parenthesized sum"]


@pytest.mark.parametrize("kind", NESTINGS)
def test_nesting_a_thousand_levels_deep_is_an_unsupported_query(kind):
    with pytest.raises(UnsupportedQueryError, match="nested this deeply"):
        compile_view(deep(kind, N, "t", "u"), SCHEMAS)


@pytest.mark.parametrize("kind", [k for k in NESTINGS if k != "exists"])
def test_nesting_a_few_dozen_levels_deep_compiles(kind):
    assert compile_view(deep(kind, 30, "t", "u"), SCHEMAS).maps


def test_subqueries_in_expressions_nest_four_levels_deep():
    """Nested subqueries' deltas nest the changes of every level, so that compiling takes several times
    longer per level: a fifth level is refused, whatever its kind, rather than compiled for minutes."""
    assert compile_view(deep("exists", 4, "t", "u"), SCHEMAS).maps
    scalar = "SELECT a FROM t WHERE a > (SELECT SUM(c) FROM u WHERE d = b AND c > {})"
    inner = "(SELECT SUM(a) FROM t t{0} WHERE t{0}.b = u.d AND t{0}.a IN {1})"
    five = scalar.format(inner.format(1, inner.format(2, inner.format(3, "(SELECT c FROM u u4 WHERE u4.d = 1)"))))
    for query in (deep("exists", 5, "t", "u"), deep("exists", 40, "t", "u"), five):
        with pytest.raises(UnsupportedQueryError, match="nested more than 4 levels deep"):
            compile_view(query, SCHEMAS)


def test_an_or_of_fifty_exists_is_maintained():
    """Each EXISTS binds its count by a lift before the conditions, so the OR is one test of fifty terms,
    not inclusion–exclusion's 2^50 − 1."""
    sql = "SELECT COUNT(*) FROM t WHERE " + " OR ".join(
        f"EXISTS (SELECT 1 FROM u WHERE u.c = t.b AND u.d = {i})" for i in range(50))
    plan = compile_view(sql, SCHEMAS)
    rng = random.Random("exists")
    db = Database({name: random_bag(rng, len(cols), 6) for name, cols in SCHEMAS.items()})
    initial_maps(plan, db)
    for name in ("u", "t", "u"):
        apply_batch(plan, db, name, random_bag(rng, len(SCHEMAS[name]), 3))
        t, u = rows_of(db.relations["t"]), rows_of(db.relations["u"])
        matched = [r for r in t if any(r[1] is not None and c == r[1] and d is not None and d < 50 for c, d in u)]
        assert db.maps["q_count"] == ({(): len(matched)} if matched else {})
        for m in plan.maps:
            assert db.maps[m.name] == evaluate_map(m.definition, m.keys, db)


def test_an_or_of_many_conditions_that_read_relations_is_refused_not_expanded():
    five = [Rel("u", (f"c{i}", f"d{i}")) for i in range(5)]
    assert disjunction_of(five[:4]) is not None  # 15 terms
    with pytest.raises(UnsupportedQueryError, match="OR of more than 4 conditions that read relations"):
        disjunction_of(five)
