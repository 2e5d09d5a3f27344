"""A long run: 500 refreshes of one view (a join and a GROUP BY) after random small batches of inserts,
deletes and updates, with NULLs and duplicate rows. The view equals its query at every 10th refresh; the
map store stays bounded (the compaction every `spark.ivm.compactEvery`-th refresh keeps it from growing with
the refreshes), and neither the driver's Python process nor the JVM's heap grows without bound.

Every 50 refreshes it records the store's rows and files, the Python process's resident memory and the
JVM's heap in use after a garbage collection, and prints them as a table at the end (run with -s). The
memory of every refresh is sampled too, without a collection, and compared as averages over windows of 50
refreshes. On demand: it takes tens of minutes.

    ./build.sh test -m on_demand tests/test_long_run.py -s
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter

import pytest

import spark_ivm
from spark_ivm import config
from spark_ivm.runtime.mapstore import live_rows_sql

pytestmark = [pytest.mark.runtime, pytest.mark.on_demand]

REFRESHES = int(os.environ.get("SPARK_IVM_LONG_RUN_REFRESHES", "500"))
CHECK_EVERY = 10
SAMPLE_EVERY = 50
WARM_UP = 50  # refreshes before the first window of memory samples
KEYS = 30  # join keys 0..29 (and NULL): the maps' keys stay in a bounded set
GROUPS = ["a", "b", "c", "d", None]
QUERY = ("SELECT c.g, COUNT(*) AS n, SUM(o.v) AS total, COUNT(o.v) AS valued, MAX(o.v) AS top "
         "FROM lo o JOIN lc c ON o.k = c.k GROUP BY c.g")


def _bag(df) -> Counter:
    return Counter(tuple(row) for row in df.collect())


def _python_rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def _jvm_heap_used_mb(spark, collect: bool = False) -> float:
    runtime = spark._jvm.java.lang.Runtime.getRuntime()
    if collect:
        # Spark frees the blocks of checkpoints and broadcasts whose objects a collection found unreachable
        # afterwards, in a thread of its own: a second collection then frees them.
        spark._jvm.java.lang.System.gc()
        time.sleep(2)
        spark._jvm.java.lang.System.gc()
    return (runtime.totalMemory() - runtime.freeMemory()) / 2**20


def _storage_used_mb(spark) -> float:
    """Memory the block manager holds (checkpoints, broadcasts, cached tables), of the driver's one executor."""
    maximum, remaining = [spark._jsc.sc().getExecutorMemoryStatus().values().head().productElement(i) for i in (0, 1)]
    return (maximum - remaining) / 2**20


def _most_files_per_commit(engine, store: str, versions: int) -> int:
    """The most files one of the store's last `versions` refreshes added (version 0 is the CREATE)."""
    snapshot = engine.logs.snapshot(store)
    return max(sum("add" in action for action in engine.logs.actions(snapshot, v))
               for v in range(max(1, snapshot.version - versions + 1), snapshot.version + 1))


def _key(rng: random.Random):
    return None if rng.random() < 0.08 else rng.randrange(KEYS)


def _value(rng: random.Random):
    return "NULL" if rng.random() < 0.15 else str(rng.randint(-5, 20))


def _sql(v) -> str:
    return "NULL" if v is None else (f"'{v}'" if isinstance(v, str) else str(v))


def _batch(rng: random.Random) -> list[str]:
    """One to three statements on the two tables: inserts with duplicates, deletes, updates to and from NULL."""
    statements = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choices(["insert_o", "insert_c", "delete_o", "delete_c", "update_o", "update_c"],
                           weights=[4, 2, 2, 1, 2, 1])[0]
        k = _key(rng)
        where_k = "k IS NULL" if k is None else f"k = {k}"
        if kind == "insert_o":
            row = f"({_sql(k)}, {_value(rng)})"
            more = [f"({_sql(_key(rng))}, {_value(rng)})" for _ in range(rng.randint(0, 3))]
            statements.append(f"INSERT INTO lo VALUES {', '.join([row, row] + more)}")  # a duplicate row
        elif kind == "insert_c":
            statements.append(f"INSERT INTO lc VALUES ({_sql(k)}, {_sql(rng.choice(GROUPS))})")
        elif kind == "delete_o":
            statements.append(f"DELETE FROM lo WHERE {where_k} AND (v IS NULL OR v % 3 = {rng.randrange(3)})")
        elif kind == "delete_c":
            statements.append(f"DELETE FROM lc WHERE {where_k}")
        elif kind == "update_o":
            statements.append(f"UPDATE lo SET v = {_value(rng)} WHERE {where_k}")
        else:
            statements.append(f"UPDATE lc SET g = {_sql(rng.choice(GROUPS))} WHERE {where_k}")
    return statements


