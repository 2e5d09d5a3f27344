"""Refreshes racing each other and writers: two refreshes of one view at once (threads of one session), and
writers committing to the sources while a refresh runs. Each change is applied once, and nothing is lost:
the view equals its query once every refresh has ended."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

import spark_ivm

pytestmark = pytest.mark.runtime

QUERY = "SELECT g, COUNT(*) AS n, SUM(v) AS total FROM cr GROUP BY g"


def _bag(df) -> Counter:
    return Counter(tuple(row) for row in df.collect())


@pytest.fixture
def ivm(spark, fresh_db):
    spark_ivm.enable(spark)
    spark.sql("CREATE TABLE cr (g INT, v INT) USING delta")
    spark.sql("INSERT INTO cr VALUES (1, 1), (2, 2), (NULL, 3)")
    spark.sql(f"CREATE INCREMENTAL VIEW crv AS {QUERY}")
    yield spark


def _in_threads(*calls) -> list:
    """Run the calls at once, each in a thread; their results (or exceptions), in order."""
    results: list = [None] * len(calls)
    start = threading.Barrier(len(calls))

    def run(i, call):
        start.wait()
        try:
            results[i] = call()
        except BaseException as exc:  # reported to the test, not lost in the thread
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    return results


def test_two_refreshes_of_one_view_at_once_apply_each_change_once(ivm):
    spark = ivm
    for round_no in range(3):
        spark.sql(f"INSERT INTO cr VALUES (1, {10 + round_no}), (3, 1)")
        spark.sql("DELETE FROM cr WHERE g = 2 AND v = 2")
        refresh = lambda: spark.sql("REFRESH INCREMENTAL VIEW crv").collect()[0]  # noqa: E731
        results = _in_threads(refresh, refresh)
        errors = [r for r in results if isinstance(r, BaseException)]
        assert not errors, errors
        statuses = sorted(r["status"] for r in results)
        # One applies the changes; the other applies them too only if it read the store after that commit
        # (then it finds nothing to do), or it loses the race, starts again and finds nothing to do.
        assert statuses in (["refreshed", "up to date"], ["refreshed", "refreshed"]), statuses
        assert _bag(spark.table("crv")) == _bag(spark.sql(QUERY)), f"round {round_no}"
        assert spark.sql("REFRESH INCREMENTAL VIEW crv").collect()[0]["status"] == "up to date"
    engine = spark._spark_ivm_engine
    store = engine.entry("crv").store
    # Every commit to the store is one refresh's: the sequence numbers in their metadata never repeat.
    snapshot = engine.logs.snapshot(store)
    from spark_ivm.runtime.mapstore import SEQUENCE, SEQUENCE_ID, bookkeeping_of

    sequences = []
    for version in range(snapshot.version + 1):
        kept = bookkeeping_of(engine.logs.user_metadata(snapshot, version))
        if kept is not None:
            sequences.append(kept[SEQUENCE_ID][SEQUENCE])
    assert len(sequences) == len(set(sequences)), sequences


def test_writers_committing_during_a_refresh_are_applied_by_the_next(ivm):
    spark = ivm
    spark.sql("INSERT INTO cr VALUES (5, 5)")
    writes = [f"INSERT INTO cr VALUES ({i % 3}, {i})" for i in range(6)] + ["DELETE FROM cr WHERE g = 1 AND v = 1"]

    def write_all():
        for statement in writes:
            spark.sql(statement)

    refresh = lambda: spark.sql("REFRESH INCREMENTAL VIEW crv").collect()[0]  # noqa: E731
    results = _in_threads(refresh, write_all)
    assert not any(isinstance(r, BaseException) for r in results), results
    # The refresh applied the versions it looked up, some of the writes or none of them; the next one the
    # rest, each exactly once.
    spark.sql("REFRESH INCREMENTAL VIEW crv").collect()
    assert _bag(spark.table("crv")) == _bag(spark.sql(QUERY))
    assert spark.sql("REFRESH INCREMENTAL VIEW crv").collect()[0]["status"] == "up to date"
