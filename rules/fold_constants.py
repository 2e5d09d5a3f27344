"""Constant folding: functions and comparisons of constants become constants.

>>> from spark_ivm.calculus.parser import parse
>>> str(fold_constants(parse("R(a) * {1 + 2 < 4} * {a + 2 * 3}")))
'R(a) * {a + 6}'
"""

from __future__ import annotations

from spark_ivm.calculus import functions
from spark_ivm.calculus.analysis import transform_up
from spark_ivm.calculus.evaluator import _compare
from spark_ivm.calculus.expressions import Cmp, Const, Exists, Expr, Fn

__all__ = ["fold_constants"]


def fold_constants(e: Expr) -> Expr:
    return transform_up(e, _fold)


# What Python raises for constants of types it does not combine, where Spark casts one of them ('5' > 3,
# '1994-01-01' + INTERVAL 1 YEAR, DATE '…' < 2.5): such a call is left for Spark to compute, or refuse.
_NOT_COMPUTABLE = (TypeError, ValueError, AttributeError, ArithmeticError)


def _fold(e: Expr) -> Expr:
    try:
        if isinstance(e, Fn) and all(isinstance(a, Const) for a in e.args) and e.name in functions.FUNCTIONS:
            return Const(functions.call(e.name, [a.value for a in e.args]))
        if isinstance(e, Cmp) and isinstance(e.left, Const) and isinstance(e.right, Const):
            return Const(_compare(e.op, e.left.value, e.right.value))
    except _NOT_COMPUTABLE:
        return e
    if isinstance(e, Exists) and isinstance(e.expr, Const):
        return Const(0 if e.expr.value in (0, None) else 1)
    return e
