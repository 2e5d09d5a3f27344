"""Spark's division on the driver (runtime/division.py): Spark's types of the runtime's SQL, the exact
quotient, and statements that divide computed by DuckDB to Spark's own result, value for value, on random
decimals with NULLs, zero divisors, quotients half-way between two results, and quotients that do not fit."""

import random
from decimal import Decimal

import pyarrow as pa
import pytest
from sqlglot import exp

from spark_ivm.runtime import division
from spark_ivm.runtime.division import DOUBLE, Division, SparkType, arithmetic, decimal, exact_divisions
from spark_ivm.runtime.local_sql import DriverStatements

pytest.importorskip("duckdb")

INT, BIGINT = SparkType("int"), SparkType("bigint")


@pytest.mark.parametrize("op, a, b, result", [
    (exp.SafeDivide, decimal(38, 2), decimal(20, 0), decimal(38, 6)),  # precision lost: 6 places kept
    (exp.SafeDivide, decimal(15, 2), decimal(15, 2), decimal(33, 18)),
    (exp.SafeDivide, decimal(15, 2), decimal(1, 0), decimal(19, 6)),
    (exp.SafeDivide, BIGINT, INT, DOUBLE),  # integers divide as doubles
    (exp.SafeDivide, decimal(38, 2), BIGINT, decimal(38, 6)),  # a bigint is a decimal(20, 0)
    (exp.Mul, decimal(1, 1), decimal(38, 6), decimal(38, 6)),
    (exp.Mul, decimal(15, 2), decimal(16, 2), decimal(32, 4)),
    (exp.Add, decimal(38, 2), INT, decimal(38, 2)),
    (exp.Sub, decimal(10, 4), decimal(38, 0), decimal(38, 4)),  # 43 digits: the places kept, up to 6
    (exp.Mul, BIGINT, INT, BIGINT),
])
def test_arithmetic_takes_sparks_result_types(op, a, b, result):
    assert arithmetic(op, a, b) == result


@pytest.mark.parametrize("a, b, result", [
    (Decimal("1.00"), 32, Decimal("0.031250")),
    (Decimal("0.01"), 32, Decimal("0.000313")),  # 0.0003125: half way, rounded up
    (Decimal("-0.01"), 32, Decimal("-0.000313")),  # and away from zero below it
    (Decimal("0.01"), 3, Decimal("0.003333")),
    (Decimal("5"), 0, None),  # try_divide: NULL for a zero divisor
    (None, 3, None),
    (Decimal("1E+33"), 1, None),  # does not fit decimal(38, 6): NULL
])
def test_decimal_quotients_are_exact_and_rounded_half_up(a, b, result):
    assert Division(decimal(38, 2), decimal(20, 0), decimal(38, 6)).quotient(a, b) == result


@pytest.mark.parametrize("types", [
    (decimal(38, 2), decimal(20, 0), decimal(38, 6)),
    (decimal(15, 2), decimal(10, 0), decimal(8, 6)),  # quotients that do not fit: NULL
    (decimal(15, 4), decimal(15, 2), decimal(33, 18)),  # 10^16 times the dividend: past 64 bits, one by one
])
def test_quotients_of_whole_columns_are_those_of_each_pair(types):
    """A column is divided in 64-bit integers where every value and intermediate result fits them."""
    rng = random.Random(7)
    left, right, result = types
    division = Division(left, right, result)

    def value(t):
        return Decimal(f"{rng.randint(-10 ** 7, 10 ** 7) // 10 ** rng.randint(0, 6)}E-{t.scale}")

    def column(t, count):
        return pa.array([None if rng.random() < 0.1 else value(t) for _ in range(count)],
                        pa.decimal128(t.precision, t.scale)).slice(3)

    a, b = column(left, 2003), column(right, 2003)
    expected = [division.quotient(x, y) for x, y in zip(a.to_pylist(), b.to_pylist())]
    assert division._divide(a, b).to_pylist() == expected
    assert any(q is None for q, x, y in zip(expected, a.to_pylist(), b.to_pylist()) if x is not None and y)  \
        == (result.precision == 8)


