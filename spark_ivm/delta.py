"""Symbolic deltas of calculus expressions for a batch of changes to one base relation.

Batches carry signed multiplicities, so Δ(A·B) keeps its second-order term ΔA·ΔB: a batch of a
self-joined relation joins with itself. Every delta reads the database as it was before the batch.

A lift of a nested aggregate (a scalar subquery, an EXISTS count, an outer join's match count) is not
linear: its delta is the lift of the new value minus the lift of the old one,
`(v ^= t + Δt) − (v ^= t)`, which is 0 wherever Δt is 0. It is therefore restricted to the domain
`Exists(Δt)`, the keys (correlation variables) whose nested value the batch changes, so that a
statement re-evaluates the outer part only for those keys. An existence test is treated alike.
"""

from __future__ import annotations

from spark_ivm.analysis import transform_up
from spark_ivm.calculus import (
    ZERO, AggSum, Cmp, Const, DeltaRel, Exists, Expr, Fn, Lift, MapRef, Prod, Rel, Sum, Var,
    aggsum, exists, lift, neg, prod, sum_,
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
    if isinstance(e, Lift):
        return _restricted_change(e.expr, relation, lambda t: lift(e.var, t))
    if isinstance(e, Exists):
        return _restricted_change(e.expr, relation, exists)
    # Lifts, existence tests, comparisons and functions of nested aggregates are not linear:
    # their delta is the expression on the new database minus the expression on the old one.
    return sum_(post_update(e, relation), neg(e))


def _restricted_change(body: Expr, relation: str, wrap) -> Expr:
    """Exists(Δbody) * (wrap(body + Δbody) − wrap(body))."""
    d_body = delta(body, relation)
    if d_body == ZERO:
        return ZERO
    return prod(exists(d_body), sum_(wrap(sum_(body, d_body)), neg(wrap(body))))


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
