"""Rows the driver holds, appended to a Delta table without a Spark job (runtime/driver_files.py): they
read back as Spark's own append of the same rows, with the statistics Delta would have written for the
columns it skips files by, and tables the file would not suit are left to Spark. The key values the driver
reads from the files holding a batch's changes include every changed row's."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from pyspark.sql import DataFrame

from spark_ivm.runtime import driver_files
from spark_ivm.runtime import sources as source_tables
from spark_ivm.runtime.deltalog import DeltaLogs

pytestmark = pytest.mark.runtime

COLUMNS = ("map_id INT, t TINYINT, s SMALLINT, k BIGINT, b BOOLEAN, name STRING, raw BINARY, x DOUBLE, "
           "f FLOAT, d DATE, v DECIMAL(38,4)")
ROWS = ("(-2147483648, CAST(-128 AS TINYINT), CAST(7 AS SMALLINT), 9223372036854775807, TRUE, 'it''s é', X'00FF', "
        "CAST('NaN' AS DOUBLE), CAST(1.5 AS FLOAT), DATE '1969-12-31', 12345678901234567890123456789012.3456BD), "
        "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), "
        "(2, CAST(5 AS TINYINT), CAST(-3 AS SMALLINT), -5, FALSE, '', X'', -0.0, CAST('-Infinity' AS FLOAT), "
        "DATE '2200-01-01', -0.0001BD)")


def _added(spark, table: str) -> dict:
    """The AddFile of the table's latest commit."""
    location = spark.sql(f"DESCRIBE DETAIL {table}").collect()[0]["location"]
    version = spark.sql(f"DESCRIBE HISTORY {table} LIMIT 1").collect()[0]["version"]
    path = f"{driver_files.local_folder(location)}/_delta_log/{version:020d}.json"
    with open(path) as log:
        adds = [json.loads(line)["add"] for line in log if line.startswith('{"add"')]
    assert len(adds) == 1
    return adds[0]


def test_held_rows_read_back_as_sparks_append_with_its_statistics(spark, fresh_db):
    for table in ("by_spark", "by_driver"):
        spark.sql(f"CREATE TABLE {table} ({COLUMNS}) USING delta TBLPROPERTIES (delta.appendOnly = true)")
    logs = DeltaLogs(spark)
    for table, held in (("by_spark", False), ("by_driver", True)):
        snapshot = logs.snapshot(f"{fresh_db}.{table}")
        assert driver_files.writable(snapshot)
        values = spark.sql(f"SELECT * FROM VALUES {ROWS} AS r({', '.join(c.split()[0] for c in COLUMNS.split(', '))})")
        # Rows held by the driver as a refresh holds its increments: a local relation.
        rows = DataFrame(spark._jsparkSession.createDataFrame(values._jdf.collectAsList(), values._jdf.schema()), spark)
        sc = spark.sparkContext
        sc.setJobGroup(f"append_{table}", "append")
        try:
            logs.append(snapshot, rows if held else rows.coalesce(1), "{}", held=held)  # one file each
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        jobs = sc.statusTracker().getJobIdsForGroup(f"append_{table}")
        assert (len(jobs) == 0) == held, jobs

    def rows_of(table):
        return sorted((tuple(str(v) for v in r) for r in spark.table(table).collect()))

    assert rows_of("by_driver") == rows_of("by_spark")
    assert [(f.name, f.dataType) for f in spark.table("by_driver").schema] == \
           [(f.name, f.dataType) for f in spark.table("by_spark").schema]
    ours, delta = (json.loads(_added(spark, t)["stats"]) for t in ("by_driver", "by_spark"))
    assert ours["numRecords"] == delta["numRecords"] == 3
    assert ours["nullCount"] == delta["nullCount"]
    for bound in ("minValues", "maxValues"):
        assert ours[bound] == {c: delta[bound][c] for c in ("map_id", "t", "s", "k", "d")}
    # Delta skips the file by the statistics written here, and keeps it where they say nothing.
    assert spark.table("by_driver").where("k > 9223372036854775806").count() == 1
    assert spark.table("by_driver").where("d = DATE '2000-01-01'").count() == 0
    assert spark.table("by_driver").where("v = -0.0001").count() == 1
    assert ours["tightBounds"] is True
    assert Decimal("-0.0001") in [r["v"] for r in spark.table("by_driver").collect()]


@pytest.mark.parametrize("definition", [
    "(k BIGINT, g INT) USING delta PARTITIONED BY (g)",
    "(k BIGINT, g BIGINT GENERATED ALWAYS AS (k + 1)) USING delta",
    "(k BIGINT NOT NULL) USING delta",
    "(k BIGINT, at TIMESTAMP) USING delta",
    "(k BIGINT) USING delta TBLPROPERTIES ('delta.columnMapping.mode' = 'name')",
    "(k BIGINT) USING delta TBLPROPERTIES ('delta.enableRowTracking' = 'true')",
])
def test_tables_a_driver_file_would_not_suit_are_left_to_spark(spark, fresh_db, definition):
    spark.sql(f"CREATE TABLE t {definition}")
    assert not driver_files.writable(DeltaLogs(spark).snapshot(f"{fresh_db}.t"))