def test_500_refreshes_stay_correct_and_bounded(spark, fresh_db):
    spark_ivm.enable(spark)
    rng = random.Random(30)
    spark.sql("CREATE TABLE lc (k INT, g STRING) USING delta")
    spark.sql("CREATE TABLE lo (k INT, v INT) USING delta")
    spark.sql("INSERT INTO lc VALUES " + ", ".join(f"({k}, {_sql(GROUPS[k % len(GROUPS)])})" for k in range(KEYS)))
    spark.sql("INSERT INTO lo VALUES " + ", ".join(f"({_sql(_key(rng))}, {_value(rng)})" for _ in range(200)))
    spark.sql(f"CREATE INCREMENTAL VIEW lrv AS {QUERY}")
    engine = spark._spark_ivm_engine
    store = engine.entry("lrv").store
    compact_every = config.COMPACT_EVERY.get(spark)

    samples = []  # every SAMPLE_EVERY refreshes
    python_mb, jvm_mb, seconds = [], [], []  # every refresh
    statuses = Counter()
    most_written = most_files = 0
    started = time.perf_counter()
    for n in range(1, REFRESHES + 1):
        for statement in _batch(rng):
            spark.sql(statement)
        began = time.perf_counter()
        result = spark.sql("REFRESH INCREMENTAL VIEW lrv").collect()[0]
        seconds.append(time.perf_counter() - began)
        statuses[result["status"]] += 1
        most_written = max(most_written, result["rows_written"])
        python_mb.append(_python_rss_mb())
        jvm_mb.append(_jvm_heap_used_mb(spark))
        if n % CHECK_EVERY == 0:
            assert _bag(spark.table("lrv")) == _bag(spark.sql(QUERY)), f"refresh {n}"
        if n % SAMPLE_EVERY == 0:
            detail = spark.sql(f"DESCRIBE DETAIL {store}").collect()[0]
            most_files = max(most_files, _most_files_per_commit(engine, store, SAMPLE_EVERY))
            live_sql = live_rows_sql(store, engine.store_columns(store))
            live = spark.sql(f"SELECT COUNT(*) FROM ({live_sql})").collect()[0][0]
            samples.append({
                "refresh": n, "store_rows": spark.table(store).count(), "store_files": detail["numFiles"],
                "store_kb": round(detail["sizeInBytes"] / 1024), "live_map_rows": live,
                "python_mb": round(python_mb[-1], 1), "jvm_mb_after_gc": round(_jvm_heap_used_mb(spark, True), 1),
                "jvm_storage_mb": round(_storage_used_mb(spark), 1),
                "seconds_per_refresh": round(sum(seconds[-SAMPLE_EVERY:]) / SAMPLE_EVERY, 2),
                "elapsed_min": round((time.perf_counter() - started) / 60, 1)})
            print(f"long run: {samples[-1]}", flush=True)  # progress, with -s
    _report(samples, statuses, seconds, python_mb, jvm_mb, most_written, most_files, compact_every)

    assert _bag(spark.table("lrv")) == _bag(spark.sql(QUERY))
    assert statuses["refreshed"] > REFRESHES * 0.9, statuses  # the batches changed the view's maps
    # The store: after a compaction one row per live map key and the bookkeeping; between two, the rows
    # of fewer than compactEvery refreshes more. Without compaction it would grow with every refresh.
    for s in samples:
        assert s["store_rows"] <= s["live_map_rows"] + 20 + compact_every * most_written, s
        assert s["store_files"] <= compact_every * most_files, s
    # Memory: the average of the last window of refreshes against the first after warm-up.
    if len(python_mb) >= WARM_UP + 2 * SAMPLE_EVERY:
        first, last = slice(WARM_UP, WARM_UP + SAMPLE_EVERY), slice(-SAMPLE_EVERY, None)
        assert _mean(python_mb[last]) <= 1.5 * _mean(python_mb[first]), (python_mb[first], python_mb[last])
        assert _mean(jvm_mb[last]) <= 1.5 * _mean(jvm_mb[first]), (jvm_mb[first], jvm_mb[last])
        after_gc = [s["jvm_mb_after_gc"] for s in samples]
        assert _mean(after_gc[-3:]) <= 1.5 * _mean(after_gc[1:4]), after_gc


def _mean(values) -> float:
    return sum(values) / len(values)


def _report(samples, statuses, seconds, python_mb, jvm_mb, most_written, most_files, compact_every) -> None:
    columns = list(samples[0]) if samples else []
    print(f"\nlong run: {len(seconds)} refreshes, {dict(statuses)}, compactEvery {compact_every}, "
          f"largest refresh wrote {most_written} rows, a commit added at most {most_files} files")
    print(f"seconds per refresh: mean {_mean(seconds):.2f}, median {sorted(seconds)[len(seconds) // 2]:.2f}, "
          f"max {max(seconds):.2f}")
    windows = [(i, i + SAMPLE_EVERY) for i in range(0, len(seconds), SAMPLE_EVERY)]
    print("memory per window of refreshes (mean): " + "; ".join(
        f"{a + 1}-{b}: python {_mean(python_mb[a:b]):.0f} MB, jvm {_mean(jvm_mb[a:b]):.0f} MB" for a, b in windows))
    print("| " + " | ".join(columns) + " |")
    print("|" + " --- |" * len(columns))
    for s in samples:
        print("| " + " | ".join(str(s[c]) for c in columns) + " |")
