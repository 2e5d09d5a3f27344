"""Subprocess worker for the persistence and crash/resume tests (not a test module).

    python crash_worker.py WAREHOUSE setup [--crash-at STEP]
    python crash_worker.py WAREHOUSE verify [--show] [--crash-at STEP --round N]

Each run starts its own local Spark session on WAREHOUSE (embedded Derby admits one process per
warehouse, so the tests never use the pytest session's warehouse here) and prints its findings as
lines ``TAG <json>`` on stdout.

setup: creates database ``p``, two Delta tables with NULLs in keys and values, and the incremental
view ``p.v`` (a join + group-by over the tables named unqualified, after ``USE p``), then applies
INSERT/DELETE/UPDATE to both tables without refreshing. It prints ``CREATED <json>`` (the view's
and the query's rows right after CREATE) as soon as it has them, and ``RESULT <json>`` at the end.

verify: reads the view as it is, runs REFRESH, reads the view and the defining query, runs REFRESH
again; prints all of it as ``RESULT <json>`` (with ``--show`` also SHOW INCREMENTAL VIEWS and
EXPLAIN). With ``--crash-at STEP --round N`` it then changes both tables again (the changes of
round N) and prints ``CREATED <json>`` (the view and the query before that refresh), like setup.

With ``--crash-at STEP`` either mode ends by running REFRESH with ``SPARK_IVM_CRASH_AT=STEP``: the
runtime is expected to end the process with ``os._exit(17)``; if REFRESH returns instead, the worker
prints ``REFRESHED <json>`` and exits 0 (the test then fails on the exit code).

    python crash_worker.py WAREHOUSE ddl --stage N

ddl: the chain of crashes inside CREATE, REFRESH … FULL, a compacting REFRESH and DROP (DDL_STAGES) on
the view ``p.d``, then inside REFRESH INCREMENTAL VIEWS where it commits the views ``p.sa`` and ``p.sb``,
which share the map store ``p.shared`` (made by the first such stage; ``p.d`` is refreshed alone just
before, so that the crash falls in the shared store's refresh). Stage N > 0 first recovers from the crash
of stage N - 1 with the statement a user would run next (CREATE again, REFRESH and if it asks for it
REFRESH … FULL, REFRESH, DROP again, REFRESH INCREMENTAL VIEWS) and prints what it found and did as
``RECOVERED <json>``; then it runs stage N's statement with ``SPARK_IVM_CRASH_AT`` set (stage 0 creates
the tables first). If that statement returns instead of crashing, it prints ``NOCRASH <json>`` and exits
0. The stage after the last only recovers.
"""

from __future__ import annotations

import json
import os
import sys
from decimal import Decimal

DB = "p"
VIEW = "v"
QUERY = "SELECT c.region, COUNT(*) AS n, SUM(o.amt) AS total FROM o JOIN c ON o.ck = c.ck GROUP BY c.region"
SETUP = [
    "CREATE TABLE c (ck INT, region STRING) USING delta",
    "CREATE TABLE o (ok INT, ck INT, amt INT) USING delta",
    "INSERT INTO c VALUES (1, 'east'), (2, 'west'), (3, NULL), (4, 'east'), (NULL, 'north')",
    "INSERT INTO o VALUES (10, 1, 5), (11, 1, NULL), (12, 2, 7), (13, 3, 1), (14, NULL, 9), (15, 4, 2)",
]
CHANGES = [
    # changes to both tables, none refreshed yet
    "INSERT INTO o VALUES (16, 2, 3), (17, 3, NULL), (18, 5, 4)",
    "DELETE FROM o WHERE ok = 12",
    "UPDATE c SET region = 'west' WHERE ck = 4",
    "INSERT INTO c VALUES (5, NULL), (6, 'south')",
    "UPDATE o SET ck = 6 WHERE ok = 10",
]


def changes(round_no: int) -> list[str]:
    """The changes before the refresh of a round (round 0: CHANGES); each round alters the view."""
    if round_no == 0:
        return CHANGES
    r = round_no
    return [
        f"INSERT INTO c VALUES ({10 + r}, 'r{r}'), (NULL, 'r{r}')",
        f"INSERT INTO o VALUES ({30 + r}, {10 + r}, {r}), ({40 + r}, {r}, NULL), ({40 + r}, {r}, NULL)",
        f"UPDATE o SET amt = amt + {r} WHERE ok = 15",
        f"DELETE FROM o WHERE ok = {30 + r - 1}",
    ]


