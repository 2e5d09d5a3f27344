"""Splitting NULL tests of products: `{x * y IS NOT NULL}` is `{x IS NOT NULL} * {y IS NOT NULL}`.

A product of values is NULL exactly when one of its factors is, and split tests factorize: each one
concerns the variables of one relation, so maps keep one relation's filter each.

>>> from spark_ivm.calculus.parser import parse
>>> str(split_null_tests(parse("R(a) * S(b) * {a * b * 2 IS NOT NULL}")))
'R(a) * S(b) * {a IS NOT NULL} * {b IS NOT NULL}'
"""

from __future__ import annotations

from spark_ivm.calculus.analysis import transform_up
from spark_ivm.calculus.expressions import NULL, Cmp, Const, Expr, Prod, cmp, prod

__all__ = ["split_null_tests"]


def split_null_tests(e: Expr) -> Expr:
    return transform_up(e, _split)


def _split(e: Expr) -> Expr:
    if isinstance(e, Cmp) and e.op == "is not" and e.right == NULL and isinstance(e.left, Prod):
        tests = [cmp("is not", f, NULL) for f in e.left.factors if not _non_null_constant(f)]
        return prod(*tests)
    return e


def _non_null_constant(e: Expr) -> bool:
    return isinstance(e, Const) and e.value is not None
