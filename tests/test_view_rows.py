"""The user's view kept as literals (runtime/viewsql.py): values of every type the inline form allows read back
from the view exactly as Spark computed them, and a definition too long for the metastore is never tried."""

from __future__ import annotations

import math

import pytest

import spark_ivm
from spark_ivm.runtime.deltalog import DeltaLogs
from spark_ivm.runtime.publish import ViewForms
from spark_ivm.runtime.viewsql import Column, held_maps_sql, inlinable, merged_maps, sorted_rows, values_sql

pytestmark = pytest.mark.runtime

# One row of every inlinable type, values picked to break a careless literal: quotes, backslashes, a
# comment's end, control characters, the float specials, the smallest and largest integers, a timestamp
# far from the epoch.
VALUES = """SELECT * FROM VALUES
  (CAST(-128 AS TINYINT), CAST(32767 AS SMALLINT), -2147483648, 9223372036854775807, TRUE,
   'it''s a \\\\ back*/slash /* and\tmore\n', DATE '1969-12-31', TIMESTAMP '1901-02-03 04:05:06.789012',
   TIMESTAMP_NTZ '2200-01-01 00:00:00.000001', X'00FF10', CAST('NaN' AS DOUBLE), CAST('-Infinity' AS FLOAT),
   CAST(0.1 AS DOUBLE), 12345678901234567890.123456BD),
  (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, CAST('1e-300' AS DOUBLE), -0.5BD)
  AS t(a, b, c, d, e, f, g, h, i, j, k, l, m, n)"""


def _same(x, y) -> bool:
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    return x == y and type(x) is type(y)


def _same_rows(got, want) -> bool:
    """The same rows in the same order, value for value (NaN equal to NaN)."""
    return len(got) == len(want) and all(all(_same(g, w) for g, w in zip(gr, wr)) for gr, wr in zip(got, want))


@pytest.fixture
def ivm(spark, fresh_db):
    spark_ivm.enable(spark)
    yield spark


def test_literals_read_back_as_the_values_spark_computed(ivm):
    spark = ivm
    df = spark.sql(VALUES)
    columns = [Column(f.name, f.dataType.simpleString()) for f in df.schema.fields]
    assert all(inlinable(c.type_sql) for c in columns)
    raw = [tuple(r) for r in df.selectExpr(*(f"{c.raw(c.name)} AS {c.name}" for c in columns)).collect()]
    spark.sql(f"CREATE VIEW inline_values AS {values_sql(raw, columns)}")
    back = spark.table("inline_values")
    assert [(f.name, f.dataType.simpleString()) for f in back.schema.fields] == \
           [(c.name, c.type_sql) for c in columns]
    for got, want in zip(back.collect(), df.collect()):
        assert all(_same(g, w) for g, w in zip(got, want)), (got, want)


def test_maps_carried_in_a_comment_read_back_even_with_comment_marks_in_strings(ivm):
    spark = ivm
    columns = [Column("map_id", "int"), Column("k_s", "string"), Column("v_bigint", "bigint")]
    maps = [(0, "a */ b /* c", 3), (1, None, -2)]
    from spark_ivm.runtime.viewsql import _BEGIN, _END, _values

    text = f"SELECT {_BEGIN}{_values(maps, columns, '__maps', in_comment=True)}{_END} 1 AS one"
    spark.sql(f"CREATE VIEW carrying AS {text}")
    assert [tuple(r) for r in spark.table("carrying").collect()] == [(1,)]
    stored = spark._jsparkSession.sessionState().catalog().getTableMetadata(
        spark._jsparkSession.sessionState().sqlParser().parseTableIdentifier("carrying")).viewText().get()
    assert [tuple(r) for r in spark.sql(held_maps_sql(stored)).collect()] == maps


def test_maps_add_their_increments_and_drop_keys_that_reach_zero():
    columns = [Column("map_id", "int"), Column("k_g", "string"), Column("v_bigint", "bigint"),
               Column("v_decimal_38_2", "decimal(38,2)")]
    from decimal import Decimal

    held = [(0, "a", 2, None), (0, None, 1, None), (1, "a", None, Decimal("99999999999999999999999999999999999.99"))]
    increments = [(0, "a", -2, None), (0, "b", 5, None), (1, "a", None, Decimal("0.01")), (1, "a", None, Decimal("-0.01"))]
    assert merged_maps(held, increments, columns) == [
        (0, "b", 5, None), (0, None, 1, None), (1, "a", None, Decimal("99999999999999999999999999999999999.99"))]