CRASH_ENV = "SPARK_IVM_CRASH_AT"
# A worker's JVM lives for a few statements: with the JIT's first tier only (no second-tier compiler
# threads competing for the cores) and the serial collector it does them sooner than with the defaults,
# which suit the long-lived session of the test run (tests/conftest.py). First-tier code is larger than
# optimized code, and without tiering the JVM reserves only 48 MB for it, which a worker that creates
# several views fills (the JIT then stops for good): hence the larger code cache. No Spark setting changes.
WORKER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m -XX:+UseSerialGC"


def _cell(v):
    if isinstance(v, float):
        return round(v, 9)
    if isinstance(v, Decimal):
        return str(v)
    return v


def rows(df) -> list[list]:
    return sorted(([_cell(v) for v in r] for r in df.collect()), key=repr)


def _refresh(spark) -> dict:
    r = spark.sql(f"REFRESH INCREMENTAL VIEW {VIEW}").collect()
    assert len(r) == 1, r
    return {"status": r[0]["status"], "rows_written": r[0]["rows_written"]}


def main(argv: list[str]) -> int:
    warehouse, mode, *rest = argv
    os.environ.pop(CRASH_ENV, None)
    import spark_ivm

    spark = spark_ivm.session(warehouse=warehouse, log_level="ERROR",
                              conf={"spark.driver.extraJavaOptions": WORKER_JAVA_OPTIONS})
    spark_ivm.enable(spark)
    if mode == "ddl":
        return ddl(spark, warehouse, int(rest[rest.index("--stage") + 1]))
    out: dict = {}
    crash_at = rest[rest.index("--crash-at") + 1] if "--crash-at" in rest else None
    round_no = int(rest[rest.index("--round") + 1]) if "--round" in rest else 0
    if mode == "setup":
        spark.sql(f"CREATE DATABASE {DB}")
    spark.sql(f"USE {DB}")
    if mode == "setup":
        for s in SETUP:
            spark.sql(s)
        spark.sql(f"CREATE INCREMENTAL VIEW {VIEW} AS {QUERY}")
    elif mode == "verify":
        out["before_view"] = rows(spark.table(VIEW))
        out["refresh1"] = _refresh(spark)
        out["view"] = rows(spark.table(VIEW))
        out["query"] = rows(spark.sql(QUERY))
        out["view_schema"] = [[f.name, f.dataType.simpleString()] for f in spark.table(VIEW).schema.fields]
        out["query_schema"] = [[f.name, f.dataType.simpleString()] for f in spark.sql(QUERY).schema.fields]
        out["refresh2"] = _refresh(spark)
        if "--show" in rest:
            out["show"] = [r.asDict(recursive=True) for r in spark.sql("SHOW INCREMENTAL VIEWS").collect()]
            out["explain"] = spark.sql(f"EXPLAIN INCREMENTAL VIEW {VIEW}").collect()[0]["plan"]
        print("RESULT " + json.dumps(out), flush=True)
        if crash_at is None:
            spark.stop()
            return 0
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    # (after verify, the tables are as the query was read there: REFRESH changes no source table)
    created = {"created_view": rows(spark.table(VIEW)), "created_query": out.get("query") or rows(spark.sql(QUERY))}
    # printed now: a crash below ends the process before anything else
    print("CREATED " + json.dumps(created), flush=True)
    for s in changes(round_no):
        spark.sql(s)
    if crash_at is not None:
        os.environ[CRASH_ENV] = crash_at
        print("REFRESHED " + json.dumps(_refresh(spark)), flush=True)  # should not return
        os.environ.pop(CRASH_ENV, None)
    if mode == "setup":
        print("RESULT " + json.dumps({**out, **created}), flush=True)
    spark.stop()
    return 0


# -- crashes inside CREATE, REFRESH … FULL, a compacting REFRESH and DROP -------------------------------
DDL_VIEW = "d"
DDL_STORE = f"{DDL_VIEW}__ivm_maps"
# (the statement killed, the step it is killed at), in the order of the chain
DDL_STAGES = [
    ("create", "build_after_store"),  # the store written; no view definition, no catalog entry
    ("create", "build_after_view"),  # the store and the view definition; no catalog entry
    ("full", "full_after_remove"),  # the old maps and view definition removed; the old catalog entry
    # (a FULL that dies at build_after_store leaves the same as at build_after_view, with the old definition)
    ("full", "build_after_view"),  # the new store and view definition; the old catalog entry
    ("compact", "after_write"),  # a refresh's compaction committed; the view definition not yet rewritten
    ("drop", "drop_after_store"),  # the store dropped; the view definition and catalog entry left
    ("drop", "drop_after_view"),  # the store and view definition dropped; the catalog entry left
    # REFRESH INCREMENTAL VIEWS of two views in one store (SHARED):
    ("shared", "before_write"),  # both views' increments computed; nothing committed
    ("shared", "after_write"),  # the store's one commit for both views made; neither definition rewritten
]
# views sharing one map store, and their queries (the second groups by a key the first does not have)
SHARED_STORE = "shared"
SHARED = {"sa": QUERY, "sb": "SELECT o.ck, COUNT(*) AS n, SUM(o.amt) AS total FROM o GROUP BY o.ck"}


