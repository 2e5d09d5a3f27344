"""Rows the driver holds, appended to a Delta table without a Spark job (runtime/driver_files.py): they
read back as Spark's own append of the same rows, with the statistics Delta would have written for the
columns it skips files by, and tables the file would not suit are left to Spark. The key values the driver
reads from the files holding a batch's changes include every changed row's; a batch the driver holds reaches
Spark only where a statement Spark computes reads it."""

from __future__ import annotations

import datetime
import json
import os
import shutil
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame

from spark_ivm.runtime import deletion_vectors, driver_files
from spark_ivm.runtime import sources as source_tables
from spark_ivm.runtime.deltalog import DeltaLogs
from spark_ivm.runtime.key_conditions import KeyRange, MapIs, all_of, any_of, key_values
from spark_ivm.runtime.run import arrow_frame

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
    for table in ("by_spark", "by_driver", "by_arrow"):
        spark.sql(f"CREATE TABLE {table} ({COLUMNS}) USING delta TBLPROPERTIES (delta.appendOnly = true)")
    logs = DeltaLogs(spark)
    for table, held in (("by_spark", False), ("by_driver", True), ("by_arrow", True)):
        snapshot = logs.snapshot(f"{fresh_db}.{table}")
        assert driver_files.writable(snapshot)
        values = spark.sql(f"SELECT * FROM VALUES {ROWS} AS r({', '.join(c.split()[0] for c in COLUMNS.split(', '))})")
        # Rows held by the driver as a refresh holds its increments: a local relation.
        rows = DataFrame(spark._jsparkSession.createDataFrame(values._jdf.collectAsList(), values._jdf.schema()), spark)
        # by_arrow: the same rows as an Arrow table in wider types, as DuckDB computes them.
        arrow = _widened(rows.toArrow()) if table == "by_arrow" else None
        assert arrow is None or driver_files.as_written(snapshot, arrow) is not None  # written as it is
        sc = spark.sparkContext
        sc.setJobGroup(f"append_{table}", "append")
        try:
            logs.append(snapshot, rows if held else rows.coalesce(1), "{}", held=held, arrow=arrow)  # one file each
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        jobs = sc.statusTracker().getJobIdsForGroup(f"append_{table}")
        assert (len(jobs) == 0) == held, jobs

    def rows_of(table):
        return sorted((tuple(str(v) for v in r) for r in spark.table(table).collect()))

    assert rows_of("by_driver") == rows_of("by_spark") == rows_of("by_arrow")
    assert [(f.name, f.dataType) for f in spark.table("by_driver").schema] == \
           [(f.name, f.dataType) for f in spark.table("by_spark").schema] == \
           [(f.name, f.dataType) for f in spark.table("by_arrow").schema]
    delta = json.loads(_added(spark, "by_spark")["stats"])
    for ours in (json.loads(_added(spark, t)["stats"]) for t in ("by_driver", "by_arrow")):
        assert ours["numRecords"] == delta["numRecords"] == 3
        assert ours["nullCount"] == delta["nullCount"]
        for bound in ("minValues", "maxValues"):
            assert ours[bound] == {c: delta[bound][c] for c in ("map_id", "t", "s", "k", "d")}
    ours = json.loads(_added(spark, "by_driver")["stats"])
    # Delta skips the file by the statistics written here, and keeps it where they say nothing.
    assert spark.table("by_driver").where("k > 9223372036854775806").count() == 1
    assert spark.table("by_driver").where("d = DATE '2000-01-01'").count() == 0
    assert spark.table("by_driver").where("v = -0.0001").count() == 1
    assert ours["tightBounds"] is True
    assert Decimal("-0.0001") in [r["v"] for r in spark.table("by_driver").collect()]


def _widened(rows: pa.Table) -> pa.Table:
    """The rows with their integers as BIGINT and their decimals at a larger scale: DuckDB's result types."""
    def wider(column: pa.ChunkedArray) -> pa.ChunkedArray:
        if pa.types.is_integer(column.type):
            return column.cast(pa.int64())
        return column.cast(pa.decimal128(38, 6)) if pa.types.is_decimal(column.type) else column
    return pa.table([wider(c) for c in rows.columns], names=rows.column_names)


