"""Spark's division, to the last digit, in statements the driver computes in DuckDB (see local_sql).

A statement that divides (`try_divide`, the calculus's `/`; `/` in a view's AVG) may run in DuckDB only
where every value it computes is Spark's. Spark divides decimals to a decimal whose precision and scale follow from its
operands' (rounded half up, NULL where the quotient does not fit), and rounds a sum or product whose exact
digits do not fit its type; DuckDB divides decimals to a double and keeps a product's every digit. So the
statement's types are derived here as Spark's analyzer derives them: from the types of the views the driver
holds, by Spark's rules for the forms the runtime writes. Any other form, or a setting that changes the
rules, leaves the statement to Spark.

The statement is then rewritten, still in Spark's SQL, for local_sql's translation:
- each division calls a DuckDB function (`Division`) with Spark's operand and result types, which computes
  the quotient exactly (integers, not floating point) and rounds it as Spark does (for `/`, a zero divisor
  or a quotient that does not fit fails the statement, which Spark then computes, failing under ANSI);
- each sum, difference or product whose Spark type has fewer decimal places than its exact result is cast
  to that type, which DuckDB rounds as Spark does (half away from zero).
Elsewhere both engines compute decimals exactly, with the same scale, so their values agree.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

DIVIDE_PREFIX = "__ivm_divide_"
MAX_PRECISION = 38
MINIMUM_ADJUSTED_SCALE = 6  # Spark keeps at least this many decimal places when a result loses precision
_INTEGRAL_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}


# The settings under which the rules here are Spark's (their defaults).
RULES = {"spark.sql.decimalOperations.allowPrecisionLoss": "true",
         "spark.sql.legacy.literal.pickMinimumPrecision": "true"}


def rules_hold(spark) -> bool:
    """Whether the session's settings leave Spark's arithmetic as derived here."""
    return all(str(spark.conf.get(key, default)).lower() == default for key, default in RULES.items())


@dataclass(frozen=True)
class SparkType:
    name: str  # decimal, bigint, int, smallint, tinyint, double, float, boolean, string, date, void
    precision: int = 0
    scale: int = 0

    def sql(self) -> str:
        return f"decimal({self.precision},{self.scale})" if self.name == "decimal" else self.name

    @property
    def integral(self) -> bool:
        return self.name in _INTEGRAL_DIGITS

    @property
    def numeric(self) -> bool:
        return self.integral or self.name in ("decimal", "double")

    def as_decimal(self) -> SparkType:
        return self if self.name == "decimal" else decimal(_INTEGRAL_DIGITS[self.name], 0)


def decimal(precision: int, scale: int) -> SparkType:
    return SparkType("decimal", precision, scale)


BIGINT, DOUBLE, BOOLEAN, VOID = SparkType("bigint"), SparkType("double"), SparkType("boolean"), SparkType("void")


class Untyped(Exception):
    """A form whose Spark type is not derived here."""


def adjusted(precision: int, scale: int) -> SparkType:
    """Spark's result type for an arithmetic result of `precision` digits: past 38, the integer digits are
    kept and the scale gives way, down to 6 places (DecimalType.adjustPrecisionScale)."""
    if precision <= MAX_PRECISION:
        return decimal(precision, scale)
    integer_digits = precision - scale
    return decimal(MAX_PRECISION, max(MAX_PRECISION - integer_digits, min(scale, MINIMUM_ADJUSTED_SCALE)))


def bounded(precision: int, scale: int) -> SparkType:
    return decimal(min(precision, MAX_PRECISION), min(scale, MAX_PRECISION))


def wider(a: SparkType, b: SparkType) -> SparkType:
    """The type two values of types a and b share in a union, COALESCE or CASE. (float, 32 bits, is not
    numeric here: the runtime's SQL has none, and its rules add cases.)"""
    if a == b or b == VOID:
        return a
    if a == VOID:
        return b
    if not (a.numeric and b.numeric):
        raise Untyped(f"{a.sql()} and {b.sql()}")
    if DOUBLE in (a, b):
        return DOUBLE
    if a.integral and b.integral:
        return max(a, b, key=lambda t: _INTEGRAL_DIGITS[t.name])
    a, b = a.as_decimal(), b.as_decimal()
    scale = max(a.scale, b.scale)
    return bounded(max(a.precision - a.scale, b.precision - b.scale) + scale, scale)


def arithmetic(op: type, a: SparkType, b: SparkType) -> SparkType:
    """Spark's type of `a op b` for +, -, * and try_divide (exp.Add, exp.Sub, exp.Mul, exp.SafeDivide)."""
    if not (a.numeric and b.numeric):
        raise Untyped(f"{op.__name__} of {a.sql()} and {b.sql()}")
    if DOUBLE in (a, b) or (op is exp.SafeDivide and a.integral and b.integral):
        return DOUBLE
    if a.integral and b.integral:
        return wider(a, b)
    a, b = a.as_decimal(), b.as_decimal()
    p1, s1, p2, s2 = a.precision, a.scale, b.precision, b.scale
    if op is exp.Mul:
        return adjusted(p1 + p2 + 1, s1 + s2)
    if op is exp.SafeDivide:
        scale = max(MINIMUM_ADJUSTED_SCALE, s1 + p2 + 1)
        return adjusted(p1 - s1 + s2 + scale, scale)
    scale = max(s1, s2)
    return adjusted(max(p1 - s1, p2 - s2) + scale + 1, scale)


def exact_scale(op: type, a: SparkType, b: SparkType) -> int:
    """The scale of the exact result of `a op b` (+, -, *) on decimals of those scales."""
    return a.scale + b.scale if op is exp.Mul else max(a.scale, b.scale)


def spark_type(t: pa.DataType) -> SparkType:
    """Spark's type of a column the driver holds as Arrow."""
    if pa.types.is_decimal(t):
        return decimal(t.precision, t.scale)
    for test, name in ((pa.types.is_int64, "bigint"), (pa.types.is_int32, "int"), (pa.types.is_int16, "smallint"),
                       (pa.types.is_int8, "tinyint"), (pa.types.is_float64, "double"), (pa.types.is_float32, "float"),
                       (pa.types.is_boolean, "boolean"), (pa.types.is_string, "string"),
                       (pa.types.is_large_string, "string"), (pa.types.is_date32, "date"), (pa.types.is_null, "void")):
        if test(t):
            return SparkType(name)
    raise Untyped(str(t))


_T = exp.DataType.Type
_DECLARED = {_T.BIGINT: "bigint", _T.INT: "int", _T.SMALLINT: "smallint", _T.TINYINT: "tinyint", _T.DOUBLE: "double",
             _T.FLOAT: "float", _T.BOOLEAN: "boolean", _T.TEXT: "string", _T.VARCHAR: "string", _T.DATE: "date"}


def declared(t: exp.DataType) -> SparkType:
    """The type named by a CAST."""
    if t.this == _T.DECIMAL:
        params = [int(p.name) for p in t.expressions]
        return decimal(*(params + [10, 0][len(params):]))
    if t.this in _DECLARED:
        return SparkType(_DECLARED[t.this])
    raise Untyped(t.sql("spark"))


def _literal_digits(node: exp.Expression) -> int | None:
    """The digits of an integer literal (Spark types one met by a decimal in arithmetic as a decimal of
    exactly those digits), or None for any other expression."""
    if isinstance(node, exp.Neg):
        node = node.this
    if isinstance(node, exp.Literal) and not node.is_string and node.name.isdigit():
        return len(node.name.lstrip("0") or "0")
    return None


_BOOLEAN = (exp.Predicate, exp.Connector, exp.Not)
_SAME_AS_OPERAND = (exp.Paren, exp.Neg, exp.Abs, exp.Min, exp.Max, exp.Nullif)


class Typer:
    """Spark's types of a statement's expressions (a sqlglot tree of Spark's SQL), given the Spark types of
    the views it reads, by the rules of Spark's analyzer with decimal precision loss allowed."""

    def __init__(self, views: dict[str, dict[str, SparkType]]):
        self.views = {name.lower(): {c.lower(): t for c, t in columns.items()} for name, columns in views.items()}
        self._types: dict[int, SparkType] = {}

    def type(self, node: exp.Expression) -> SparkType:
        key = id(node)
        if key not in self._types:
            self._types[key] = self._derive(node)
        return self._types[key]

    def _derive(self, node: exp.Expression) -> SparkType:
        if isinstance(node, exp.Column):
            return self._column(node)
        if isinstance(node, _SAME_AS_OPERAND):
            return self.type(node.this)
        if isinstance(node, (exp.Cast, exp.TryCast)):
            return declared(node.to)
        if isinstance(node, exp.Literal):
            return self._literal(node)
        if isinstance(node, exp.Null):
            return VOID
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.SafeDivide, exp.Div)):
            return arithmetic(exp.SafeDivide if isinstance(node, exp.Div) else type(node), *self.operands(node))
        if isinstance(node, (exp.Coalesce, exp.Case)):
            if isinstance(node, exp.Coalesce):
                values = [node.this, *node.expressions]
            else:
                values = [i.args["true"] for i in node.args["ifs"]] + [d for d in [node.args.get("default")] if d]
            result = VOID
            for value in values:
                result = wider(result, self.type(value))
            return result
        if isinstance(node, exp.Window):
            return self.type(node.this)
        if isinstance(node, exp.Sum):
            t = self.type(node.this)
            if t.name == "decimal":
                return bounded(t.precision + 10, t.scale)
            if t.integral:
                return BIGINT
            if t == DOUBLE:
                return DOUBLE
            raise Untyped(f"SUM of {t.sql()}")
        if isinstance(node, exp.Count):
            return BIGINT
        if isinstance(node, _BOOLEAN):
            return BOOLEAN
        raise Untyped(type(node).__name__)

    def operands(self, node: exp.Binary) -> tuple[SparkType, SparkType]:
        """The operands' types as Spark's arithmetic sees them: an integer literal met by a decimal is a decimal
        of its own digits (spark.sql.legacy.literal.pickMinimumPrecision, on by default)."""
        a, b = self.type(node.this), self.type(node.expression)
        digits_a, digits_b = _literal_digits(node.this), _literal_digits(node.expression)
        if digits_a is not None and b.name == "decimal" and a.integral:
            a = decimal(digits_a, 0)
        if digits_b is not None and a.name == "decimal" and b.integral:
            b = decimal(digits_b, 0)
        return a, b

    @staticmethod
    def _literal(node: exp.Literal) -> SparkType:
        if node.is_string:
            return SparkType("string")
        text = node.name
        if text.isdigit():
            value = int(text)
            return SparkType("int") if value < 2 ** 31 else BIGINT if value < 2 ** 63 else decimal(len(text), 0)
        whole, _, fraction = text.partition(".")
        if whole.isdigit() and fraction.isdigit():
            digits = (whole + fraction).lstrip("0")
            return decimal(max(len(digits), len(fraction)), len(fraction))
        raise Untyped(text)

    def _column(self, column: exp.Column) -> SparkType:
        select = column.find_ancestor(exp.Select)
        if select is None:
            raise Untyped(column.sql("spark"))
        name, table = column.name.lower(), column.table.lower()
        found = [item for alias, source in self._sources(select) if not table or alias == table
                 for output, item in self._outputs(source) if output == name]
        if len(found) != 1:
            raise Untyped(column.sql("spark"))
        return self._resolve(found[0])

    def _resolve(self, item) -> SparkType:
        if isinstance(item, SparkType):
            return item
        if isinstance(item, tuple):  # the same column of each branch of a union, or row of a stack
            result = VOID
            for part in item:
                result = wider(result, self._resolve(part))
            return result
        return self.type(item)

    @staticmethod
    def _sources(select: exp.Select) -> list[tuple[str, exp.Expression]]:
        from_ = select.args.get("from_") or select.args.get("from")
        sources = ([from_.this] if from_ else []) + [j.this for j in select.args.get("joins") or []]
        return [(s.alias_or_name.lower(), s) for s in sources]

    def _outputs(self, source: exp.Expression) -> list[tuple[str | None, object]]:
        """(name, item) of each column a FROM source or query gives, in order; an item is a SparkType, an
        expression, or a tuple of items whose types are widened together."""
        if isinstance(source, exp.Table):
            columns = self.views.get(source.name.lower())
            if columns is None:
                raise Untyped(source.name)
            outputs = list(columns.items())
        elif isinstance(source, exp.Subquery):
            outputs = self._outputs(source.this)
        elif isinstance(source, exp.Union) and not source.args.get("distinct"):
            left, right = self._outputs(source.this), self._outputs(source.expression)
            if len(left) != len(right):
                raise Untyped("union of different widths")
            outputs = [(name, (item, other)) for (name, item), (_, other) in zip(left, right)]
        elif isinstance(source, exp.Select):
            outputs = [o for projection in source.expressions for o in self._projected(source, projection)]
        else:
            raise Untyped(type(source).__name__)
        alias = source.args.get("alias")
        renamed = [c.name.lower() for c in alias.columns] if isinstance(alias, exp.TableAlias) else []
        if renamed:
            if len(renamed) != len(outputs):
                raise Untyped("aliased columns")
            outputs = [(name, item) for name, (_, item) in zip(renamed, outputs)]
        return outputs

    def _projected(self, select: exp.Select, projection: exp.Expression) -> list[tuple[str | None, object]]:
        if isinstance(projection, exp.Star):
            return [o for _, source in self._sources(select) for o in self._outputs(source)]
        if isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star):
            table = projection.table.lower()
            return [o for alias, source in self._sources(select) if alias == table for o in self._outputs(source)]
        if isinstance(projection, exp.Aliases) and isinstance(projection.this, exp.Stack):
            names = [a.name.lower() for a in projection.expressions]
            values = projection.this.expressions
            width = len(names)
            return [(name, tuple(values[i::width])) for i, name in enumerate(names)]
        if isinstance(projection, exp.Alias):
            return [(projection.alias.lower(), projection.this)]
        if isinstance(projection, exp.Column):
            return [(projection.name.lower(), projection)]
        return [(None, projection)]


