"""A view's refresh policy on Spark: `WITH (refresh = 'auto' | 'incremental' | 'full')` and REFRESH …
INCREMENTAL | FULL once. Under auto, a batch that is a large share of its source has the view's maps
recomputed, a small one is applied; a source replaced by another table, or a change data feed that no
longer covers the versions to apply, has the view rebuilt where an incremental view would fail. Each
REFRESH reports what it did and why, and the view equals its query after every batch, on random rows with
NULLs and duplicates. The share and size thresholds are lowered (spark.ivm.fullRefreshPercent and
heuristics.FULL_REFRESH_MIN_BYTES) so that tables of a few rows reach them."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from conftest import vacuum_change_feed

import spark_ivm
from spark_ivm import heuristics
from spark_ivm.heuristics import Batch, refresh_fully

pytestmark = pytest.mark.runtime

QUERY = "SELECT s.g, COUNT(*) AS n, SUM(s.v) AS total, MAX(k.w) AS w FROM src s JOIN keys k ON s.g = k.g GROUP BY s.g"


def bag(df) -> Counter:
    return Counter(tuple(row) for row in df.collect())


def assert_view_is_query(spark, view: str = "rv", query: str = QUERY) -> None:
    assert bag(spark.table(view)) == bag(spark.sql(query))


def insert(spark, rng: random.Random, n: int, table: str = "src") -> None:
    """n random rows: few keys, NULLs, duplicates; values of many digits, so that a table's bytes grow
    with its rows rather than being mostly its files' fixed parts."""
    values = [(rng.choice([1, 2, 3, None]), rng.choice([rng.randrange(10**9), 5, None])) for _ in range(n // 2)]
    values += values[: n - len(values)]  # duplicate rows
    spark.createDataFrame(values, "g INT, v INT").coalesce(1).write.insertInto(table)


def refresh(spark, view: str = "rv", mode: str = ""):
    return spark.sql(f"REFRESH INCREMENTAL VIEW {view} {mode}").collect()[0]


@pytest.fixture
def ivm(spark, fresh_db, monkeypatch):
    spark_ivm.enable(spark)
    monkeypatch.setattr(heuristics, "FULL_REFRESH_MIN_BYTES", 0)
    spark.conf.set("spark.ivm.fullRefreshPercent", "40")
    spark.sql("CREATE TABLE src (g INT, v INT) USING delta")
    spark.sql("CREATE TABLE keys (g INT, w INT) USING delta")
    spark.sql("INSERT INTO keys VALUES (1, 10), (2, 20), (3, NULL), (NULL, 40)")
    insert(spark, random.Random(7), 4000)
    yield spark
    spark.conf.unset("spark.ivm.fullRefreshPercent")


def test_auto_applies_small_batches_and_recomputes_large_ones(ivm):
    spark, rng = ivm, random.Random(1)
    spark.sql(f"CREATE INCREMENTAL VIEW rv AS {QUERY}")
    insert(spark, rng, 8)  # a few % of src's bytes, with a file's fixed ones
    small = refresh(spark)
    assert small["status"] == "refreshed", small
    assert small["policy"].startswith("incremental (auto: the largest batch is") and "under 40%" in small["policy"]
    assert_view_is_query(spark)

    insert(spark, rng, 6000)  # more than the table held: over 40% of it after
    large = refresh(spark)
    assert large["status"] == "rebuilt", large
    assert large["policy"].startswith("full (auto: the batch is") and "src" in large["policy"], large["policy"]
    assert_view_is_query(spark)

    spark.sql("DELETE FROM src WHERE g IS NULL OR g <> 2")  # most of the rows
    assert refresh(spark)["status"] == "rebuilt"
    assert_view_is_query(spark)
    spark.sql("UPDATE src SET v = v + 1 WHERE v = 5")  # after the rebuild, incremental again
    spark.sql("INSERT INTO keys VALUES (2, 99)")
    result = refresh(spark)
    assert (result["status"], result["policy"][:12]) == ("refreshed", "incremental "), result
    assert_view_is_query(spark)
    assert refresh(spark)["status"] == "up to date"


def test_incremental_and_full_policies_of_views_of_one_store_and_once(ivm):
    spark, rng = ivm, random.Random(2)
    other = "SELECT g, COUNT(*) AS n FROM src GROUP BY g"
    spark.sql(f"CREATE INCREMENTAL VIEW rv WITH (store = 'shared', refresh = 'incremental') AS {QUERY}")
    spark.sql(f"CREATE INCREMENTAL VIEW fv WITH (store = 'shared', refresh = 'full') AS {other}")
    spark.sql(f"CREATE INCREMENTAL VIEW av AS {other}")
    insert(spark, rng, 6000)
    got = {r["view"].split(".")[-1]: r for r in spark.sql("REFRESH INCREMENTAL VIEWS").collect()}
    assert (got["rv"]["status"], got["rv"]["policy"]) == (
        "refreshed", "incremental (incremental: the view's refresh policy)")
    assert (got["fv"]["status"], got["fv"]["policy"]) == ("rebuilt", "full (full: the view's refresh policy)")
    assert got["av"]["status"] == "rebuilt"  # auto: the batch is more than the table held
    for view, query in (("rv", QUERY), ("fv", other), ("av", other)):
        assert_view_is_query(spark, view, query)
    assert refresh(spark, "fv")["status"] == "up to date"  # nothing changed since: nothing recomputed
    insert(spark, rng, 6000)
    once = refresh(spark, "av", "INCREMENTAL")
    assert (once["status"], once["policy"]) == ("refreshed", "incremental (incremental: REFRESH … INCREMENTAL)")
    assert_view_is_query(spark, "av", other)
    insert(spark, rng, 4)
    assert refresh(spark, "rv", "FULL")["policy"] == "full (REFRESH … FULL)"
    assert refresh(spark, "fv")["status"] == "rebuilt"
    for view, query in (("rv", QUERY), ("fv", other)):
        assert_view_is_query(spark, view, query)


def test_auto_rebuilds_a_view_whose_source_was_replaced(ivm):
    spark = ivm
    spark.sql(f"CREATE INCREMENTAL VIEW rv AS {QUERY}")
    spark.sql("DROP TABLE keys")
    spark.sql("CREATE TABLE keys (g INT, w INT) USING delta")
    spark.sql("INSERT INTO keys VALUES (1, 7)")
    result = refresh(spark)
    assert result["status"] == "rebuilt"
    assert "source table" in result["policy"] and "keys was dropped and created again" in result["policy"]
    assert_view_is_query(spark)


def test_auto_rebuilds_a_view_whose_change_feed_was_vacuumed(ivm):
    spark = ivm
    spark.sql(f"CREATE INCREMENTAL VIEW rv AS {QUERY}")
    spark.sql("UPDATE src SET v = 10 WHERE g = 1")  # change rows go to _change_data files
    vacuum_change_feed(spark, "src")
    spark.conf.set("spark.ivm.fullRefreshPercent", "0")  # not recomputed for the batch's size
    result = refresh(spark)
    assert (result["status"], result["policy"]) == (
        "rebuilt", "full (auto: the change data feed no longer covers the versions to apply)")
    assert_view_is_query(spark)


# -- the choice itself, without Spark -----------------------------------------------------------------------
def test_the_share_of_the_largest_batch_decides():
    mb = 1024 * 1024
    full, why = refresh_fully([Batch("db.a", 30 * mb, 100 * mb), Batch("db.b", 120 * mb, 60 * mb)], 100, 16 * mb)
    assert full and why == "auto: the batch is 200.0% of db.b (120.0 MB), at least 100%"
    full, why = refresh_fully([Batch("db.a", 30 * mb, 100 * mb)], 100, 16 * mb)
    assert not full and why == "auto: the largest batch is 30.0% of db.a (30.0 MB), under 100%"
    assert not refresh_fully([Batch("db.a", 8 * mb, 4 * mb)], 100, 16 * mb)[0]  # too small to matter
    full, why = refresh_fully([Batch("db.a", 20 * mb, 0)], 100, 16 * mb)  # the source emptied
    assert full and why == "auto: the batch is all of db.a (20.0 MB), at least 100%"
    assert not refresh_fully([Batch("db.a", 900 * mb, 100 * mb)], 0, 0)[0]  # 0: never
    assert refresh_fully([Batch("db.a", None, 100 * mb)], 100, 0) == (False, "auto: the batches' sizes are not known")