class _Table:
    columns = (("k", "int"), ("v", "decimal(10,2)"), ("name", "string"))


def test_held_arrow_rows_are_cast_to_the_tables_types_only_where_no_value_changes():
    def table(k, v, name=pa.array(["a"])):
        return pa.table({"name": name, "v": v, "k": k})  # in another order than the table's

    exact = driver_files.as_written(_Table, table(pa.array([7], pa.int64()), pa.array([Decimal("1.5")],
                                                                                      pa.decimal128(38, 6))))
    assert exact.schema == driver_files.table_schema(_Table)
    assert exact.to_pylist() == [{"k": 7, "v": Decimal("1.50"), "name": "a"}]
    refused = [
        table(pa.array([2 ** 40], pa.int64()), pa.array([Decimal("1.5")])),  # out of INT's range
        table(pa.array([7]), pa.array([Decimal("1.505")])),  # Spark's CAST would round it
        table(pa.array([7]), pa.array([1.5])),  # a double: Spark's CAST decides
        table(pa.array([7]), pa.array([Decimal("1.5")]), name=pa.array([1])),  # not a string
        pa.table({"k": [7], "v": pa.array([Decimal("1.5")])}),  # no name
    ]
    assert [driver_files.as_written(_Table, rows) for rows in refused] == [None] * len(refused)


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
        assert files is not None, statement
        found = driver_files.column_values(snapshot, files, ["k", "g"])
        assert {r["k"] for r in feed} <= found["k"], statement
        assert {r["g"] for r in feed if r["g"] is not None} <= found["g"], statement
        if vectors and statement.startswith("DELETE"):  # the vectors say which rows: no other row is read
            assert found["k"] == {r["k"] for r in feed}, statement
        if statement.startswith("OPTIMIZE"):
            assert files == [] and not feed  # rewrites no row


@pytest.mark.parametrize("vectors", [True, False])
def test_changes_read_by_the_driver_are_the_consolidated_change_data_feed(spark, fresh_db, vectors):
    """The rows the driver reads from a batch's change files (driver_files.change_rows) and nets are the
    change data feed's rows netted by Spark, for every kind of commit and for ranges of several commits
    (where rows inserted and deleted again cancel), with NULLs and duplicate rows. On a table with
    deletion vectors: a first vector, a vector that grows, a file with a vector removed whole, in a file of
    several row groups; a change of the table's columns leaves the batch to Spark."""
    spark.sql(f"CREATE TABLE t (k BIGINT, g INT, name STRING, v DECIMAL(12,2), d DATE, b BOOLEAN, x DOUBLE) "
              f"USING delta TBLPROPERTIES (delta.enableChangeDataFeed = true, "
              f"delta.enableDeletionVectors = {str(vectors).lower()})")
    rows = spark.sql("SELECT id AS k, CAST(id % 7 AS INT) AS g, CONCAT('n', id % 5) AS name, "
                     "CAST(id / 8 AS DECIMAL(12,2)) AS v, DATE_ADD(DATE '2020-01-01', CAST(id % 30 AS INT)) AS d, "
                     "id % 2 = 0 AS b, id / 3 AS x FROM range(0, 3000)").coalesce(1)
    statements = [lambda: _in_row_groups_of(spark, 2048, lambda: rows.write.format("delta").mode("append")
                                             .saveAsTable("t")),
                  "INSERT INTO t VALUES (5000, NULL, NULL, NULL, NULL, NULL, NULL), "
                  "(5001, 3, 'é', 1.25, DATE '1969-12-31', TRUE, 2.5), (5001, 3, 'é', 1.25, DATE '1969-12-31', TRUE, 2.5)",
                  "DELETE FROM t WHERE k % 50 = 3",
                  "DELETE FROM t WHERE k % 50 = 4 OR k = 5000",
                  "UPDATE t SET g = g + 1, name = NULL WHERE k BETWEEN 100 AND 104",
                  "DELETE FROM t WHERE k = 5001",
                  "OPTIMIZE t",
                  "DELETE FROM t WHERE k % 500 = 7",
                  "ALTER TABLE t ADD COLUMNS (extra INT)"]
    columns = [("k", "bigint"), ("g", "int"), ("name", "string"), ("v", "decimal(12,2)"), ("d", "date"),
               ("b", "boolean"), ("x", "double")]
    logs = DeltaLogs(spark)
    first = None
    kinds = set()
    for statement in statements:
        spark.sql(statement) if isinstance(statement, str) else statement()
        snapshot = logs.snapshot(f"{fresh_db}.t")
        version = snapshot.version
        if first is None:  # a file of several row groups, of which a vector's rows pick some
            written = next(a["add"]["path"] for a in logs.actions(snapshot, version) if "add" in a)
            folder = driver_files.local_folder(snapshot.location)
            assert pq.ParquetFile(f"{folder}/{written}").metadata.num_row_groups > 2
        first = version if first is None else first
        for start in sorted({version, first}):
            feed = spark.sql(source_tables.change_rows_sql(f"{fresh_db}.t", start, version, columns)).collect()
            files = logs.change_files(snapshot, start, version)
            if files is None:
                assert statement == statements[-1], f"{statement}: the driver read no change file"
                continue
            kinds |= {(f.kind, f.before is not None and f.after is not None and bool(f.before)) for f in files}
            held = driver_files.change_rows(snapshot, files, columns, "m")
            assert held is not None, statement
            ours = sorted(tuple(r.values()) for r in held.to_pylist())
            assert ours == sorted(tuple(r) for r in feed), f"{statement} ({start}..{version})"
    if vectors:  # a vector set on a file, one grown, a file with a vector removed
        assert {("vectors", False), ("vectors", True)} <= kinds


