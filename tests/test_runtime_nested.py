"""Differential test of the runtime on nested queries: every NESTED_QUERIES query (scalar subqueries,
MIN/MAX compared, EXISTS, IN, NOT IN, grouped derived tables, outer joins) as an incremental view at
depth 1 and unlimited, in map stores of a few views, equals its defining query run by Spark after every
REFRESH INCREMENTAL VIEWS, on random data with NULLs and duplicates and batches that change every table
(see test_runtime_differential._random_batch)."""

from __future__ import annotations

import random

import pytest

# End-to-end and long (see pyproject.toml): not in ./build.sh test; run with ./build.sh test -m runtime
pytestmark = [pytest.mark.runtime, pytest.mark.on_demand]

from corpus import NESTED_QUERIES
from test_runtime_differential import create_views, distinct_plans, refresh_rounds

DATABASE = "ivm_nested"


@pytest.fixture(scope="module")
def nested_views(spark):
    rng = random.Random(20261123)
    views = create_views(spark, NESTED_QUERIES, rng, DATABASE, "nested_maps", "n")
    yield views, rng
    spark.sql("USE default")


def test_every_nested_query_is_covered():
    views = distinct_plans(NESTED_QUERIES, "n")
    assert {sql for sql, _ in views.values()} == set(NESTED_QUERIES)


def test_nested_views_equal_their_queries_after_every_refresh(spark, nested_views):
    views, rng = nested_views
    spark.sql(f"USE {DATABASE}")
    failures = refresh_rounds(spark, views, rng)
    assert not failures, "\n".join(failures)
