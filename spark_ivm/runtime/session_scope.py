"""What a refresh or CREATE sets on the Spark session for a block of its work (restored after, also when
several threads set the same key), and the look-ups it runs in a few threads."""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor

from spark_ivm import heuristics


def parallel(spark, lookup, items) -> list:
    """[lookup(item) for item in items], run in a few threads: a Delta version, a table's details or a
    query's schema costs a driver round trip each, and a view reads several tables. The
    calling thread's job group and description carry over to the threads."""
    items = list(items)
    if len(items) < 2:
        return [lookup(item) for item in items]
    keys = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel", "spark.scheduler.pool")
    try:
        sc = spark.sparkContext
        local = {k: sc.getLocalProperty(k) for k in keys}
    except Exception:  # Spark Connect has no SparkContext (and no job groups to carry over)
        sc, local = None, {}

    def run(item):
        for k, v in local.items():
            if v is not None:
                sc.setLocalProperty(k, v)
        return lookup(item)

    with ThreadPoolExecutor(max_workers=min(heuristics.LOOKUP_THREADS, len(items))) as pool:
        return list(pool.map(run, items))


_SETTINGS_LOCK = threading.Lock()
# (session, key) -> [blocks setting it now, the value before the first of them]
_SETTINGS_HELD: dict[tuple[int, str], list] = {}


# A collect of the first n rows of a query scans this many of its partitions in its first job (Spark's
# default, 1, takes a job per partition when the rows are fewer than asked for). Without adaptive execution,
# which would run each shuffle of the query (the view's rows sum its maps per key) as a job of its own.
COLLECT_SETTINGS = {"spark.sql.limit.initialNumPartitions": "1000000", "spark.sql.adaptive.enabled": "false"}


def store_write_parallelism(spark, read_bytes: int | None) -> tuple[int | None, dict[str, str]]:
    """The partitions of a store build or whole-store compaction that reads `read_bytes` (None: the
    session's own number), and the session setting that gives its shuffles that many (see
    heuristics.store_write_partitions); the write's SQL ranges its rows by them (mapstore.ordered_rows_sql)."""
    partitions = heuristics.store_write_partitions(read_bytes, spark.conf.get("spark.sql.shuffle.partitions", None))
    return partitions, ({"spark.sql.shuffle.partitions": str(partitions)} if partitions else {})


@contextlib.contextmanager
def session_settings(spark, settings: dict[str, str]):
    """Set Spark session settings for the duration of a block, then restore what was there.

    A session's settings are shared by its threads: when blocks of several threads (two refreshes at once)
    set one key, the value before the first is restored when the last ends."""
    conf = spark.conf
    with _SETTINGS_LOCK:
        for k, v in settings.items():
            held = _SETTINGS_HELD.setdefault((id(spark), k), [0, None])
            if held[0] == 0:
                held[1] = conf.get(k, None)
            held[0] += 1
            conf.set(k, v)
    try:
        yield
    finally:
        with _SETTINGS_LOCK:
            for k in settings:
                held = _SETTINGS_HELD[(id(spark), k)]
                held[0] -= 1
                if held[0] == 0:
                    del _SETTINGS_HELD[(id(spark), k)]
                    if held[1] is None:
                        conf.unset(k)
                    else:
                        conf.set(k, held[1])
