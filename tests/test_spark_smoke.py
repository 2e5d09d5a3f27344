"""Smoke tests of the Spark + Delta Lake setup the runtime builds on."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest


def rows(df) -> set[tuple]:
    return {tuple(r) for r in df.collect()}


def test_delta_dml_and_change_data_feed(spark, fresh_db):
    spark.sql("CREATE TABLE t (k INT, v BIGINT) USING delta")  # version 0
    props = dict(spark.sql("SHOW TBLPROPERTIES t").collect())
    assert props.get("delta.enableChangeDataFeed") == "true"
    assert props.get("delta.enableDeletionVectors") == "true"

    spark.sql("INSERT INTO t VALUES (1, 10), (2, 20), (3, 30)")  # version 1
    spark.sql("DELETE FROM t WHERE k = 2")  # version 2
    spark.sql("UPDATE t SET v = v + 1 WHERE k = 3")  # version 3
    assert rows(spark.table("t")) == {(1, 10), (3, 31)}

    changes = spark.sql(f"SELECT * FROM table_changes('{fresh_db}.t', 1)")
    types = {f.name: f.dataType.simpleString() for f in changes.schema.fields}
    assert types == {
        "k": "int",
        "v": "bigint",
        "_change_type": "string",
        "_commit_version": "bigint",
        "_commit_timestamp": "timestamp",
    }
    got = rows(changes.select("k", "v", "_change_type", "_commit_version"))
    assert got == {
        (1, 10, "insert", 1),
        (2, 20, "insert", 1),
        (3, 30, "insert", 1),
        (2, 20, "delete", 2),
        (3, 30, "update_preimage", 3),
        (3, 31, "update_postimage", 3),
    }


def _tagged(spark, statement: str, version: int) -> None:
    """Run a write with Delta's idempotent-write tag (what a refresh sets on its one commit)."""
    spark.conf.set("spark.databricks.delta.write.txnAppId", "smoke")
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(version))
    try:
        spark.sql(statement)
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")


def test_tagged_appends_and_overwrites_apply_once(spark, fresh_db):
    """A map store is written by appends and, to compact it, by overwrites that read the table they
    replace; a write tagged with a version its application id has already committed is skipped. The
    exactly-once guarantee of a refresh rests on both, on this Delta version."""
    spark.sql("CREATE TABLE m (k INT, n BIGINT) USING delta")
    _tagged(spark, "INSERT INTO m VALUES (1, 5), (NULL, 1)", 1)
    _tagged(spark, "INSERT INTO m VALUES (1, 5), (NULL, 1)", 1)  # a repeat: skipped
    _tagged(spark, "INSERT INTO m VALUES (1, -5), (2, 3)", 2)
    assert sorted(spark.table("m").collect(), key=repr) == sorted([(1, 5), (None, 1), (1, -5), (2, 3)], key=repr)
    compact = "INSERT OVERWRITE m SELECT k, SUM(n) FROM m GROUP BY k HAVING SUM(n) <> 0"
    _tagged(spark, compact, 3)
    assert sorted(spark.table("m").collect(), key=repr) == sorted([(None, 1), (2, 3)], key=repr)
    _tagged(spark, "INSERT OVERWRITE m SELECT k, n * 100 FROM m", 3)  # a repeat: skipped
    assert sorted(spark.table("m").collect(), key=repr) == sorted([(None, 1), (2, 3)], key=repr)
    history = [r.operation for r in spark.sql("DESCRIBE HISTORY m").collect()]
    assert history == ["WRITE", "WRITE", "WRITE", "CREATE TABLE"]


_CHILD = textwrap.dedent(
    """
    import sys
    from spark_ivm.session import session
    spark = session(sys.argv[1], log_level="ERROR")
    if sys.argv[2] == "write":
        spark.sql("CREATE DATABASE p")
        spark.sql("CREATE TABLE p.t (k INT, v BIGINT) USING delta")
        spark.sql("INSERT INTO p.t VALUES (1, 10), (2, 20)")
        spark.sql("CREATE VIEW p.v AS SELECT k, v * 2 AS w FROM p.t")
    else:
        print("ROWS", sorted(tuple(r) for r in spark.table("p.v").collect()))
        print("CDF", spark.sql("SELECT count(*) FROM table_changes('p.t', 0)").first()[0])
    spark.stop()
    """
)


def _child(warehouse: Path, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(warehouse), mode],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.on_demand  # two Spark processes of its own; in CI the crash chains resume views in new processes
def test_tables_and_views_persist_across_processes(spark, spark_warehouse, tmp_path):
    """A table and a view made by one process are there for the next process that
    uses the same warehouse (Hive metastore in embedded Derby, inside the warehouse).
    Embedded Derby admits one process at a time, so the writer and the reader are
    both subprocesses, and a warehouse in use is refused up front."""
    wh = tmp_path / "wh"
    w = _child(wh, "write")
    assert w.returncode == 0, w.stderr[-3000:]
    assert (wh / "metastore_db").is_dir()
    assert (wh / "p.db" / "t" / "_delta_log").is_dir()

    r = _child(wh, "read")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ROWS [(1, 20), (2, 40)]" in r.stdout
    assert "CDF 2" in r.stdout

    # The warehouse of this process's own session is in use: a second process is
    # refused with a clear error before it starts a JVM.
    spark.sql("SHOW DATABASES").collect()  # make sure the metastore is open
    busy = _child(Path(spark_warehouse), "read")
    assert busy.returncode != 0
    assert "WarehouseInUseError" in busy.stderr, busy.stderr[-3000:]


