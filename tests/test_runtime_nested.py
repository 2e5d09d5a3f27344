"""Differential test of the runtime on nested queries: every NESTED_QUERIES query (scalar subqueries,
MIN/MAX compared, EXISTS, IN, NOT IN, grouped derived tables, outer joins) as an incremental view at
depth 1 and unlimited, all in one map store, equals its defining query run by Spark after every
REFRESH INCREMENTAL VIEWS, on random data with NULLs and duplicates and random INSERT, DELETE and
UPDATE batches."""

from __future__ import annotations

import re

import pytest

# End-to-end and long (see pyproject.toml): not in ./build.sh test; run with ./build.sh test -m runtime
pytestmark = [pytest.mark.runtime, pytest.mark.on_demand]

import random

import spark_ivm
from spark_ivm.compiler import compile_query
from spark_ivm.sql import translate

from corpus import NESTED_QUERIES, SCHEMAS
from test_runtime_differential import DEPTHS, ROUNDS, _contents, _random_batch, _rows

DATABASE = "ivm_nested"
STORE = "nested_maps"


def distinct_plans(queries) -> dict[str, tuple[str, int | None]]:
    """View name -> (query, depth) for each query at each depth whose plan differs from the other
    depth's."""
    views, seen = {}, set()
    for i, sql in enumerate(queries):
        query = translate(sql, SCHEMAS)
        for label, depth in DEPTHS.items():
            plan = compile_query(query, name="v", depth=depth).explain()
            key = (i, re.sub(r"\s*--.*", "", plan))
            if key not in seen:
                seen.add(key)
                views[f"n{i}_{label}"] = (sql, depth)
    return views


def create_views(spark, queries, rng: random.Random) -> dict[str, str]:
    spark_ivm.enable(spark)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
    spark.sql(f"USE {DATABASE}")
    for table, cols in SCHEMAS.items():
        spark.sql(f"CREATE TABLE {table} ({', '.join(c + ' INT' for c in cols)}) USING delta")
        spark.sql(f"INSERT INTO {table} VALUES {_rows(rng, len(cols), 8)}")
    views = {}
    for name, (sql, depth) in distinct_plans(queries).items():
        options = ", ".join([f"store = '{STORE}'"] + ([] if depth is None else [f"depth = {depth}"]))
        spark.sql(f"CREATE INCREMENTAL VIEW {name} WITH ({options}) AS {sql}")
        views[name] = sql
    return views


def differences(spark, views: dict[str, str], round_no: int) -> list[str]:
    got_all = _contents(spark, {name: f"SELECT * FROM {name}" for name in views})
    want_all = _contents(spark, views)
    failures = []
    for name, sql in views.items():
        got, want = got_all[name], want_all[name]
        if got != want:
            failures.append(f"round {round_no}, {name}: {sql}\n  view  {sorted(got.items(), key=repr)}\n"
                            f"  query {sorted(want.items(), key=repr)}")
    return failures


@pytest.fixture(scope="module")
def nested_views(spark):
    rng = random.Random(20261123)
    views = create_views(spark, NESTED_QUERIES, rng)
    yield views, rng
    spark.sql("USE default")


def test_every_nested_query_is_covered():
    views = distinct_plans(NESTED_QUERIES)
    assert {sql for sql, _ in views.values()} == set(NESTED_QUERIES)


def test_nested_views_equal_their_queries_after_every_refresh(spark, nested_views):
    views, rng = nested_views
    spark.sql(f"USE {DATABASE}")
    failures = []
    for round_no in range(ROUNDS + 1):
        if round_no:
            _random_batch(spark, rng)
            statuses = {r["view"]: r["status"] for r in spark.sql("REFRESH INCREMENTAL VIEWS").collect()}
            assert set(statuses.values()) <= {"refreshed", "up to date"}
        failures += differences(spark, views, round_no)
    assert not failures, "\n".join(failures)
