"""Views of an ordering's first rows (ORDER BY … LIMIT) kept from a buffer of their leading groups
(runtime/top_rows.py): after every refresh of random batches (NULLs, duplicates, negative sums, ties,
groups that leave and come back) the view is its query, with a buffer so small that the leading groups
fall behind the bound, changed groups outside it enter, and the buffer is computed again from the store;
and most refreshes take their rows from the buffer, not from the store's every group. The changed groups
outside the buffer are read and ranked on the driver where DuckDB computes the view's SQL."""

from __future__ import annotations

import random

import pytest

import spark_ivm
from spark_ivm import heuristics
from spark_ivm.runtime import top_rows
from spark_ivm.runtime.viewsql import PROPERTY_MAPS, TOP

pytestmark = pytest.mark.runtime

# Every ORDER BY is total (it ends in the group's keys), so the first rows are one list, as Spark's.
VIEWS = {
    "by_sum_nulls_first": "SELECT g, h, SUM(v) AS s, COUNT(*) AS n FROM t GROUP BY g, h "
                          "ORDER BY s DESC NULLS FIRST, g, h NULLS LAST LIMIT 4",
    "by_avg_having": "SELECT g, AVG(v) AS a FROM t GROUP BY g HAVING COUNT(*) > 1 ORDER BY a, g LIMIT 2",
    "joined": "SELECT t.g, u.w, SUM(t.v * u.x) AS s FROM t JOIN u ON t.h = u.h GROUP BY t.g, u.w "
              "ORDER BY s DESC, t.g, u.w LIMIT 3",
}


def _value(rng: random.Random, low: int, high: int) -> str:
    return "NULL" if rng.random() < 0.15 else str(rng.randint(low, high))


def _batch(spark, rng: random.Random) -> None:
    rows = [f"({_value(rng, 0, 12)}, {_value(rng, 0, 3)}, {_value(rng, -20, 40)})" for _ in range(rng.randint(1, 6))]
    rows.append(rows[0])  # a duplicate
    spark.sql(f"INSERT INTO t VALUES {', '.join(rows)}")
    spark.sql(f"DELETE FROM t WHERE g = {rng.randint(0, 12)} AND (v IS NULL OR v > {rng.randint(-20, 40)})")
    if rng.random() < 0.3:
        spark.sql(f"UPDATE t SET v = v + {rng.randint(-30, 30)} WHERE g = {rng.randint(0, 12)}")
    if rng.random() < 0.3:
        spark.sql(f"INSERT INTO u VALUES ({_value(rng, 0, 3)}, {_value(rng, 0, 2)}, {_value(rng, -2, 3)})")
    if rng.random() < 0.2:
        spark.sql(f"DELETE FROM u WHERE h = {rng.randint(0, 3)}")


@pytest.fixture
def ivm(spark, fresh_db, monkeypatch):
    spark_ivm.enable(spark)
    # A buffer of 4 groups: the views' 2-4 rows fall behind its bound within a few batches. And a buffer
    # however small the store.
    monkeypatch.setattr(heuristics, "TOP_GROUPS_KEPT", 4)
    monkeypatch.setattr(heuristics, "TOP_BUFFER_STORE_BYTES", 0)
    yield spark


def test_first_rows_of_an_ordering_are_kept_from_a_buffer_of_leading_groups(ivm, monkeypatch):
    spark = ivm
    computed = []  # the views whose buffer a publication computed from the store's every group
    whole = top_rows.computed

    def counted(spark_, entry, maps_at):
        computed.append(entry.name.split(".")[-1])
        return whole(spark_, entry, maps_at)

    monkeypatch.setattr(top_rows, "computed", counted)
    on_driver = []  # (view, whether the driver computed the changed groups outside the buffer)
    at_keys = top_rows._leading_on_driver

    def traced(entry, driver, keys):
        found = at_keys(entry, driver, keys)
        on_driver.append((entry.name.split(".")[-1], found is not None))
        return found

    monkeypatch.setattr(top_rows, "_leading_on_driver", traced)
    rng = random.Random(7)
    spark.sql("CREATE TABLE t (g INT, h INT, v INT) USING delta")
    spark.sql("CREATE TABLE u (h INT, w INT, x INT) USING delta")
    spark.sql("INSERT INTO t VALUES " + ", ".join(f"({i % 13}, {i % 4}, {(i * 7) % 50 - 10})" for i in range(40)))
    spark.sql("INSERT INTO u VALUES (0, 0, 1), (1, 1, 2), (2, 1, -1), (3, 2, 1), (NULL, 0, 1)")
    for name, query in VIEWS.items():
        spark.sql(f"CREATE INCREMENTAL VIEW {name} AS {query}")
    refreshes = 5
    for n in range(refreshes):
        _batch(spark, rng)
        for name in VIEWS:  # not REFRESH INCREMENTAL VIEWS: that looks at every view of the test session
            spark.sql(f"REFRESH INCREMENTAL VIEW {name}").collect()
        for name, query in VIEWS.items():
            want, got = spark.sql(query).collect(), spark.table(name).collect()
            assert got == want, (n, name, got, want)
            properties = dict(spark.sql(f"SHOW TBLPROPERTIES {name}").collect())
            assert properties[PROPERTY_MAPS] == TOP, (name, properties)
    print("buffers computed:", computed)
    for name in VIEWS:
        made = computed.count(name)
        assert 1 <= made < 1 + refreshes, (name, made)  # at CREATE, and again when the buffer ran out
    assert len(VIEWS) < len(computed) <= len(VIEWS) + refreshes * len(VIEWS) // 2, computed
    # The changed groups outside a buffer are read by the driver and ranked in DuckDB, also for a view that
    # divides (AVG: see division.py).
    print("outside groups on the driver:", on_driver)
    for view in ("by_sum_nulls_first", "by_avg_having"):
        assert any(found for name, found in on_driver if name == view), on_driver


def test_only_views_over_large_stores_keep_a_buffer():
    assert not heuristics.keeps_leading_groups(None)  # no size in the store's log
    assert not heuristics.keeps_leading_groups(heuristics.TOP_BUFFER_STORE_BYTES - 1)
    assert heuristics.keeps_leading_groups(heuristics.TOP_BUFFER_STORE_BYTES)


def test_first_rows_tied_with_the_bound_are_shown(ivm):
    """Groups tied past the buffer's end: the buffer keeps only the groups strictly before the bound, but
    the view shows its k rows."""
    spark = ivm
    spark.sql("CREATE TABLE t (g INT, h INT, v INT) USING delta")
    spark.sql("INSERT INTO t VALUES " + ", ".join(f"({i}, 0, 1)" for i in range(12)))
    query = "SELECT g, COUNT(*) AS n FROM t GROUP BY g ORDER BY n DESC LIMIT 3"
    spark.sql(f"CREATE INCREMENTAL VIEW tied AS {query}")
    every = {tuple(r) for r in spark.sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g").collect()}
    shown = [tuple(r) for r in spark.table("tied").collect()]
    assert len(shown) == 3 and set(shown) <= every, shown
    spark.sql("INSERT INTO t VALUES (5, 0, 1), (7, 0, 1), (7, 0, 1)")
    spark.sql("REFRESH INCREMENTAL VIEW tied").collect()
    shown = [tuple(r) for r in spark.table("tied").collect()]
    assert shown[:2] == [(7, 3), (5, 2)] and shown[2][1] == 1 and len(shown) == 3, shown
