"""Statements computed on the driver in DuckDB (runtime/local_sql.py): which SQL is translated, the
translation's results, and the types of what it returns. Pure Python: DuckDB over Arrow tables, Spark's
types as PySpark describes them, no Spark session. The refreshes that compute statements this way are
tested against Spark's own query in the runtime suites."""

from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql.types import DecimalType, LongType, StringType, StructField, StructType

from spark_ivm.runtime.local_sql import DriverStatements, duckdb_sql, spark_types

pytest.importorskip("duckdb")


def test_spellings_are_translated():
    sql = duckdb_sql("SELECT /*+ COALESCE(2) */ `a b`, 1.50BD FROM t WHERE x <=> y AND s = 'it''s'")
    assert sql == """SELECT   "a b", 1.50 FROM t WHERE x  IS NOT DISTINCT FROM  y AND s = 'it''s'"""


@pytest.mark.parametrize("sql", [
    "SELECT a / b FROM t",  # decimal division: a decimal in Spark, a double in DuckDB
    "SELECT a % b FROM t",
    "SELECT a FROM t WHERE s RLIKE 'x'",
    "SELECT try_divide(a, b) FROM t",
    "SELECT substring(a, 0, 2) FROM t",  # from position 0 Spark starts at 1, DuckDB before it
    "SELECT substring(a, 1, -1) FROM t",
    "SELECT upper(a) FROM t",  # functions beyond the runtime's own forms
    "SELECT date_add(d, 1) FROM t",
    "SELECT a FROM t WHERE s LIKE 'a\\\\_%'",  # LIKE's default escape character differs
])
def test_what_may_mean_otherwise_is_refused(sql):
    assert duckdb_sql(sql) is None


def test_substrings_from_a_positive_position_run_in_duckdb():
    import duckdb
    sql = duckdb_sql("SELECT substring(`p`, 1, 2) AS c, substring(`p`, 3) AS d FROM (SELECT '13-555' AS `p`) AS t")
    assert duckdb.connect().execute(sql).fetchall() == [("13", "-555")]


def test_parts_of_dates_and_absolute_values_run_in_duckdb():
    import duckdb
    sql = duckdb_sql("SELECT year(`d`) AS y, month(`d`) AS m, day(`d`) AS dd, abs(-2) AS a "
                     "FROM (SELECT DATE '1995-03-15' AS `d`) AS t")
    assert duckdb.connect().execute(sql).fetchall() == [(1995, 3, 15, 2)]


def test_stack_becomes_a_lateral_values_list():
    import duckdb
    sql = duckdb_sql("SELECT * FROM (SELECT stack(2, 1, CAST(`k` AS bigint), CAST(__v0 AS bigint), "
                     "2, CAST(`k` AS bigint), CAST(__v1 AS bigint)) AS (map_id, key, v) "
                     "FROM (SELECT 5 AS `k`, 7 AS __v0, 9 AS __v1 UNION ALL SELECT 6, 8, 10) AS f) AS u")
    assert sorted(duckdb.connect().execute(sql).fetchall()) == [(1, 5, 7), (1, 6, 8), (2, 5, 9), (2, 6, 10)]


def test_results_take_sparks_types():
    import duckdb
    query = duckdb.connect().sql("SELECT SUM(CAST(k AS BIGINT)) AS n, SUM(CAST(k AS DECIMAL(15, 2))) AS total, "
                                 "CAST(MAX(k) AS string) AS s, DATE '2020-01-01' AS d FROM (SELECT 1 AS k)")
    assert spark_types(query.columns, query.types) == pa.schema(
        [("n", pa.int64()), ("total", pa.decimal128(38, 2)), ("s", pa.string()), ("d", pa.date32())])
    for refused in ("SELECT CAST(1 AS DECIMAL(20, 7)) AS x", "SELECT TIMESTAMP '2020-01-01 00:00:00' AS x",
                    "SELECT [1, 2] AS x"):
        query = duckdb.connect().sql(refused)
        assert spark_types(query.columns, query.types) is None, refused


def test_statements_over_held_rows_run_in_duckdb():
    driver = DriverStatements("__ivm_run_")
    prices = pa.array([Decimal("1.25"), Decimal("2.00"), None], pa.decimal128(15, 2))
    driver.hold("__ivm_run_0", pa.table({"k": [1, 1, 2], "s": ["a", "b", None], "v": prices}))
    rows, schema = driver.compute("SELECT k, SUM(v) AS total, SUM(k) AS n FROM __ivm_run_0 GROUP BY k ORDER BY k")
    assert schema == StructType([StructField("k", LongType()), StructField("total", DecimalType(38, 2)),
                                 StructField("n", LongType())])
    assert rows.to_pylist() == [{"k": 1, "total": Decimal("3.25"), "n": 2}, {"k": 2, "total": None, "n": 2}]
    # A view the driver does not hold, a table DuckDB does not know, a refused form: Spark computes them.
    assert driver.compute("SELECT k FROM __ivm_run_9") is None
    assert driver.compute("SELECT k % 2 FROM __ivm_run_0") is None
    assert driver.compute("SELECT k, s FROM __ivm_run_0 JOIN some_table ON TRUE") is None
    driver.hold("__ivm_run_1", pa.table({"t": pa.array([0], pa.timestamp("us", tz="UTC"))}))
    assert driver.compute("SELECT 1 AS one FROM __ivm_run_1") is None
    driver.close()


def test_nothing_runs_when_disabled():
    driver = DriverStatements("__ivm_run_", enabled=False)
    driver.hold("__ivm_run_0", pa.table({"k": [1]}))
    assert driver.compute("SELECT k FROM __ivm_run_0") is None


def test_string_columns_keep_their_type():
    driver = DriverStatements("__ivm_run_")
    driver.hold("__ivm_run_0", pa.table({"s": ["x", None]}))
    rows, schema = driver.compute("SELECT CAST(s AS string) AS s FROM __ivm_run_0")
    assert rows.column("s").to_pylist() == ["x", None]
    assert schema == StructType([StructField("s", StringType())])
