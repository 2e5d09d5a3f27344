"""The user's view kept as literals (runtime/viewsql.py): values of every type the inline form allows read back
from the view exactly as Spark computed them, and a definition too long for the metastore is never tried."""

from __future__ import annotations

import math

import pytest

import spark_ivm
from spark_ivm.runtime.viewsql import Column, held_maps_sql, inlinable, merged_maps, values_sql

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
