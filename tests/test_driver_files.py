"""Rows the driver holds, appended to a Delta table without a Spark job (runtime/driver_files.py): they
read back as Spark's own append of the same rows, with the statistics Delta would have written for the
columns it skips files by, and tables the file would not suit are left to Spark."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from pyspark.sql import DataFrame

from spark_ivm.runtime import driver_files
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
