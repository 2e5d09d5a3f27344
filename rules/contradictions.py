"""Contradictions: a product whose comparisons of one variable with constants no value satisfies is 0.

A disjunction becomes a sum by inclusion-exclusion (`A OR B` is `A + B - A * B`), and the overlap of
disjuncts that test one column against different constants (TPC-H Q19's three brands, Q7's two nations
in either order) can never hold; left in place, each such monomial would become maps and statements of
its own that always sum to nothing.

The pad of an outer join's unmatched rows binds the other side's columns to NULL, which no comparison
but IS NULL accepts (a COUNT of such a column over the pad, TPC-H Q13's, is such a product).

Only what holds in Spark's semantics too is concluded: every constant a variable is compared with is
of one kind (numbers, strings or dates; a mix is left alone, as Spark would cast one side), a NULL
satisfies no comparison, and strings are compared for equality only, and only when they differ in more
than trailing blanks (CHAR columns pad).

>>> from spark_ivm.calculus.parser import parse
>>> str(drop_contradictions(parse("R(a, b) * {b = 'x'} * {b = 'y'} + R(a, b) * {a >= 3} * {a < 3}")))
'0'
>>> str(drop_contradictions(parse("R(a, b) * {in(b, 'x', 'y') = 1} * {b != 'x'} * {2 > a} * {a >= 1}")))
"R(a, b) * {in(b, 'x', 'y') = 1} * {b != 'x'} * {2 > a} * {a >= 1}"
"""

from __future__ import annotations

import datetime
import math
import operator
from decimal import Decimal

from spark_ivm.calculus.analysis import transform_up
from spark_ivm.calculus.expressions import ZERO, Cmp, Const, Expr, Fn, Lift, Prod, Var

__all__ = ["drop_contradictions"]

_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_RANGE_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def drop_contradictions(e: Expr) -> Expr:
    return transform_up(e, _drop)


def _drop(e: Expr) -> Expr:
    if isinstance(e, Prod) and _unsatisfiable(e.factors):
        return ZERO
    return e


def _unsatisfiable(factors) -> bool:
    tests: dict[str, list[tuple[str, tuple]]] = {}
    for f in factors:
        if (test := _constant_test(f)) is not None:
            name, op, values = test
            tests.setdefault(name, []).append((op, values))
    return any(_no_value_satisfies(t) for t in tests.values() if len(t) > 1)


def _constant_test(f: Expr) -> tuple[str, str, tuple] | None:
    """(variable, op, constants) for `{v op c}`, `{c op v}`, `{in(v, c1, …) = 1}`, `{v IS [NOT] NULL}` and
    the lift of a constant `(v ^= c)`, which binds v to c or, v bound already, tests v IS NOT DISTINCT
    FROM c."""
    if isinstance(f, Lift) and isinstance(f.expr, Const):
        return (f.var, "isnull", ()) if f.expr.value is None else (f.var, "=", (f.expr.value,))
    if isinstance(f, Cmp) and f.op in ("is", "is not") and isinstance(f.left, Var) and f.right == Const(None):
        return f.left.name, "isnull" if f.op == "is" else "notnull", ()
    if not isinstance(f, Cmp) or f.op not in _FLIPPED:
        return None
    left, right, op = f.left, f.right, f.op
    if isinstance(left, Const) and isinstance(right, (Var, Fn)):
        left, right, op = right, left, _FLIPPED[op]
    if isinstance(left, Var) and isinstance(right, Const) and right.value is not None:
        return left.name, op, (right.value,)
    if (isinstance(left, Fn) and left.name == "in" and op == "=" and right == Const(1) and len(left.args) > 1
            and isinstance(left.args[0], Var) and all(isinstance(a, Const) for a in left.args[1:])):
        values = tuple(a.value for a in left.args[1:] if a.value is not None)
        return left.args[0].name, "in", values
    return None


def _kind(value) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, Decimal)):
        return "exact"
    if isinstance(value, float):
        return None if math.isnan(value) else "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, datetime.date):
        return "date"
    return None


def _no_value_satisfies(tests: list[tuple[str, tuple]]) -> bool:
    if any(op == "isnull" for op, _ in tests):
        return any(op != "isnull" for op, _ in tests)  # NULL satisfies no other test
    tests = [(op, values) for op, values in tests if op != "notnull"]
    kinds = {_kind(v) for _, values in tests for v in values}
    if len(kinds) != 1 or None in kinds:
        return False  # a mix of kinds (Spark casts), or a value not reasoned about
    kind = kinds.pop()
    if kind == "str":
        tests = [(op, tuple(v.rstrip(" ") for v in values)) for op, values in tests if op in ("=", "!=", "in")]
    allowed: set | None = None
    excluded = set()
    for op, values in tests:
        if op in ("=", "in"):
            allowed = set(values) if allowed is None else allowed & set(values)
        elif op == "!=":
            excluded.update(values)
    if allowed is not None:
        return not any(v not in excluded and _within(v, tests) for v in allowed)
    return kind != "str" and _empty_range(tests)


def _within(value, tests) -> bool:
    """Whether value passes every range test among tests (the only ones left are of its kind)."""
    return all(_RANGE_OPS[op](value, values[0]) for op, values in tests if op in _RANGE_OPS)


def _empty_range(tests) -> bool:
    lows = [(values[0], op == ">") for op, values in tests if op in (">", ">=")]
    highs = [(values[0], op == "<") for op, values in tests if op in ("<", "<=")]
    if not lows or not highs:
        return False
    low, low_strict = max(lows, key=lambda b: (b[0], b[1]))
    high, high_strict = min(highs, key=lambda b: (b[0], not b[1]))
    return low > high or (low == high and (low_strict or high_strict))