class DivisionError(ValueError):
    """A zero divisor or a quotient that does not fit, where Spark's `/` may fail (under ANSI): the
    statement fails in DuckDB and Spark computes it."""


@dataclass(frozen=True)
class Division:
    """A DuckDB function dividing values of Spark's types `left` and `right` as Spark's try_divide does: NULL
    for a zero divisor or a quotient that does not fit (or, `strict`, for `/`, DivisionError); a decimal
    quotient computed exactly and rounded half up to the result's scale; otherwise both operands as doubles."""
    left: SparkType
    right: SparkType
    result: SparkType
    strict: bool = False

    @property
    def name(self) -> str:
        parts = (t.sql().replace("(", "_").replace(",", "_").rstrip(")") for t in (self.left, self.right, self.result))
        return DIVIDE_PREFIX + ("strict_" if self.strict else "") + "__".join(parts)

    def register(self, db) -> None:
        import duckdb
        db.create_function(self.name, self._divide, [duckdb.sqltype(_duckdb_name(t)) for t in (self.left, self.right)],
                           duckdb.sqltype(_duckdb_name(self.result)), type="arrow", null_handling="special")

    def _divide(self, left, right) -> pa.Array:
        left, right = (a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in (left, right))
        if self.result == DOUBLE:
            divisor = pc.cast(right, pa.float64())
            zero = pc.equal(divisor, 0)
            if self.strict and pc.any(zero).as_py():
                raise DivisionError("division by zero")
            return pc.if_else(zero, None, pc.divide(pc.cast(left, pa.float64()), divisor))
        quotients = _decimal_quotients(left, right, self.result)
        if quotients is None:
            quotients = pa.array([self.quotient(a, b) for a, b in zip(left.to_pylist(), right.to_pylist())],
                                 _arrow_type(self.result))
        if self.strict and quotients.null_count > pc.sum(pc.or_(left.is_null(), right.is_null())).as_py():
            raise DivisionError("division by zero, or a quotient that does not fit")
        return quotients

    def quotient(self, a, b):
        if a is None or b is None or b == 0:
            return None
        if self.result == DOUBLE:
            return float(a) / float(b)
        exact = Fraction(a) / Fraction(b) * 10 ** self.result.scale
        rounded = (2 * abs(exact.numerator) + exact.denominator) // (2 * exact.denominator)  # half away from zero
        if rounded >= 10 ** self.result.precision:
            return None
        return Decimal(f"{'-' if exact < 0 else ''}{rounded}E-{self.result.scale}")  # exact: no context rounds it