def _in_row_groups_of(spark, size: int, write) -> None:
    """Run the write with Parquet row groups of about `size` bytes."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop.set("parquet.block.size", str(size))
    try:
        write()
    finally:
        hadoop.unset("parquet.block.size")


def test_inline_and_stored_vectors_read_alike(spark, fresh_db):
    """A deletion vector stored inline in the log (Z85 text) reads as the same vector stored in a file."""
    spark.sql("CREATE TABLE t (k BIGINT) USING delta TBLPROPERTIES (delta.enableDeletionVectors = true)")
    spark.range(0, 100000).selectExpr("id AS k").coalesce(1).write.format("delta").mode("append").saveAsTable("t")
    spark.sql("DELETE FROM t WHERE k % 3 = 0 OR k BETWEEN 70000 AND 90000")
    logs = DeltaLogs(spark)
    snapshot = logs.snapshot(f"{fresh_db}.t")
    stored = next(a["add"]["deletionVector"] for a in logs.actions(snapshot, snapshot.version) if "add" in a)
    folder = driver_files.local_folder(snapshot.location)
    rows = deletion_vectors.deleted_rows(folder, stored)
    assert len(rows) == stored["cardinality"] == len([k for k in range(100000) if k % 3 == 0 or 70000 <= k <= 90000])
    assert set(rows) == {k for k in range(100000) if k % 3 == 0 or 70000 <= k <= 90000}
    size = stored["sizeInBytes"]
    with open(deletion_vectors._vector_file(folder, "u", stored["pathOrInlineDv"]), "rb") as file:
        serialized = file.read()[stored["offset"] + 4:][:size]
    inline = {"storageType": "i", "pathOrInlineDv": _z85(serialized), "sizeInBytes": size,
              "cardinality": stored["cardinality"]}
    assert deletion_vectors.deleted_rows(folder, inline) == rows
    with pytest.raises(deletion_vectors.UnreadableVector):
        deletion_vectors.deleted_rows(folder, {**stored, "offset": stored["offset"] + 1})


def _z85(data: bytes) -> str:
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
    data += b"\0" * (-len(data) % 4)
    text = ""
    for start in range(0, len(data), 4):
        value = int.from_bytes(data[start:start + 4], "big")
        text += "".join(alphabet[value // 85 ** p % 85] for p in range(4, -1, -1))
    return text


def test_store_rows_read_by_the_driver_are_the_rows_sparks_where_keeps(spark, fresh_db):
    """The rows of a store-like table that a key condition holds for, read by the driver from the files
    whose statistics allow them, are those Spark's WHERE keeps: across files, with NULLs and duplicates,
    rows deleted through a deletion vector, and a column added after some files were written."""
    spark.sql("CREATE TABLE store (map_id INT, k_a BIGINT, k_d DATE, k_m DECIMAL(10,2), v DECIMAL(38,4)) "
              "USING delta TBLPROPERTIES (delta.enableDeletionVectors = true)")
    row = ("CAST(id % 3 + 1 AS INT), IF(id % 7 = 0, NULL, id % 40), IF(id % 11 = 0, NULL, DATE_ADD(DATE '1995-01-01', "
           "CAST(id % 9 AS INT))), CAST(id % 13 / 4 AS DECIMAL(10,2)), CAST(id AS DECIMAL(38,4))")
    for start in (0, 300, 600):  # a file each, and the middle one's rows again: duplicates
        spark.sql(f"INSERT INTO store SELECT {row} FROM range({start % 600}, {start % 600 + 300})")
    spark.sql("DELETE FROM store WHERE k_a = 5")
    spark.sql("ALTER TABLE store ADD COLUMNS (k_s STRING)")
    spark.sql(f"INSERT INTO store SELECT {row}, IF(id % 2 = 0, NULL, CAST(id % 5 AS STRING)) FROM range(900, 1000)")
    logs = DeltaLogs(spark)
    snapshot = logs.snapshot(f"{fresh_db}.store")
    files = logs.listed_files(snapshot)
    assert len({bool(f.get("deletionVector")) for f in files}) == 2  # files with a vector and without
    columns = [c for c, _ in snapshot.columns]
    d = datetime.date(1995, 1, 3)
    conditions = [
        MapIs((2,)),
        all_of(MapIs((1, 3)), KeyRange("k_a", 3, 8)),
        all_of(MapIs((2,)), key_values("k_a", [1, 5, 17, 39]), KeyRange("k_d", d, d + datetime.timedelta(days=2))),
        any_of(all_of(MapIs((1,)), KeyRange("k_a", None, None)), all_of(MapIs((3,)), key_values("k_s", ["1", "3"]))),
        all_of(MapIs((1, 2, 3)), KeyRange("k_m", Decimal("0.5"), Decimal("2.25"))),
        all_of(MapIs((2,)), KeyRange("k_m", Decimal(50), Decimal(60))),  # every file ruled out by its statistics
    ]
    for condition in conditions:
        kept = logs.listed_files(snapshot, condition.could_hold)
        held = driver_files.store_rows(snapshot, kept, condition, columns, max_rows=10_000)
        expected = sorted(map(repr, (tuple(r) for r in spark.sql(f"SELECT * FROM store WHERE {condition}").collect())))
        assert sorted(map(repr, (tuple(r.values()) for r in held.to_pylist()))) == expected, condition
        # and so are the rows as Spark reads them once handed over
        handed = arrow_frame(spark, held, ", ".join(f"{c} {t}" for c, t in snapshot.columns)).collect()
        assert sorted(map(repr, (tuple(r) for r in handed))) == expected, condition
    assert not logs.listed_files(snapshot, conditions[-1].could_hold)
    # More rows than the driver may hold: left to Spark.
    assert driver_files.store_rows(snapshot, files, conditions[0], columns, max_rows=10) is None


def test_rows_handed_to_spark_keep_every_record_batch(spark):
    """A pyarrow table read by the driver reaches Spark whole, empty record batches among its batches
    included (PySpark's own hand-over ends at the first empty batch and drops the rows after it)."""
    batches = [pa.record_batch([pa.array(values, pa.int64())], names=["x"])
               for values in ([1, 2, 3], [], [4, 5], [], [], [6])]
    for chosen in (batches, batches[1:], batches[1:2]):
        rows = pa.Table.from_batches(chosen)
        assert sorted(r.x for r in arrow_frame(spark, rows, "x BIGINT").collect()) == sorted(rows.column("x").to_pylist())


def test_rows_at_positions_are_read_in_order_decoding_no_further_than_the_last(tmp_path, monkeypatch):
    """driver_files._rows_at, which a DELETE's deletion vector reads the deleted rows through: the rows at
    the positions, across row groups and decoded batches, and no batch past the last position decoded."""
    path = str(tmp_path / "rows.parquet")
    pq.write_table(pa.table({"k": list(range(1000)), "name": [f"n{i}" for i in range(1000)]}), path,
                   row_group_size=300)
    monkeypatch.setattr(driver_files, "_DECODED_ROWS", 64)
    parquet = pq.ParquetFile(path)
    for wanted in ([0], [5, 63, 64, 299, 300, 301, 999], list(range(10, 20)), []):
        got = [r for b in driver_files._rows_at(parquet, np.array(wanted, dtype=np.int64), ["name", "k"])
               for r in b.to_pylist()]
        assert got == [{"name": f"n{i}", "k": i} for i in wanted]
    decoded = []
    original = pq.ParquetFile.iter_batches

    def counted(self, *args, **kwargs):
        for batch in original(self, *args, **kwargs):
            decoded.append(batch.num_rows)
            yield batch
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counted)
    list(driver_files._rows_at(parquet, np.array([3, 70], dtype=np.int64), ["k"]))
    assert sum(decoded) == 128  # two batches of the first row group, none after


