"""Symbolic deltas of calculus expressions for a batch of changes to one base relation.

Batches carry signed multiplicities, so Δ(A·B) keeps its second-order term ΔA·ΔB: a batch of a
self-joined relation joins with itself. Every delta reads the database as it was before the batch.
"""

from __future__ import annotations

from spark_ivm.analysis import transform_up
from spark_ivm.calculus import (
    ZERO, AggSum, Cmp, Const, DeltaRel, Exists, Expr, Fn, Lift, MapRef, Prod, Rel, Sum, Var,
    aggsum, neg, prod, sum_,
)


def delta(e: Expr, relation: str) -> Expr:
    """Δ_relation e, unsimplified (the rules simplify it)."""
    if isinstance(e, Rel):
        return DeltaRel(e.name, e.vars) if e.name == relation else ZERO
    if isinstance(e, (Const, Var, DeltaRel)):
        return ZERO
    if isinstance(e, MapRef):
        raise ValueError(f"cannot take the delta of map {e.name}: differentiate its definition")
    if isinstance(e, Sum):
        return sum_(*(delta(t, relation) for t in e.terms))
    if isinstance(e, Prod):
        return _delta_product(e.factors, relation)
    if isinstance(e, AggSum):
        return aggsum(e.group, delta(e.expr, relation))
    if not _reads(e, relation):
        return ZERO
    # Lifts, existence tests, comparisons and functions of nested aggregates are not linear:
    # their delta is the expression on the new database minus the expression on the old one.
    return sum_(post_update(e, relation), neg(e))


def _delta_product(factors: tuple[Expr, ...], relation: str) -> Expr:
    head, rest = factors[0], factors[1:]
    d_head = delta(head, relation)
    if not rest:
        return d_head
    tail = prod(*rest)
    d_tail = _delta_product(rest, relation)
    return sum_(prod(d_head, tail), prod(head, d_tail), prod(d_head, d_tail))


def _reads(e: Expr, relation: str) -> bool:
    return any(isinstance(x, Rel) and x.name == relation for x in e.walk())


def post_update(e: Expr, relation: str) -> Expr:
    """e evaluated on the database after the batch: every R(x) becomes R(x) + ΔR(x)."""

    def step(x: Expr) -> Expr:
        if isinstance(x, Rel) and x.name == relation:
            return sum_(x, DeltaRel(x.name, x.vars))
        return x

    return transform_up(e, step)
