"""The runtime's differential test as CI runs it: a sample of the corpus, one query or two per kind of
construct, as incremental views at depth 1 and unlimited in one map store, each equal to its defining
query run by Spark after every REFRESH INCREMENTAL VIEWS, on random data with NULLs and duplicates and
random INSERT, DELETE and UPDATE batches (a row inserted and deleted before the same refresh included).

The whole corpus runs on demand (`./build.sh test -m runtime -k "differential or nested"`): creating
a view costs seconds of Spark and Delta round trips, whatever its size, and the corpus makes 116 views.
"""

from __future__ import annotations

import random

import pytest

pytestmark = pytest.mark.runtime

from corpus import NESTED_QUERIES, QUERIES
from test_runtime_differential import create_views, distinct_plans, refresh_rounds

SAMPLE = [
    "SELECT b, SUM(a), COUNT(*) FROM R GROUP BY b",  # SUM and COUNT, NULL group keys
    "SELECT b, AVG(a) FROM R GROUP BY b",
    "SELECT a, b FROM R",  # bag: duplicates kept
    "SELECT b, SUM(a) FROM R GROUP BY b HAVING SUM(a) > 1",
    "SELECT T.d, SUM(R.a * T.d) FROM R, S, T WHERE R.b = S.b AND S.c = T.c GROUP BY T.d",
    "SELECT r1.a, COUNT(*) FROM R r1, R r2 WHERE r1.b = r2.b GROUP BY r1.a",  # self-join
    "SELECT S.c, MAX(R.a), COUNT(*) FROM R, S WHERE R.b = S.b GROUP BY S.c",
    "SELECT b, COUNT(DISTINCT a) FROM R GROUP BY b",
    "SELECT a, b FROM R UNION SELECT b, c FROM S",
    "SELECT b FROM R EXCEPT ALL SELECT b FROM S",
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


def test_the_sample_is_drawn_from_the_corpus():
    assert set(SAMPLE) <= set(QUERIES + NESTED_QUERIES)
    assert len(distinct_plans(SAMPLE, "s")) > len(SAMPLE)  # some queries at both depths


def test_sample_views_equal_their_queries_after_every_refresh(spark, sample_views):
    views, rng = sample_views
    spark.sql("USE ivm_sample")
    failures = refresh_rounds(spark, views, rng)
    assert not failures, "\n".join(failures)
