"""Deterministic scalar functions the calculus may call, with their reference implementations.

Each entry maps a calculus function name to a Python implementation over plain values (None is SQL
NULL). The Spark runtime renders calls through `spark_sql`, a format string over the rendered
arguments. Every function here must be deterministic: the delta of a function call is 0.

Python functions declared with `@spark_ivm.udf` (spark_ivm.udfs) are entries too: their `impl` calls
the vectorized function on one-element pandas Series, their `spark_sql` calls the pandas UDF
registered on the session under the same name.
"""

from __future__ import annotations

import calendar
import datetime
import math
import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_UP, Decimal
from typing import Callable


@dataclass(frozen=True)
class Function:
    name: str
    impl: Callable[..., object]
    spark_sql: str  # e.g. "({0} + {1})", "upper({0})"; "{*}" means all arguments comma-joined
    null_propagating: bool = True  # returns NULL when any argument is NULL (checked before impl)


FUNCTIONS: dict[str, Function] = {}


def register(name: str, spark_sql: str, null_propagating: bool = True):
    def deco(impl):
        FUNCTIONS[name] = Function(name, impl, spark_sql, null_propagating)
        return impl

    return deco


def call(name: str, args: list[object]) -> object:
    try:
        f = FUNCTIONS[name]
    except KeyError:
        raise KeyError(f"no reference implementation of function {name!r}") from None
    if f.null_propagating and any(a is None for a in args):
        return None
    return f.impl(*args)


def _num(a, b):
    # Mixed Decimal/float arithmetic is not defined in Python; SQL promotes to double.
    if isinstance(a, Decimal) and isinstance(b, float):
        return float(a), b
    if isinstance(a, float) and isinstance(b, Decimal):
        return a, float(b)
    return a, b


register("+", "({0} + {1})")(lambda a, b: (lambda x, y: x + y)(*_num(a, b)))
register("-", "({0} - {1})")(lambda a, b: (lambda x, y: x - y)(*_num(a, b)))
register("*", "({0} * {1})")(lambda a, b: (lambda x, y: x * y)(*_num(a, b)))
register("neg", "(- {0})")(lambda a: -a)


@register("/", "try_divide({0}, {1})")  # NULL on division by zero, as the reference does
def _div(a, b):
    a, b = _num(a, b)
    if b == 0:
        return None
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return Decimal(a) / Decimal(b)
    return float(a) / float(b)


@register("%", "({0} % {1})")
def _mod(a, b):
    if b == 0:
        return None
    return math.fmod(a, b) if isinstance(a, float) or isinstance(b, float) else (abs(a) % abs(b)) * (1 if a >= 0 else -1)


register("||", "concat({0}, {1})")(lambda a, b: f"{a}{b}")
register("upper", "upper({0})")(lambda s: s.upper())
register("lower", "lower({0})")(lambda s: s.lower())
register("length", "length({0})")(lambda s: len(s))
register("abs", "abs({0})")(lambda x: abs(x))
register("year", "year({0})")(lambda d: d.year)
register("month", "month({0})")(lambda d: d.month)
register("day", "day({0})")(lambda d: d.day)


@register("substring", "substring({*})")
def _substring(s, pos, length=None):
    # SQL positions are 1-based; 0 behaves like 1 and negative counts from the end (Spark).
    start = pos - 1 if pos > 0 else (len(s) + pos if pos < 0 else 0)
    start = max(start, 0)
    return s[start:] if length is None else s[start:start + max(length, 0)]


def like_to_regex(pattern: str) -> str:
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return "".join(out)


@register("like", "({0} LIKE {1})")
def _like(s, pattern):
    return 1 if re.fullmatch(like_to_regex(pattern), s, flags=re.S) else 0


@register("coalesce", "coalesce({*})", null_propagating=False)
def _coalesce(*args):
    return next((a for a in args if a is not None), None)