_INT64_HALF = 2 ** 62


def _decimal_quotients(left: pa.Array, right: pa.Array, result: SparkType) -> pa.Array | None:
    """Division.quotient of each pair of decimals, in 64-bit integers (numpy), or None where a value or an
    intermediate result might not fit them (then Division.quotient computes them one by one)."""
    x, y = _unscaled(left), _unscaled(right)
    shift = result.scale + right.type.scale - left.type.scale  # quotient * 10^scale = x * 10^shift / y
    if x is None or y is None or abs(shift) > 18:
        return None
    largest = [max(abs(int(v.min(initial=0))), abs(int(v.max(initial=0)))) for v in (x, y)]
    n_max, d_max = largest[0] * 10 ** max(shift, 0), largest[1] * 10 ** max(-shift, 0)
    if 2 * n_max + d_max >= 2 ** 63 or 2 * d_max >= 2 ** 63:
        return None
    n, d = (x * 10 ** shift, y) if shift >= 0 else (x, y * 10 ** -shift)
    valid = ~(np.asarray(left.is_null()) | np.asarray(right.is_null()) | (d == 0))
    d = np.where(valid, d, 1)
    rounded = (2 * np.abs(n) + np.abs(d)) // (2 * np.abs(d))  # half away from zero
    if result.precision <= 18:  # beyond, any 64-bit quotient fits
        valid &= rounded < 10 ** result.precision
    signed = np.where((n < 0) != (d < 0), -rounded, rounded)
    words = np.empty((len(signed), 2), dtype=np.int64)
    words[:, 0], words[:, 1] = signed, signed >> 63  # 128-bit two's complement, little-endian
    return pa.Array.from_buffers(_arrow_type(result), len(signed),
                                 [pa.array(valid).buffers()[1], pa.py_buffer(words.tobytes())])