def _failure(exc: BaseException) -> dict:
    from spark_ivm.errors import IVMError

    return {"error": type(exc).__name__, "ivm": isinstance(exc, IVMError), "message": str(exc)[:600]}


def _attempt(what):
    try:
        return {"ok": what()}
    except Exception as exc:  # recorded for the test to judge
        return _failure(exc)


def _parts(spark, warehouse: str) -> dict:
    """Which parts of the view exist: catalog entry, store table, Spark view, store folder."""
    engine = spark._spark_ivm_engine
    catalog = engine.catalog_table
    entries = [r["name"] for r in spark.sql(f"SELECT name FROM {catalog}").collect()] \
        if spark.catalog.tableExists(catalog) else []
    folder = os.path.join(warehouse, f"{DB}.db", DDL_STORE)
    return {"entry": f"{DB}.{DDL_VIEW}" in entries, "store": spark.catalog.tableExists(f"{DB}.{DDL_STORE}"),
            "view": spark.catalog.tableExists(f"{DB}.{DDL_VIEW}"), "folder": os.path.isdir(folder)}


def _equal(spark, query_rows: list | None = None) -> bool:
    """The view's rows are its query's (`query_rows`: the query's rows, read since the tables last changed)."""
    return rows(spark.table(DDL_VIEW)) == (rows(spark.sql(QUERY)) if query_rows is None else query_rows)


def _shared_parts(spark) -> dict:
    """The shared store's views: which have a catalog entry and a Spark view; the store's latest version;
    every table of the database (a refresh leaves no table of its own behind)."""
    catalog = spark._spark_ivm_engine.catalog_table
    entries = {r["name"] for r in spark.sql(f"SELECT name FROM {catalog}").collect()}
    store = f"{DB}.{SHARED_STORE}"
    version = spark.sql(f"DESCRIBE HISTORY {store}").selectExpr("max(version)").first()[0] \
        if spark.catalog.tableExists(store) else None
    return {"entries": sorted(v for v in SHARED if f"{DB}.{v}" in entries),
            "views": sorted(v for v in SHARED if spark.catalog.tableExists(f"{DB}.{v}")),
            "version": version,
            "tables": sorted(r["tableName"] for r in spark.sql(f"SHOW TABLES IN {DB}").collect() if not r["isTemporary"])}


def _shared_rows(spark) -> dict:
    """Each shared view's rows (or why they cannot be read) and its query's rows."""
    return {"views": {v: _attempt(lambda v=v: rows(spark.table(v))) for v in SHARED},
            "queries": {v: rows(spark.sql(q)) for v, q in SHARED.items()}}


def _refresh_all(spark) -> dict:
    return {r["view"]: r["status"] for r in spark.sql("REFRESH INCREMENTAL VIEWS").collect()}


def _shared_equal(spark) -> dict:
    return {v: _attempt(lambda v=v, q=q: rows(spark.table(v)) == rows(spark.sql(q))) for v, q in SHARED.items()}


