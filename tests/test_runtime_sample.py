"""The runtime's differential test of nested constructs as CI runs it: a sample of the nested corpus, one
query per kind (correlated and uncorrelated scalar subqueries, NOT EXISTS, NOT IN with its NULL rule, a
FULL JOIN), as incremental views at depth 1 and unlimited in map stores of a few views, each equal to its
defining query run by Spark after every REFRESH INCREMENTAL VIEWS, on random data with NULLs and
duplicates and batches that change every table (see test_runtime_differential._random_batch).

The whole flat corpus runs in CI too (tests/test_runtime_differential.py); the whole nested corpus runs
on demand (`./build.sh test -m runtime -k nested`): its 44 views take longer than CI's time allows.
"""

from __future__ import annotations

import random

import pytest

pytestmark = pytest.mark.runtime

from corpus import NESTED_QUERIES
from test_runtime_differential import create_views, distinct_plans, refresh_rounds

SAMPLE = [
    "SELECT b, SUM(a) FROM R WHERE a > (SELECT SUM(c) FROM S WHERE S.b = R.b) GROUP BY b",
    "SELECT COUNT(*) FROM R WHERE a < (SELECT AVG(c) FROM S)",
    "SELECT b, COUNT(*) FROM R WHERE NOT EXISTS (SELECT 1 FROM S WHERE S.b = R.b AND S.c > R.a) GROUP BY b",
    "SELECT a, b FROM R WHERE b NOT IN (SELECT c FROM S)",
    "SELECT R.a, S.b FROM R FULL JOIN S ON R.b = S.b AND R.a < S.c",
]


@pytest.fixture(scope="module")
def sample_views(spark):
    rng = random.Random(20261124)
    views = create_views(spark, SAMPLE, rng, "ivm_sample", "sample_maps", "s")
    yield views, rng
    spark.sql("USE default")


def test_the_sample_is_drawn_from_the_nested_corpus():
    assert set(SAMPLE) <= set(NESTED_QUERIES)
    assert len(distinct_plans(SAMPLE, "s")) > len(SAMPLE)  # some queries at both depths


def test_sample_views_equal_their_queries_after_every_refresh(spark, sample_views):
    views, rng = sample_views
    spark.sql("USE ivm_sample")
    failures = refresh_rounds(spark, views, rng)
    assert not failures, "\n".join(failures)