def test_a_statement_that_divides_is_rewritten_with_sparks_types():
    views = {"v": pa.schema([("k", pa.int64()), ("q", pa.decimal128(15, 2)), ("x", pa.decimal128(36, 2)),
                             ("n", pa.int64())])}
    keys = ", ".join(str(k) for k in range(0, 3000, 3))  # a key condition's list, set aside while rewriting
    sql, functions = exact_divisions(
        f"SELECT k FROM (SELECT k, q, SUM(x) OVER (PARTITION BY k) AS s, n FROM v WHERE k IN ({keys})) AS t "
        "WHERE t.q < (0.2BD * try_divide(COALESCE(t.s, 0), t.n))", views)
    assert f"k IN ({keys})" in sql
    assert functions == [Division(decimal(38, 2), decimal(20, 0), decimal(38, 6))]
    call = f"{functions[0].name}(CAST(COALESCE(t.s, 0) AS DECIMAL(38, 2)), CAST(t.n AS DECIMAL(20, 0)))"
    assert call.upper() in sql.upper()
    # The product has 7 places exactly; Spark keeps 6, rounding half up, and so does the cast.
    assert "AS DECIMAL(38, 6))" in sql


@pytest.mark.parametrize("sql", [
    "SELECT try_divide(x, n) FROM w",  # a view the driver does not hold
    "SELECT try_divide(x, f) FROM v",  # a decimal divided as a double
    "SELECT try_divide(upper(s), n) FROM v",  # a function whose type is not derived here
    "SELECT try_divide(x, m) FROM v",  # no such column
])
def test_what_is_not_typed_here_is_left_to_spark(sql):
    views = {"v": pa.schema([("x", pa.decimal128(15, 2)), ("n", pa.int64()), ("f", pa.float64()), ("s", pa.string())])}
    assert exact_divisions(sql, views) is None


def _random_table(seed: int, rows: int = 400) -> pa.Table:
    rng = random.Random(seed)

    def value(scale: str, magnitude: int):
        if rng.random() < 0.1:
            return None
        digits = rng.choice([1, 2, 3, magnitude])
        return Decimal(f"{rng.randint(-10 ** digits, 10 ** digits)}E-{scale}")

    divisors = [None, 0, 1, 2, 3, 7, 16, 32, 64, 125, 1000, -8, 10 ** 12 + 1]
    return pa.table({
        "k": pa.array([rng.randint(1, 12) for _ in range(rows)], pa.int64()),
        "a": pa.array([value("2", 12) for _ in range(rows)], pa.decimal128(15, 2)),
        "b": pa.array([value("2", 33) if rng.random() < 0.05 else value("2", 8) for _ in range(rows)],
                      pa.decimal128(36, 2)),
        "n": pa.array([rng.choice(divisors) for _ in range(rows)], pa.int64()),
        "i": pa.array([rng.choice(divisors[:-1]) for _ in range(rows)], pa.int32()),
        "q": pa.array([value("2", 4) for _ in range(rows)], pa.decimal128(15, 2)),
    })


STATEMENTS = [
    "SELECT k, try_divide(COALESCE(SUM(b), 0), COALESCE(SUM(n), 0)) AS r FROM __ivm_t_0 GROUP BY k",
    "SELECT k FROM __ivm_t_0 GROUP BY k HAVING SUM(q) < (0.2BD * try_divide(SUM(a), SUM(n)))",  # 14 places
    "SELECT a, n, try_divide(a, 3) AS r FROM __ivm_t_0",
    "SELECT n, i, try_divide(n, i) AS r FROM __ivm_t_0",
    "SELECT a, b, n FROM __ivm_t_0 WHERE a > try_divide(b, n)",
    "SELECT a, q, n FROM __ivm_t_0 WHERE q < (0.2BD * try_divide(a, n))",
    "SELECT q, n FROM __ivm_t_0 WHERE try_divide((q * q), n) > q",  # a quotient of 11 places, compared
    "SELECT b, n, try_divide((b * -1), n) AS r FROM __ivm_t_0",
    "SELECT b, try_divide(b, 0.001BD) AS r FROM __ivm_t_0",  # quotients past decimal(38, 6): NULL
    "SELECT k, (SUM(b) / NULLIF(SUM(n), 0)) AS r, CAST((SUM(n) / NULLIF(SUM(i), 0)) AS double) AS d "
    "FROM __ivm_t_0 GROUP BY k",  # `/`, as a view's AVG
    "SELECT x, y, try_divide(x, y) AS r FROM (SELECT b AS x, n AS y FROM __ivm_t_0 "
    "UNION ALL SELECT a, i FROM __ivm_t_0) AS u",
    "SELECT t.k, try_divide(COALESCE(s.total, 0), COALESCE(s.c, 0)) AS r FROM __ivm_t_0 AS t "
    "LEFT JOIN (SELECT k, SUM((a * q)) AS total, COUNT(*) AS c FROM __ivm_t_0 GROUP BY k) AS s ON t.k <=> s.k",
]


