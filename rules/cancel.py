"""Cancellation: monomials that differ only in their numeric coefficient are added up; zeros vanish.

>>> from spark_ivm.calculus.parser import parse
>>> str(cancel(parse("R(a) * a + S(a) + -1 * R(a) * a")))
'S(a)'
"""

from __future__ import annotations

from spark_ivm.calculus.analysis import transform_up
from spark_ivm.calculus.expressions import Const, Expr, Prod, Sum, prod, sum_

__all__ = ["cancel"]


def cancel(e: Expr) -> Expr:
    return transform_up(e, _cancel_sum)


def _split(term: Expr) -> tuple[object, Expr]:
    if isinstance(term, Prod) and isinstance(term.factors[0], Const) and _numeric(term.factors[0].value):
        return term.factors[0].value, prod(*term.factors[1:])
    if isinstance(term, Const) and _numeric(term.value):
        return term.value, Const(1)
    return 1, term


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _cancel_sum(e: Expr) -> Expr:
    if not isinstance(e, Sum):
        return e
    coefficients: dict[Expr, object] = {}
    for term in e.terms:
        c, monomial = _split(term)
        coefficients[monomial] = coefficients.get(monomial, 0) + c
    return sum_(*(prod(Const(c), m) for m, c in coefficients.items() if c != 0))