def _unscaled(values: pa.Array):
    """The unscaled integers of a decimal128 array as int64 (NULLs as 0), or None where one does not fit."""
    values = values.fill_null(0) if values.null_count else values
    words = np.frombuffer(values.buffers()[1], dtype=np.int64)[2 * values.offset:2 * (values.offset + len(values))]
    low, high = words[0::2], words[1::2]
    return low if np.array_equal(high, low >> 63) else None


def _duckdb_name(t: SparkType) -> str:
    return {"int": "INTEGER", "string": "VARCHAR"}.get(t.name, t.sql().upper())


def _arrow_type(t: SparkType) -> pa.DataType:
    return pa.decimal128(t.precision, t.scale) if t.name == "decimal" else pa.float64()


_ROUNDING = (exp.Add, exp.Sub, exp.Mul)
_LITERAL = r"-?\d+(?:\.\d+)?(?:BD|L)?"
_LITERAL_LIST = re.compile(rf"\bIN \(((?:{_LITERAL}, ){{8,}}{_LITERAL})\)")
_LIST_PREFIX = "__ivm_list_"


def exact_divisions(spark_sql: str, views: dict[str, pa.Schema]) -> tuple[str, list[Division]] | None:
    """The statement with its divisions and Spark's roundings written out (see the module's doc), in Spark's
    SQL, and the functions it calls; None where a type is not derived here."""
    # A refresh's key conditions list up to thousands of values, which sqlglot would parse and print one by
    # one: each list stands aside as a name while the statement is rewritten.
    lists: list[str] = []

    def aside(m: re.Match) -> str:
        lists.append(m.group(1))
        return f"IN ({_LIST_PREFIX}{len(lists) - 1})"
    spark_sql = _LITERAL_LIST.sub(aside, spark_sql)
    try:
        tree = sqlglot.parse_one(spark_sql, read="spark")
        typer = Typer({v: {f.name: spark_type(f.type) for f in schema} for v, schema in views.items()})
        rewrites = []  # (node, Division or the type a rounding result is cast to)
        for node in tree.find_all(exp.SafeDivide, exp.Div, *_ROUNDING):
            result = typer.type(node)
            left, right = typer.operands(node)
            if isinstance(node, (exp.SafeDivide, exp.Div)):
                if result == DOUBLE and "decimal" in (left.name, right.name):
                    raise Untyped("a decimal divided as a double")  # Spark's conversion is not always exact
                if result != DOUBLE:
                    left, right = left.as_decimal(), right.as_decimal()
                rewrites.append((node, Division(left, right, result, strict=isinstance(node, exp.Div))))
            elif result.name == "decimal" and result.scale < exact_scale(type(node), left.as_decimal(),
                                                                           right.as_decimal()):
                rewrites.append((node, result))
    except (Untyped, sqlglot.errors.SqlglotError, KeyError, ValueError) as exc:
        logging.getLogger("spark_ivm").debug("division left to Spark: %s", exc)
        return None
    # Deepest first (find_all walks breadth first): each rewrite copies its operands with theirs done.
    for node, rewrite in reversed(rewrites):
        if isinstance(rewrite, Division):
            operands = [_cast(operand.copy(), t) for operand, t in ((node.this, rewrite.left),
                                                                    (node.expression, rewrite.right))]
            node.replace(exp.Anonymous(this=rewrite.name, expressions=operands))
        else:
            node.replace(_cast(exp.Paren(this=node.copy()), rewrite))
    functions = list({d.name: d for _, d in rewrites if isinstance(d, Division)}.values())
    rewritten = tree.sql(dialect="spark", copy=False)
    return re.sub(rf"\b{_LIST_PREFIX}(\d+)\b", lambda m: lists[int(m.group(1))], rewritten), functions


def _cast(node: exp.Expression, t: SparkType) -> exp.Cast:
    return exp.Cast(this=node, to=exp.DataType.build(t.sql(), dialect="spark"))
