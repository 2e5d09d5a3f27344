"""Differential test of the runtime: for every corpus query, at depth 1 and unlimited, the view
equals the defining query run by Spark after every refresh, on random data with NULLs and
duplicates and random batches of INSERT, DELETE and UPDATE statements (including rows inserted and
deleted again before the same refresh)."""

from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal

import pytest

# End-to-end runtime suites: run with `./build.sh test -m runtime` (see pyproject.toml).
pytestmark = pytest.mark.runtime

import spark_ivm

from corpus import QUERIES, SCHEMAS

ROUNDS = 2
DEPTHS = {"depth1": 1, "unlimited": None}


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
    for table in rng.sample(sorted(SCHEMAS), rng.randint(1, len(SCHEMAS))):
        cols = SCHEMAS[table]
        kind = rng.choice(["insert", "delete", "update", "mixed"])
        if kind in ("insert", "mixed"):
            spark.sql(f"INSERT INTO {table} VALUES {_rows(rng, len(cols), rng.randint(1, 4))}")
        if kind in ("delete", "mixed"):
            spark.sql(f"DELETE FROM {table} WHERE {cols[0]} = {rng.randint(0, 3)}")
        if kind in ("update", "mixed"):
            spark.sql(f"UPDATE {table} SET {cols[1]} = {_value(rng)} WHERE {cols[0]} <=> {_value(rng)}")
        # A row that comes and goes within one refresh must leave no trace.
        spark.sql(f"INSERT INTO {table} VALUES ({', '.join(['42'] * len(cols))})")
        spark.sql(f"DELETE FROM {table} WHERE {cols[0]} = 42")


def _normalize(rows) -> Counter:
    def cell(v):
        if isinstance(v, float):
            return round(v, 6)
        if isinstance(v, Decimal):
            return round(float(v), 6)
        return v

    return Counter(tuple(cell(v) for v in r) for r in rows)


@pytest.fixture(scope="module")
def corpus_views(spark):
    spark_ivm.enable(spark)
    spark.sql("CREATE DATABASE IF NOT EXISTS ivm_differential")
    spark.sql("USE ivm_differential")
    rng = random.Random(20261121)
    for table, cols in SCHEMAS.items():
        spark.sql(f"CREATE TABLE {table} ({', '.join(c + ' INT' for c in cols)}) USING delta")
        spark.sql(f"INSERT INTO {table} VALUES {_rows(rng, len(cols), 8)}")
    views = {}
    for i, sql in enumerate(QUERIES):
        for label, depth in DEPTHS.items():
            name = f"v{i}_{label}"
            option = "" if depth is None else f" WITH (depth = {depth})"
            spark.sql(f"CREATE INCREMENTAL VIEW {name}{option} AS {sql}")
            views[name] = sql
    yield views, rng
    spark.sql("USE default")


def test_views_equal_their_queries_after_every_refresh(spark, corpus_views):
    views, rng = corpus_views
    spark.sql("USE ivm_differential")
    failures = []
    for round_no in range(ROUNDS + 1):
        if round_no:
            _random_batch(spark, rng)
            spark.sql("REFRESH INCREMENTAL VIEWS").collect()
        for name, sql in views.items():
            got, want = _normalize(spark.table(name).collect()), _normalize(spark.sql(sql).collect())
            if got != want:
                failures.append(f"round {round_no}, {name}: {sql}\n  view  {sorted(got.items(), key=repr)}\n"
                                f"  query {sorted(want.items(), key=repr)}")
    assert not failures, "\n".join(failures)
