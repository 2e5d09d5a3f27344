"""Differential test of the runtime: for every flat corpus query and a sample of the nested corpus, at
depth 1 and unlimited, the view equals the defining query run by Spark (its rows, and its column names
and types) after every refresh, on random data with NULLs and duplicates, after batches that insert (a
duplicate with a NULL key among them), delete and update a join column in every table, and insert and
delete a row again before the same refresh.

The sample of the nested corpus is one query per kind (correlated and uncorrelated scalar subqueries,
NOT EXISTS, NOT IN with its NULL rule, a FULL JOIN); its views share the tables, stores and refreshes of
the flat corpus's. CI runs every query at the depth views get by default (unlimited); the depth-1 plans
that differ from those run on demand in a database of their own (`./build.sh test -m runtime -k
differential`), as does the whole nested corpus (`-k nested`): with them, CI would outlast its time.
On the reference evaluator every plan of every depth runs in CI (test_compiler_differential.py), and
the SQL of each in DuckDB (test_sqlgen.py)."""

from __future__ import annotations

import json
import random
import re
from collections import Counter

import pytest

pytestmark = pytest.mark.runtime

import spark_ivm
from spark_ivm.compiler.viewlet import compile_query
from spark_ivm.frontend.translate import translate

from corpus import NESTED_QUERIES, QUERIES, SCHEMAS

NESTED_SAMPLE = [
    "SELECT b, SUM(a) FROM R WHERE a > (SELECT SUM(c) FROM S WHERE S.b = R.b) GROUP BY b",
    "SELECT COUNT(*) FROM R WHERE a < (SELECT AVG(c) FROM S)",
    "SELECT b, COUNT(*) FROM R WHERE NOT EXISTS (SELECT 1 FROM S WHERE S.b = R.b AND S.c > R.a) GROUP BY b",
    "SELECT a, b FROM R WHERE b NOT IN (SELECT c FROM S)",
    "SELECT R.a, S.b FROM R FULL JOIN S ON R.b = S.b AND R.a < S.c",
]

ROUNDS = 2
# Views in map stores of 40 (the flat corpus and the nested sample: three stores). A refresh of a store computes the increments of
# all its views in groups of bounded size (heuristics.PLAN_MAX_STATEMENTS): with every view changing in
# every round, one plan of all of them outlasted Spark's broadcast timeout.
VIEWS_PER_STORE = 40
# In this order: a depth whose plan equals an earlier one's is left out.
DEPTHS = {"unlimited": None, "depth1": 1}


def _value(rng: random.Random) -> str:
    return "NULL" if rng.random() < 0.2 else str(rng.randint(0, 3))


def _rows(rng: random.Random, arity: int, n: int) -> str:
    rows = []
    for _ in range(n):
        row = "(" + ", ".join(_value(rng) for _ in range(arity)) + ")"
        rows.append(row)
        if rng.random() < 0.3:
            rows.append(row)  # duplicate
    return ", ".join(rows)


def _random_batch(spark, rng: random.Random) -> None:
    """Changes to every table: an insert with a duplicated row whose first column is NULL, a delete, an
    update of a column the queries join on (every column joins another table's, on values 0-3 and NULL),
    and a row inserted and deleted again before the refresh."""
    for table, cols in SCHEMAS.items():
        twice = "(" + ", ".join(["NULL"] + [_value(rng) for _ in cols[1:]]) + ")"
        spark.sql(f"INSERT INTO {table} VALUES {_rows(rng, len(cols), rng.randint(1, 3))}, {twice}, {twice}")
        spark.sql(f"DELETE FROM {table} WHERE {cols[0]} = {rng.randint(0, 3)}")
        key = rng.choice(cols)
        spark.sql(f"UPDATE {table} SET {key} = {_value(rng)} WHERE {cols[-1] if key == cols[0] else cols[0]} <=> "
                  f"{_value(rng)}")
        # A row that comes and goes within one refresh must leave no trace.
        spark.sql(f"INSERT INTO {table} VALUES ({', '.join(['42'] * len(cols))})")
        spark.sql(f"DELETE FROM {table} WHERE {cols[0]} = 42")


def _contents(spark, queries: dict[str, str]) -> dict[str, Counter]:
    """The bag of rows of each query, all read by one Spark query (rows as JSON, numbers rounded)."""
    def cell(v):
        return round(v, 6) if isinstance(v, float) else v

    union = " UNION ALL ".join(f"SELECT '{name}' AS name, to_json(struct(*), map('ignoreNullFields', 'false')) AS row FROM ({sql}) AS q"
                               for name, sql in queries.items())
    contents = {name: Counter() for name in queries}
    for r in spark.sql(union).collect():
        contents[r["name"]][tuple(cell(v) for v in json.loads(r["row"]).values())] += 1
    return contents


