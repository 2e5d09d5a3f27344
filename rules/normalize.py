"""Polynomial normal form: a sum of monomials.

Products distribute over sums, an AggSum of a sum becomes a sum of AggSums, and numeric
coefficients move in front of AggSums. Sums inside values (function arguments, comparisons, lift
bodies) are left alone: they are values, not unions of relations.

>>> from spark_ivm.calculus.parser import parse
>>> str(normalize(parse("AggSum([], (R(a) + -1 * S(a)) * a)")))
'AggSum([], R(a) * a) + -1 * AggSum([], S(a) * a)'
"""

from __future__ import annotations

from itertools import product as cartesian

from spark_ivm.calculus.analysis import all_vars, transform_up
from spark_ivm.calculus.expressions import AggSum, Const, Expr, Prod, Sum, aggsum, prod, sum_

__all__ = ["normalize"]


def normalize(e: Expr) -> Expr:
    return transform_up(e, _normalize_node)


def _normalize_node(e: Expr) -> Expr:
    if isinstance(e, Prod) and any(isinstance(f, Sum) for f in e.factors):
        choices = [f.terms if isinstance(f, Sum) else (f,) for f in e.factors]
        return sum_(*(prod(*pick) for pick in cartesian(*choices)))
    if isinstance(e, AggSum):
        unused = [g for g in e.group if g not in all_vars(e.expr)]
        if unused:
            # A group variable the body does not mention groups nothing (a term of a nested sum whose
            # correlation is in another term); kept, it would have to be bound from outside.
            return _normalize_node(aggsum([g for g in e.group if g not in unused], e.expr))
        body = e.expr
        if isinstance(body, Sum):
            return sum_(*(_normalize_node(aggsum(e.group, t)) for t in body.terms))
        if isinstance(body, Prod) and _is_coefficient(body.factors[0]):
            return prod(body.factors[0], aggsum(e.group, prod(*body.factors[1:])))
        if _is_coefficient(body) and not e.group:
            return body
    return e


def _is_coefficient(e: Expr) -> bool:
    return isinstance(e, Const) and isinstance(e.value, (int, float)) and not isinstance(e.value, bool)
