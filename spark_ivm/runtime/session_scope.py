"""What a refresh or CREATE sets on the Spark session for a block of its work (restored after, also when
several threads set the same key), and the look-ups it runs in a few threads."""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor

from spark_ivm import heuristics


_LOOKUPS: ThreadPoolExecutor | None = None
_LOOKUPS_LOCK = threading.Lock()
_IN_LOOKUP = threading.local()


def parallel(spark, lookup, items) -> list:
    """[lookup(item) for item in items], run in a few threads: a Delta version, a table's details or a
    query's schema costs a driver round trip each, and a view reads several tables. The
    calling thread's job group and description carry over to the threads.

    The threads are the process's own and live on: each Python thread that calls the JVM opens a py4j
    connection of its own, so new threads for every call would open (and close) new connections each time.
    A look-up that runs more look-ups runs them in its own thread, not waiting for a thread of the few."""
    items = list(items)
    if len(items) < 2 or getattr(_IN_LOOKUP, "active", False):
        return [lookup(item) for item in items]
    keys = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel", "spark.scheduler.pool")
    try:
        sc = spark.sparkContext
        local = {k: sc.getLocalProperty(k) for k in keys}
    except Exception:  # Spark Connect has no SparkContext (and no job groups to carry over)
        sc, local = None, {}

    def run(item):
        _IN_LOOKUP.active = True
        for k, v in local.items():
            sc.setLocalProperty(k, v)  # None removes what an earlier caller's look-up set in this thread
        return lookup(item)

    return list(_lookup_threads().map(run, items))


def _lookup_threads() -> ThreadPoolExecutor:
    global _LOOKUPS
    with _LOOKUPS_LOCK:
        if _LOOKUPS is None:
            _LOOKUPS = ThreadPoolExecutor(max_workers=heuristics.LOOKUP_THREADS, thread_name_prefix="spark-ivm-lookup")
        return _LOOKUPS


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


_GATEWAY_LOCK = threading.Lock()
# id(gateway) -> [the JVM's list of its py4j connections, how many there were when last set]
_GATEWAY_CONNECTIONS: dict[int, list] = {}


def replies_without_delay(spark) -> None:
    """Turn off Nagle's algorithm on the JVM's end of each connection of py4j (one per Python thread that
    calls the JVM), where it is not off yet.

    py4j writes a reply through a buffer of 8 KB: with Nagle's algorithm, the second piece of a longer reply
    waits for the acknowledgement of the first, which the Python side delays by 40 ms. A view's definition
    (its rows as literals) or a table's list of files is such a reply. py4j itself never sets the option,
    so it is set on its connections here; a connection made later is set at the next call."""
    try:
        with _GATEWAY_LOCK:
            gateway = spark.sparkContext._gateway
            known = _GATEWAY_CONNECTIONS.get(id(gateway))
            if known is None:
                known = _GATEWAY_CONNECTIONS[id(gateway)] = [gateway_connections(spark), 0]
            connections, count = known
            if connections.size() == count:
                return
            for connection in connections.toArray():
                socket = connection.getSocket()
                if not socket.getTcpNoDelay():
                    socket.setTcpNoDelay(True)
            known[1] = connections.size()
    except Exception:  # Spark Connect, another py4j: the replies are only slower
        return


def gateway_connections(spark):
    """The JVM's list of py4j's connections (a field of py4j's GatewayServer that it does not expose)."""
    server = spark.sparkContext._gateway.java_gateway_server
    field = server.getClass().getSuperclass().getDeclaredField("connections")
    field.setAccessible(True)
    return field.get(server)