def _ddl_recover(spark, warehouse: str, kind: str, round_no: int) -> dict:
    """The statements a user runs after a crash of `kind`, and what they gave."""
    out: dict = {"found": _parts(spark, warehouse)}
    out["view_before"] = _attempt(lambda: rows(spark.table(DDL_VIEW)))
    out["query_before"] = rows(spark.sql(QUERY))
    create = f"CREATE INCREMENTAL VIEW {DDL_VIEW} AS {QUERY}"
    if kind == "create":
        out["create"] = _attempt(lambda: spark.sql(create).collect()[0][0])
    elif kind in ("full", "compact"):
        out["refresh"] = _attempt(lambda: spark.sql(f"REFRESH INCREMENTAL VIEW {DDL_VIEW}").collect()[0]["status"])
        if "error" in out["refresh"]:
            out["full"] = _attempt(
                lambda: spark.sql(f"REFRESH INCREMENTAL VIEW {DDL_VIEW} FULL").collect()[0]["status"])
    elif kind == "drop":
        out["drop"] = _attempt(lambda: spark.sql(f"DROP INCREMENTAL VIEW {DDL_VIEW}").collect()[0][0])
        out["dropped"] = _parts(spark, warehouse)
        out["create"] = _attempt(lambda: spark.sql(create).collect()[0][0])
    elif kind == "shared":
        out["shared_found"] = _shared_parts(spark)
        out["shared_before"] = _shared_rows(spark)
        out["refresh_all"] = _attempt(lambda: _refresh_all(spark))
        out["shared_recovered"] = _shared_parts(spark)
        out["shared_equal"] = _shared_equal(spark)
    # the statements above change no table: the query's rows are still those read before them
    out["equal"] = _attempt(lambda: _equal(spark, out["query_before"]))
    # and the view goes on: a change, a refresh
    for statement in changes(50 + round_no):
        spark.sql(statement)
    if kind == "shared":  # all the views at once again: the shared store's two views in one commit
        out["refresh_all_after"] = _attempt(lambda: _refresh_all(spark))
        out["shared_equal_after"] = _shared_equal(spark)
        out["shared_after"] = _shared_parts(spark)
    out["refresh_after"] = _attempt(lambda: spark.sql(f"REFRESH INCREMENTAL VIEW {DDL_VIEW}").collect()[0]["status"])
    out["equal_after"] = _attempt(lambda: _equal(spark))
    out["parts_after"] = _parts(spark, warehouse)
    return out


def ddl(spark, warehouse: str, stage: int) -> int:
    if stage == 0:
        spark.sql(f"CREATE DATABASE {DB}")
    spark.sql(f"USE {DB}")
    if stage == 0:
        for s in SETUP:
            spark.sql(s)
    else:
        kind, _ = DDL_STAGES[stage - 1]
        recovered = _ddl_recover(spark, warehouse, kind, stage)
        print("RECOVERED " + json.dumps(recovered), flush=True)
    if stage == len(DDL_STAGES):
        spark.stop()
        return 0
    kind, step = DDL_STAGES[stage]
    # the view's parts as the recovery left them (its last reading), or as stage 0 starts
    exists = recovered["parts_after"] if stage else _parts(spark, warehouse)
    if kind == "create" and exists["entry"]:
        spark.sql(f"DROP INCREMENTAL VIEW {DDL_VIEW}")
    elif kind != "create" and not exists["entry"]:
        # the recovery above failed (its test fails): start this stage from a clean view
        for statement in (f"DROP VIEW IF EXISTS {DDL_VIEW}", f"DROP TABLE IF EXISTS {DDL_STORE}"):
            spark.sql(statement)
        spark.sql(f"CREATE INCREMENTAL VIEW {DDL_VIEW} AS {QUERY}")
        print("RESET {}", flush=True)
    statement = {"create": f"CREATE INCREMENTAL VIEW {DDL_VIEW} AS {QUERY}",
                 "full": f"REFRESH INCREMENTAL VIEW {DDL_VIEW} FULL",
                 "compact": f"REFRESH INCREMENTAL VIEW {DDL_VIEW}",
                 "drop": f"DROP INCREMENTAL VIEW {DDL_VIEW}",
                 "shared": "REFRESH INCREMENTAL VIEWS"}[kind]
    if kind == "shared" and not _shared_parts(spark)["entries"]:
        for view, query in SHARED.items():
            spark.sql(f"CREATE INCREMENTAL VIEW {view} WITH (store = '{SHARED_STORE}') AS {query}")
    if kind in ("full", "compact", "shared"):
        for s in changes(stage):
            spark.sql(s)
    if kind == "compact":
        spark.conf.set("spark.ivm.compactEvery", "1")  # this refresh rewrites the store
    before = {"view": _attempt(lambda: rows(spark.table(DDL_VIEW))), "query": rows(spark.sql(QUERY))}
    if kind == "shared":
        # d up to date: REFRESH INCREMENTAL VIEWS then writes only the shared store, where it is to crash
        spark.sql(f"REFRESH INCREMENTAL VIEW {DDL_VIEW}").collect()
        before.update(shared=_shared_rows(spark), parts=_shared_parts(spark))
    # printed now: the crash below ends the process
    print("BEFORE " + json.dumps(before), flush=True)
    os.environ[CRASH_ENV] = step
    result = _attempt(lambda: [list(r) for r in spark.sql(statement).collect()])
    os.environ.pop(CRASH_ENV, None)
    print("NOCRASH " + json.dumps(result, default=str), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