def distinct_plans(queries: list[str], prefix: str = "v",
                   labels=tuple(DEPTHS)) -> dict[str, tuple[str, int | None]]:
    """View name -> (query, depth) for every query at each depth of `labels`, leaving out a depth whose
    compiled plan is the same as an earlier depth's for that query (the runtime would run the very
    same statements twice)."""
    views, seen = {}, set()
    for i, sql in enumerate(queries):
        query = translate(sql, SCHEMAS)
        for label, depth in DEPTHS.items():
            plan = compile_query(query, name="v", depth=depth).explain()
            key = (i, re.sub(r"\s*--.*", "", plan))  # comments name the depth; the statements are what counts
            if key not in seen:
                seen.add(key)
                if label in labels:
                    views[f"{prefix}{i}_{label}"] = (sql, depth)
    return views


def create_views(spark, queries: list[str], rng: random.Random, database: str, store: str,
                 prefix: str, labels=tuple(DEPTHS)) -> dict[str, str]:
    """Random tables R, S, T in a new database and every query at the depths of `labels` as views, in map
    stores of VIEWS_PER_STORE views each (REFRESH INCREMENTAL VIEWS is then one commit per store and
    round); view name -> query."""
    spark_ivm.enable(spark)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
    spark.sql(f"USE {database}")
    for table, cols in SCHEMAS.items():
        spark.sql(f"CREATE TABLE {table} ({', '.join(c + ' INT' for c in cols)}) USING delta")
        spark.sql(f"INSERT INTO {table} VALUES {_rows(rng, len(cols), 8)}")
    views = {}
    for i, (name, (sql, depth)) in enumerate(distinct_plans(queries, prefix, labels).items()):
        options = ", ".join([f"store = '{store}{i // VIEWS_PER_STORE}'"] + ([] if depth is None else [f"depth = {depth}"]))
        spark.sql(f"CREATE INCREMENTAL VIEW {name} WITH ({options}) AS {sql}")
        views[name] = sql
    return views


def refresh_rounds(spark, views: dict[str, str], rng: random.Random) -> list[str]:
    """Compare every view with its query now and after each of ROUNDS random batches and refreshes;
    the differences found."""
    failures = []
    for round_no in range(ROUNDS + 1):
        if round_no:
            _random_batch(spark, rng)
            statuses = {r["view"]: r["status"] for r in spark.sql("REFRESH INCREMENTAL VIEWS").collect()}
            assert set(statuses.values()) <= {"refreshed", "up to date"}
        got_all = _contents(spark, {name: f"SELECT * FROM {name}" for name in views})
        want_all = _contents(spark, views)
        if not round_no:  # the view's column names and types are the query's
            for name, sql in views.items():
                got, want = spark.table(name).schema, spark.sql(sql).schema
                if [(f.name, f.dataType) for f in got] != [(f.name, f.dataType) for f in want]:
                    failures.append(f"{name}: columns {got.simpleString()}, the query's {want.simpleString()}: {sql}")
        for name, sql in views.items():
            got, want = got_all[name], want_all[name]
            if got != want:
                failures.append(f"round {round_no}, {name}: {sql}\n  view  {sorted(got.items(), key=repr)}\n"
                                f"  query {sorted(want.items(), key=repr)}")
    return failures


@pytest.fixture(scope="module", params=[
    pytest.param("unlimited"), pytest.param("depth1", marks=pytest.mark.on_demand)])
def corpus_views(spark, request):
    """The corpus's views at one depth (the depth-1 plans equal to the unlimited ones left out), in a
    database of their own: (database, views, the random source of the batches)."""
    label = request.param
    rng = random.Random(20261121)
    database = f"ivm_differential_{label}"
    views = create_views(spark, QUERIES + NESTED_SAMPLE, rng, database, f"corpus_maps_{label}_", "v", (label,))
    yield database, views, rng
    spark.sql("USE default")


def test_every_corpus_query_at_both_depths_is_covered():
    views = distinct_plans(QUERIES + NESTED_SAMPLE)
    assert {sql for sql, _ in views.values()} == set(QUERIES + NESTED_SAMPLE)
    for i, sql in enumerate(QUERIES + NESTED_SAMPLE):
        assert f"v{i}_unlimited" in views
    assert set(NESTED_SAMPLE) <= set(NESTED_QUERIES)
    assert len(distinct_plans(NESTED_SAMPLE)) > len(NESTED_SAMPLE)  # some nested queries at both depths


def test_views_equal_their_queries_after_every_refresh(spark, corpus_views):
    database, views, rng = corpus_views
    spark.sql(f"USE {database}")
    failures = refresh_rounds(spark, views, rng)
    assert not failures, "\n".join(failures)