def test_a_tables_file_list_brought_forward_by_its_commits_is_the_one_its_checksum_lists(spark, fresh_db, monkeypatch):
    """The file list a session keeps of a table is brought forward by each commit after it (appends, a
    deletion through a deletion vector, an update, a compaction, an overwrite of some rows): the checksum's
    list is converted once, and after each commit the kept list is the one it gives converted anew."""
    spark.sql("CREATE TABLE listed (k BIGINT, v STRING) USING delta TBLPROPERTIES (delta.enableDeletionVectors = true)")
    logs = DeltaLogs(spark)
    whole_lists = []
    as_python = logs.as_python

    def counted(value):
        found = as_python(value)
        if isinstance(found, list):
            whole_lists.append(len(found))
        return found

    monkeypatch.setattr(logs, "as_python", counted)
    vectors = False

    def listing(table_logs):
        snapshot = table_logs.snapshot(f"{fresh_db}.listed")
        return sorted(json.dumps(f, sort_keys=True) for f in table_logs.listed_files(snapshot))

    for statement in ["INSERT INTO listed SELECT id, CAST(id AS STRING) FROM range(0, 50)",
                      "INSERT INTO listed SELECT id, 'x' FROM range(50, 80)",
                      "DELETE FROM listed WHERE k % 7 = 0",
                      "UPDATE listed SET v = 'y' WHERE k < 20",
                      "OPTIMIZE listed",
                      "INSERT INTO listed REPLACE WHERE k >= 60 SELECT id, 'z' FROM range(60, 70)",
                      "INSERT INTO listed VALUES (1, NULL)"]:
        spark.sql(statement)
        kept = listing(logs)
        assert kept == listing(DeltaLogs(spark)), statement
        assert len(kept) == spark.sql("DESCRIBE DETAIL listed").first()["numFiles"], statement
        vectors = vectors or any(json.loads(f).get("deletionVector") for f in kept)
    assert vectors  # a file was listed with its deletion vector
    assert len(whole_lists) == 1


