"""Deterministic scalar functions the calculus may call, with their reference implementations.

Each entry maps a calculus function name to a Python implementation over plain values (None is SQL
NULL). The Spark runtime renders calls through `spark_sql`, a format string over the rendered
arguments. Every function here must be deterministic: the delta of a function call is 0.
"""

from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass
from decimal import Decimal
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


@register("/", "({0} / {1})")
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