@pytest.mark.parametrize("seed", [1, 2])
def test_statements_that_divide_give_sparks_result_in_duckdb(spark, seed):
    from pyspark.sql.pandas.types import from_arrow_schema

    table = _random_table(seed)
    spark.createDataFrame(table.to_pylist(), from_arrow_schema(table.schema)).createOrReplaceTempView("__ivm_t_0")
    driver = DriverStatements("__ivm_t_", divides=lambda: division.rules_hold(spark))
    driver.hold("__ivm_t_0", table)
    try:
        for sql in STATEMENTS:
            computed = driver.compute(sql)
            assert computed is not None, f"not computed on the driver: {sql}"
            rows, schema = computed
            expected = spark.sql(sql)
            assert [f.dataType for f in schema] == [f.dataType for f in expected.schema], sql
            key = lambda row: tuple((v is None, str(v)) for v in row)  # noqa: E731
            actual = sorted((tuple(r.values()) for r in rows.to_pylist()), key=key)
            assert actual == sorted((tuple(r) for r in expected.collect()), key=key), sql
        # `/` by zero, or to a quotient that does not fit, fails under ANSI: Spark computes those.
        assert driver.compute("SELECT (b / n) AS r FROM __ivm_t_0") is None
        assert driver.compute("SELECT (b / 0.001BD) AS r FROM __ivm_t_0") is None
        # A result of more than 6 places is left to Spark (see local_sql.spark_types).
        assert driver.compute("SELECT k, try_divide(SUM(a), SUM(n)) AS r FROM __ivm_t_0 GROUP BY k") is None
    finally:
        driver.close()
        spark.catalog.dropTempView("__ivm_t_0")


EXPRESSIONS = ["q * -1", "q * 3", "q * i", "q + 1", "(q - a)", "-q", "abs(q)", "COALESCE(q, 0)", "NULLIF(q, 0)",
               "CASE WHEN n > 0 THEN q ELSE 0 END", "CASE WHEN n > 0 THEN n ELSE i END", "0.2BD * q", "1.50",
               "try_divide(q, 3)", "try_divide(a, q)", "try_divide(b, n)", "try_divide(n, i)", "try_divide(q * q, n)",
               "0.2BD * try_divide(b, n)", "try_divide(COALESCE(b, 0), COALESCE(n, 0)) + q", "n * i", "i + 1",
               "q / n", "n / NULLIF(i, 0)", "b / 0.001BD"]


def test_types_derived_are_those_of_sparks_analysis(spark):
    """Spark's analyzer (no job) is the reference for every type the rewrite relies on."""
    import sqlglot

    from pyspark.sql.pandas.types import from_arrow_schema
    from spark_ivm.runtime.division import Typer, spark_type

    table = _random_table(3, rows=5)
    spark.createDataFrame([], from_arrow_schema(table.schema)).createOrReplaceTempView("__ivm_t_0")
    columns = {"__ivm_t_0": {f.name: spark_type(f.type) for f in table.schema}}
    try:
        for expression in EXPRESSIONS + [f"SUM({e})" for e in ("q", "n", "i", "q * q")]:
            sql = f"SELECT {expression} AS r FROM __ivm_t_0"
            derived = Typer(columns).type(sqlglot.parse_one(sql, read="spark").expressions[0].this)
            assert derived.sql() == spark.sql(sql).schema["r"].dataType.simpleString(), expression
    finally:
        spark.catalog.dropTempView("__ivm_t_0")