def test_a_table_replaced_by_another_process_is_read_as_it_is_now(spark, fresh_db):
    """The latest snapshot Delta holds is taken without listing the log only while the log shows nothing
    after it (DeltaLogs._latest): a table dropped and created again elsewhere, up to the same version, is
    told apart by its last commit file."""
    logs = DeltaLogs(spark)
    for table, value in (("replaced", 1), ("replacement", 2)):
        spark.sql(f"CREATE TABLE {table} (k BIGINT) USING delta")
        for _ in range(3):
            spark.sql(f"INSERT INTO {table} VALUES ({value})")
    old, new = (logs.snapshot(f"{fresh_db}.{t}") for t in ("replaced", "replacement"))
    assert old.version == new.version == 3 and old.table_id != new.table_id
    assert logs.snapshot(f"{fresh_db}.replaced").table_id == old.table_id  # Delta's own snapshot, as it was
    # What another process's DROP and CREATE would leave, unseen by this session's Delta: the other table's
    # files (their modification times kept) where this one's were.
    folder, other = (driver_files.local_folder(s.location) for s in (old, new))
    shutil.rmtree(folder)
    shutil.copytree(other, folder)
    now = logs.snapshot(f"{fresh_db}.replaced")
    assert (now.version, now.table_id) == (3, new.table_id)
    spark.sql(f"INSERT INTO {fresh_db}.replacement VALUES (3)")  # a later commit is read too
    shutil.copy2(os.path.join(other, "_delta_log", f"{4:020d}.json"), os.path.join(folder, "_delta_log"))
    assert logs.snapshot(f"{fresh_db}.replaced").version == 4