# Views kept as literals whose rows are sorted, limited and filtered: NULLs first and last, NaN and the
# infinities, -0.0, strings of mixed case and beyond ASCII, dates, booleans, decimals, an expression.
SORTED_VIEWS = {
    "by_sum_desc": "SELECT g, SUM(x) AS sx, COUNT(*) AS n FROM t GROUP BY g ORDER BY sx DESC NULLS FIRST, g",
    "by_sum_asc": "SELECT g, SUM(x) AS sx, COUNT(*) AS n FROM t GROUP BY g ORDER BY sx, g DESC",
    "top_averages": "SELECT g, AVG(d) AS ad, SUM(k) AS sk FROM t GROUP BY g HAVING COUNT(*) > 0 "
                    "ORDER BY ad NULLS LAST, g DESC LIMIT 3",
    "by_expression": "SELECT k, SUM(d) * 2 AS s2 FROM t GROUP BY k ORDER BY k + 1 DESC",
    "by_date_flag": "SELECT dt, b, COUNT(*) AS n FROM t GROUP BY dt, b ORDER BY dt DESC, b",
    "totals": "SELECT SUM(x) AS sx, AVG(d) AS ad, COUNT(k) AS ck FROM t",
}
SORTED_BATCHES = [
    "INSERT INTO t VALUES ('a', 5, CAST('NaN' AS DOUBLE), 1.10, DATE '2018-01-01', true), "
    "('c', NULL, NULL, NULL, NULL, NULL), (NULL, 7, 3.5, 9.99, DATE '2018-01-01', false)",
    "DELETE FROM t WHERE g = 'b' OR g IS NULL",
]


def test_rows_over_literals_are_sorted_and_limited_as_spark_does_without_a_job(ivm):
    spark = ivm
    spark.sql("CREATE TABLE t (g STRING, k INT, x DOUBLE, d DECIMAL(10,2), dt DATE, b BOOLEAN) USING delta")
    spark.sql("INSERT INTO t VALUES ('a', 1, 1.5, 2.25, DATE '2020-01-01', true), "
              "(NULL, 2, CAST('NaN' AS DOUBLE), NULL, NULL, NULL), ('b', NULL, -0.0, 3.10, DATE '2019-05-01', false), "
              "('é', 3, NULL, 1.00, DATE '2021-01-01', true), ('Z', 3, 2.0, -1.5, NULL, false), "
              "('ab', 4, CAST('-Infinity' AS DOUBLE), 0, DATE '2020-01-01', NULL)")
    for name, query in SORTED_VIEWS.items():
        spark.sql(f"CREATE INCREMENTAL VIEW {name} AS {query}")
    engine = spark._spark_ivm_engine
    forms = ViewForms(spark, DeltaLogs(spark))
    for batch in [None] + SORTED_BATCHES:
        if batch:
            spark.sql(batch)
            for name in SORTED_VIEWS:  # not REFRESH INCREMENTAL VIEWS: that looks at every view of the session
                spark.sql(f"REFRESH INCREMENTAL VIEW {name}").collect()
        for name, query in SORTED_VIEWS.items():
            want, got = spark.sql(query).collect(), spark.table(name).collect()
            assert _same_rows(got, want), (name, got, want)
            # The same rows, in order, computed from the maps' literals while Spark plans: no job.
            entry = engine.entry(name)
            maps = [tuple(r) for r in spark.sql(held_maps_sql(forms.current(name)["text"])).collect()]
            sc = spark.sparkContext
            sc.setJobGroup(f"literals_{name}", "rows over literals")
            try:
                rows = forms._rows_over_literals(entry, maps)
            finally:
                sc.setLocalProperty("spark.jobGroup.id", None)
            assert sc.statusTracker().getJobIdsForGroup(f"literals_{name}") == []
            raw = spark.sql(f"SELECT * FROM {name}").collect()
            assert rows is not None and _same_rows(rows, raw), (name, rows, raw)


def test_rows_sorted_here_put_nulls_and_nan_where_spark_does():
    class Query:
        order_by = ("`x` DESC", "`s` NULLS LAST")
        limit = 4

    class Entry:
        class plan:
            query = Query

    rows = [(1, 2.0, "b"), (2, float("nan"), None), (3, None, "a"), (4, 2.0, None), (5, -math.inf, "é"),
            (6, 2.0, "B")]
    keyed = [r + (r[1], r[2]) for r in rows]  # the sort keys follow the view's columns
    # DESC puts NULLs last and NaN first; ties on x go by s ascending, NULLs last, by code point.
    assert sorted_rows(Entry, keyed, ["double", "string"]) == [rows[1], rows[5], rows[0], rows[3]]
    assert sorted_rows(Entry, keyed, ["timestamp", "string"]) is None  # a sort left to Spark