@pytest.mark.parametrize("vectors", [True, False])
def test_values_read_from_the_changed_files_hold_every_changed_value(spark, fresh_db, vectors):
    """For each kind of commit, the key values the driver reads from the files holding a batch's changes
    (DeltaLogs.change_files) include every key of the change data feed's rows; a file with a deletion
    vector, read whole, would hold rows the commit did not change, so such batches are left to Spark."""
    spark.sql(f"CREATE TABLE t (k BIGINT, g INT) USING delta TBLPROPERTIES (delta.enableChangeDataFeed = true, "
              f"delta.enableDeletionVectors = {str(vectors).lower()})")
    statements = ["INSERT INTO t SELECT id, CAST(id % 7 AS INT) FROM range(0, 400)",
                  "INSERT INTO t VALUES (1000, NULL), (1001, 3), (1001, 3)",
                  "DELETE FROM t WHERE k % 50 = 3",
                  "UPDATE t SET g = g + 1 WHERE k BETWEEN 100 AND 104",
                  "OPTIMIZE t",
                  "DELETE FROM t WHERE k >= 1000"]
    logs = DeltaLogs(spark)
    for statement in statements:
        spark.sql(statement)
        snapshot = logs.snapshot(f"{fresh_db}.t")
        assert driver_files.readable(snapshot)
        version = snapshot.version
        feed = spark.sql(f"SELECT k, g FROM table_changes('{fresh_db}.t', {version}, {version}) "
                         "WHERE _change_type <> 'update_preimage'").collect()
        files = logs.change_files(snapshot, version, version)
        paths = None if files is None else [f.path for f in files]
        if paths is None:
            assert vectors, f"{statement}: no deletion vector, yet the changed files were not listed"
            continue
        found = driver_files.column_values(snapshot, paths, ["k", "g"])
        assert {r["k"] for r in feed} <= found["k"], statement
        assert {r["g"] for r in feed if r["g"] is not None} <= found["g"], statement
        if statement.startswith("OPTIMIZE"):
            assert paths == [] and not feed  # rewrites no row


@pytest.mark.parametrize("vectors", [True, False])
def test_changes_read_by_the_driver_are_the_consolidated_change_data_feed(spark, fresh_db, vectors):
    """The rows the driver reads from a batch's change files (driver_files.change_rows) and nets are the
    change data feed's rows netted by Spark, for every kind of commit and for ranges of several commits
    (where rows inserted and deleted again cancel), with NULLs and duplicate rows; where the log does not
    let the driver read them (a deletion vector, a change of the table's columns), Spark does."""
    spark.sql(f"CREATE TABLE t (k BIGINT, g INT, name STRING, v DECIMAL(12,2), d DATE, b BOOLEAN, x DOUBLE) "
              f"USING delta TBLPROPERTIES (delta.enableChangeDataFeed = true, "
              f"delta.enableDeletionVectors = {str(vectors).lower()})")
    statements = ["INSERT INTO t SELECT id, CAST(id % 7 AS INT), CONCAT('n', id % 5), id / 8, "
                  "DATE_ADD(DATE '2020-01-01', CAST(id % 30 AS INT)), id % 2 = 0, id / 3 FROM range(0, 300)",
                  "INSERT INTO t VALUES (1000, NULL, NULL, NULL, NULL, NULL, NULL), "
                  "(1001, 3, 'é', 1.25, DATE '1969-12-31', TRUE, 2.5), (1001, 3, 'é', 1.25, DATE '1969-12-31', TRUE, 2.5)",
                  "DELETE FROM t WHERE k % 50 = 3",
                  "UPDATE t SET g = g + 1, name = NULL WHERE k BETWEEN 100 AND 104",
                  "OPTIMIZE t",
                  "DELETE FROM t WHERE k >= 1000",
                  "ALTER TABLE t ADD COLUMNS (extra INT)"]
    columns = [("k", "bigint"), ("g", "int"), ("name", "string"), ("v", "decimal(12,2)"), ("d", "date"),
               ("b", "boolean"), ("x", "double")]
    logs = DeltaLogs(spark)
    first = None
    for statement in statements:
        spark.sql(statement)
        snapshot = logs.snapshot(f"{fresh_db}.t")
        version = snapshot.version
        first = version if first is None else first
        for start in sorted({version, first}):
            feed = spark.sql(source_tables.change_rows_sql(f"{fresh_db}.t", start, version, columns)).collect()
            files = logs.change_files(snapshot, start, version)
            if files is None:
                assert vectors or statement.startswith("ALTER"), f"{statement}: the driver read no change file"
                continue
            held = driver_files.change_rows(snapshot, files, columns, "m")
            assert held is not None, statement
            ours = sorted(tuple(r.values()) for r in held.to_pylist())
            assert ours == sorted(tuple(r) for r in feed), f"{statement} ({start}..{version})"