def _estimate_bits(df) -> int:
    """The number of bits of Spark's estimate of the DataFrame's size in bytes."""
    return int(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()).bit_length()


def test_a_chain_of_checkpoints_keeps_its_size_estimate_bounded(spark):
    # Without statistics Spark estimates a join as the product of its inputs' sizes, and a checkpoint
    # keeps its query's estimate: a checkpoint of a join of checkpoints doubles the estimate's digits.
    # The refresh's checkpoints forget estimates beyond Spark's "unknown" (2^63 - 1 bytes), so a chain
    # of stages never builds numbers of thousands of digits (they filled a 4 GB driver heap once).
    from spark_ivm.runtime.run import RefreshRun

    spark.range(20).selectExpr("id AS k").createOrReplaceTempView("chain_0")
    plain = spark.table("chain_0").localCheckpoint()
    with RefreshRun(spark) as run:
        view = "chain_0"
        for _ in range(4):
            plain = plain.alias("p").join(plain.alias("q"), "k").localCheckpoint()
            view = run.checkpoint(f"SELECT a.k FROM {view} a JOIN {view} b ON a.k = b.k", step="stages")
            assert _estimate_bits(spark.table(view)) <= 63
        assert rows(spark.table(view)) == rows(plain) == {(k,) for k in range(20)}
    assert _estimate_bits(plain) > 63


def test_refreshes_of_a_view_reuse_the_code_spark_compiled_for_the_last(spark, fresh_db):
    # Spark caches the classes it compiles for a plan by their source. The session keeps enough of them
    # that a view's refreshes, which run the same plans each time, do not compile their code again.
    metric = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    spark.sql("CREATE TABLE orders (k BIGINT, c BIGINT, v DECIMAL(10,2)) USING delta")
    spark.sql("INSERT INTO orders VALUES (1, 10, 1.50), (2, 20, 2.25), (3, 10, NULL)")
    spark.sql("CREATE INCREMENTAL VIEW spend AS SELECT c, SUM(v) AS total, COUNT(*) AS n FROM orders GROUP BY c")
    compiled = []
    for round_no in range(4):
        spark.sql(f"INSERT INTO orders VALUES ({10 + round_no}, 10, 3.00)")
        spark.sql(f"DELETE FROM orders WHERE k = {10 + round_no}")  # nets to nothing in the batch
        spark.sql(f"INSERT INTO orders VALUES ({10 + round_no}, 20, 1.00)")
        before = metric.getCount()
        spark.sql("REFRESH INCREMENTAL VIEW spend").collect()
        compiled.append(metric.getCount() - before)
    assert rows(spark.table("spend")) == rows(spark.sql("SELECT c, SUM(v), COUNT(*) FROM orders GROUP BY c"))
    assert compiled[0] > 0 and max(compiled[2:]) <= compiled[0] // 2, compiled


def test_a_source_as_of_a_version_is_read_from_the_files_its_checksum_lists(spark, fresh_db):
    # A refresh reads a source table as of the versions the product rule gives its statements. From the
    # files that version's checksum lists, Delta reads them as they are, deletion vectors applied; read by
    # version, it chooses the files again for every query that scans the table (a Spark job each).
    from spark_ivm.runtime.run import RefreshRun

    spark.sql("CREATE TABLE src (k INT NOT NULL, v STRING) USING delta "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql("INSERT INTO src SELECT id, CAST(id AS STRING) FROM range(500)")
    spark.sql("DELETE FROM src WHERE k % 3 = 0")  # a deletion vector on the file
    spark.sql("INSERT INTO src VALUES (1000, NULL), (1001, 'x')")
    spark.sql("UPDATE src SET v = 'y' WHERE k = 1001")
    table = f"{fresh_db}.src"
    with RefreshRun(spark) as run:
        run.look_up([table])
        latest = run.version(table)
        for version in range(1, latest + 1):
            view = run.pinned(table, version)
            plan = spark.table(view)._jdf.queryExecution().executedPlan().toString()
            assert "TahoeBatchFileIndex" in plan, plan
            expected = spark.read.format("delta").option("versionAsOf", version).table(table)
            assert rows(spark.table(view)) == rows(expected)
            assert spark.table(view).schema == expected.schema  # k stays NOT NULL
            # Files without deletion vectors (version 1's) are read as Parquet files: Delta's format would
            # look for deletion vectors again whenever a query reading them is planned.
            scan = spark.table(view)._jdf.queryExecution().optimizedPlan().collectLeaves().head()
            file_format = scan.relation().fileFormat().getClass().getSimpleName()
            assert file_format == ("ParquetFileFormat" if version == 1 else "DeltaParquetFileFormat"), file_format
            expected.createOrReplaceTempView("by_version")
            assert _jobs(spark, f"SELECT COUNT(*) FROM {view} WHERE k > 10") < _jobs(
                spark, "SELECT COUNT(*) FROM by_version WHERE k > 10")


def _jobs(spark, sql: str) -> int:
    """The Spark jobs a query runs."""
    group = f"jobs_{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "counted")
    try:
        spark.sql(sql).collect()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))