@pytest.mark.parametrize("driver_statements", ["on", "off"])
def test_a_batch_the_driver_holds_reaches_spark_only_where_spark_reads_it(spark, fresh_db, monkeypatch,
                                                                          driver_statements):
    # The batch is netted on the driver; where DuckDB computes every statement, Spark never gets its rows.
    from spark_ivm.runtime import run as run_module
    from spark_ivm.runtime.sqlgen import MULTIPLICITY

    handed = []
    monkeypatch.setattr(run_module, "arrow_frame",
                        lambda s, rows, schema: handed.append(rows.column_names) or arrow_frame(s, rows, schema))
    spark.sql("CREATE TABLE t (g INT, v BIGINT) USING delta TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    spark.sql("INSERT INTO t SELECT id % 5, id FROM range(300)")
    spark.sql("CREATE INCREMENTAL VIEW per_group AS SELECT g, SUM(v) AS total, COUNT(*) AS n FROM t GROUP BY g")
    spark.sql("INSERT INTO t VALUES (1, 1000), (2, 2000), (7, 7)")
    spark.sql("DELETE FROM t WHERE v = 4")
    spark.conf.set("spark.ivm.driverStatements", driver_statements)
    try:
        spark.sql("REFRESH INCREMENTAL VIEW per_group").collect()
    finally:
        spark.conf.unset("spark.ivm.driverStatements")
    batches = [names for names in handed if MULTIPLICITY in names]
    assert (batches == []) if driver_statements == "on" else batches, handed
    expected = spark.sql("SELECT g, SUM(v), COUNT(*) FROM t GROUP BY g").collect()
    assert sorted(map(tuple, spark.table("per_group").collect())) == sorted(map(tuple, expected))


@pytest.mark.parametrize("limit", [None, 1])
def test_staged_rows_the_driver_computed_are_appended_from_there_up_to_a_limit(spark, fresh_db, monkeypatch, limit):
    # Up to DRIVER_WRITE_ROWS the driver writes the rows DuckDB computed as a file of the store; beyond,
    # Spark writes them. Either way the view equals its query.
    from spark_ivm import heuristics

    if limit is not None:
        monkeypatch.setattr(heuristics, "DRIVER_WRITE_ROWS", limit)
    written, write_file = [], driver_files.write_file
    monkeypatch.setattr(driver_files, "write_file",
                        lambda snapshot, rows: written.append(rows.num_rows) or write_file(snapshot, rows))
    spark.sql("CREATE TABLE t (g INT, v BIGINT) USING delta TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    spark.sql("INSERT INTO t SELECT id % 50, id FROM range(300)")
    spark.conf.set("spark.ivm.inlineRows", "0")  # the view reads its store (inline maps are collected anyway)
    try:
        spark.sql("CREATE INCREMENTAL VIEW per_group AS SELECT g, SUM(v) AS total, AVG(v) AS mean FROM t GROUP BY g")
        spark.sql("INSERT INTO t SELECT id % 7, id FROM range(20)")
        written.clear()
        spark.sql("REFRESH INCREMENTAL VIEW per_group").collect()
    finally:
        spark.conf.unset("spark.ivm.inlineRows")
    assert (written != []) == (limit is None), written
    expected = spark.sql("SELECT g, SUM(v), AVG(v) FROM t GROUP BY g").collect()
    assert sorted(map(tuple, spark.table("per_group").collect())) == sorted(map(tuple, expected))