@register("case", "CASE {case} END", null_propagating=False)
def _case(*args):
    """case(cond1, value1, cond2, value2, …, [else]): conditions are 0/1 values (NULL counts as 0)."""
    pairs, rest = args[: len(args) // 2 * 2], args[len(args) // 2 * 2:]
    for cond, value in zip(pairs[::2], pairs[1::2]):
        if cond:
            return value
    return rest[0] if rest else None


@register("date_add_days", "date_add({0}, {1})")
def _date_add_days(d, n):
    return d + datetime.timedelta(days=n)


# ---------------------------------------------------------------------------------------------------
# Functions the SQL front end translates Spark SQL into.


@register("in", "({0} IN ({rest}))", null_propagating=False)  # {rest}: arguments after the first
def _in(x, *values):
    """SQL's three-valued IN over a value list: NULL when x is NULL, or when nothing matches but a
    listed value is NULL."""
    if x is None:
        return None
    if any(v is not None and v == x for v in values):
        return 1
    return None if any(v is None for v in values) else 0


@register("ilike", "({0} ILIKE {1})")
def _ilike(s, pattern):
    return 1 if re.fullmatch(like_to_regex(pattern), s, flags=re.S | re.I) else 0


@register("rlike", "({0} RLIKE {1})")
def _rlike(s, pattern):
    return 1 if re.search(pattern, s) else 0


@register("div", "({0} div {1})")
def _int_div(a, b):
    if b == 0:
        return None
    quotient = abs(a) // abs(b)
    return int(quotient if (a >= 0) == (b >= 0) else -quotient)


def _spark_string(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, datetime.date):
        return value.isoformat()
    return str(value)


register("concat", "concat({*})")(lambda *parts: "".join(_spark_string(p) for p in parts))
register("trim", "trim({0})")(lambda s: s.strip(" "))
register("ltrim", "ltrim({0})")(lambda s: s.lstrip(" "))
register("rtrim", "rtrim({0})")(lambda s: s.rstrip(" "))


def _round_half_up(x, digits: int, rounding: str):
    if isinstance(x, int) and digits >= 0:
        return x
    exponent = Decimal(1).scaleb(-digits)
    rounded = Decimal(repr(x) if isinstance(x, float) else x).quantize(exponent, rounding=rounding)
    if isinstance(x, float):
        return float(rounded)
    if isinstance(x, int):
        return int(rounded)
    return rounded


@register("round", "round({*})")
def _round(x, digits=0):
    # Spark rounds half away from zero (HALF_UP), unlike Python's round.
    return _round_half_up(x, digits, ROUND_HALF_UP)


@register("floor", "floor({0})")
def _floor(x):
    return x.to_integral_value(rounding=ROUND_FLOOR) if isinstance(x, Decimal) else math.floor(x)


@register("ceil", "ceil({0})")
def _ceil(x):
    return x.to_integral_value(rounding=ROUND_CEILING) if isinstance(x, Decimal) else math.ceil(x)


register("date_add", "date_add({0}, {1})")(lambda d, n: d + datetime.timedelta(days=n))
register("date_sub", "date_sub({0}, {1})")(lambda d, n: d - datetime.timedelta(days=n))
register("datediff", "datediff({0}, {1})")(lambda end, start: (_as_date(end) - _as_date(start)).days)


@register("add_months", "add_months({0}, {1})")
def _add_months(d, months):
    """Spark's add_months: the same day of the month, clamped to the last day of a shorter month."""
    index = d.year * 12 + (d.month - 1) + months
    year, month = divmod(index, 12)
    last_day = calendar.monthrange(year, month + 1)[1]
    return d.replace(year=year, month=month + 1, day=min(d.day, last_day))


def _skip_nulls(pick):
    def impl(*args):
        present = [a for a in args if a is not None]
        return pick(present) if present else None

    return impl


register("least", "least({*})", null_propagating=False)(_skip_nulls(min))
register("greatest", "greatest({*})", null_propagating=False)(_skip_nulls(max))


@register("nullif", "nullif({0}, {1})", null_propagating=False)
def _nullif(a, b):
    return None if a is not None and b is not None and a == b else a


# Casts follow Spark's non-ANSI results: a value that does not convert gives NULL.
_DATE_PREFIX = re.compile(r"\s*(\d{4})(?:-(\d{1,2})(?:-(\d{1,2}))?)?(?:[ T].*)?\s*$", re.S)


def _as_date(value):
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    if isinstance(value, str):
        m = _DATE_PREFIX.fullmatch(value)
        if not m:
            return None
        try:
            return datetime.date(int(m[1]), int(m[2] or 1), int(m[3] or 1))
        except ValueError:
            return None
    return None


def _as_timestamp(value):
    if isinstance(value, datetime.datetime):
        return value
    if isinstance(value, datetime.date):
        return datetime.datetime(value.year, value.month, value.day)
    if isinstance(value, str):
        try:
            return datetime.datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    return None


def _as_decimal(value):
    if isinstance(value, bool):
        return Decimal(int(value))
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, (int, Decimal)):
        return Decimal(value)
    if isinstance(value, str):
        try:
            return Decimal(value.strip())
        except ArithmeticError:
            return None
    return None


def _as_integer(value):
    if isinstance(value, (int, bool)):
        return int(value)
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else math.trunc(value)
    number = _as_decimal(value) if isinstance(value, (str, Decimal)) else None
    return None if number is None or not number.is_finite() else int(number)


def _as_double(value):
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    if isinstance(value, (int, float, Decimal)):
        return float(value)
    return None


def _as_decimal_type(value, precision=10, scale=0):
    number = _as_decimal(value)
    if number is None or not number.is_finite():
        return None
    number = number.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
    return number if len(number.as_tuple().digits) <= max(precision, 1) else None


for _type, _impl in (("int", _as_integer), ("bigint", _as_integer), ("smallint", _as_integer),
                     ("tinyint", _as_integer), ("double", _as_double), ("float", _as_double),
                     ("string", _spark_string), ("date", _as_date), ("timestamp", _as_timestamp)):
    register(f"cast_{_type}", f"CAST({{0}} AS {_type.upper()})")(_impl)
register("cast_decimal", "CAST({0} AS DECIMAL({1}, {2}))")(_as_decimal_type)
register("to_date", "to_date({0})")(_as_date)
