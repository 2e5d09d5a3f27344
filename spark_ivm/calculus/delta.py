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

from spark_ivm.calculus.analysis import transform_up
from spark_ivm.calculus.expressions import (
    ZERO, AggSum, Const, DeltaRel, Exists, Expr, Lift, MapRef, Prod, Rel, Sum, Var,
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
    if isinstance(e, (Lift, Exists)):
        return _block_change((_nested_change(e, relation),))
    # Lifts, existence tests, comparisons and functions of nested aggregates are not linear:
    # their delta is the expression on the new database minus the expression on the old one.
    return sum_(post_update(e, relation), neg(e))


class _NestedChange:
    """A nested factor's body, its delta, and how to rebuild the factor around a body."""

    def __init__(self, body: Expr, d_body: Expr, wrap):
        self.body, self.d_body, self.wrap = body, d_body, wrap

    def old(self) -> Expr:
        return self.wrap(self.body)

    def new(self) -> Expr:
        return self.wrap(sum_(self.body, self.d_body))


def _block_change(changes) -> Expr:
    """The delta of a product of adjacent nested factors, taken as one: the new product minus the old
    one, on the union of their domains (a sum of existence tests, so nothing cancels). Taken factor by
    factor, the product rule would give 2^k − 1 terms for k lifts (a SUM's value and its count)."""
    domains = [exists(c.d_body) for c in changes if c.d_body != ZERO]
    if not domains:
        return ZERO
    domain = domains[0] if len(domains) == 1 else exists(sum_(*domains))
    return prod(domain, sum_(prod(*(c.new() for c in changes)), neg(prod(*(c.old() for c in changes)))))


def _nested_change(f: Expr, relation: str) -> "_NestedChange | None":
    if isinstance(f, Lift) and _reads(f, relation):
        return _NestedChange(f.expr, delta(f.expr, relation), lambda t, v=f.var: lift(v, t))
    if isinstance(f, Exists) and _reads(f, relation):
        return _NestedChange(f.expr, delta(f.expr, relation), exists)
    return None


def _delta_product(factors: tuple[Expr, ...], relation: str) -> Expr:
    units = _units(factors, relation)
    return _delta_units(units, relation)


def _units(factors, relation: str) -> list[tuple[Expr, ...]]:
    """The factors with each run of adjacent nested factors that read the relation as one unit."""
    units: list[tuple[Expr, ...]] = []
    run: list[Expr] = []
    for f in factors:
        if _nested_change(f, relation) is not None:
            run.append(f)
            continue
        if run:
            units.append(tuple(run))
            run = []
        units.append((f,))
    if run:
        units.append(tuple(run))
    return units


def _delta_unit(unit: tuple[Expr, ...], relation: str) -> Expr:
    if len(unit) == 1:
        return delta(unit[0], relation)
    return _block_change([_nested_change(f, relation) for f in unit])


def _delta_units(units: list[tuple[Expr, ...]], relation: str) -> Expr:
    """Δ(head · tail) = Δhead · tail + head · Δtail + Δhead · Δtail, from the last unit back to the first
    in a loop (a WHERE of a thousand ANDs is a product of a thousand units)."""
    d_tail = _delta_unit(units[-1], relation)
    tail = prod(*units[-1])
    for unit in reversed(units[:-1]):
        head, d_head = prod(*unit), _delta_unit(unit, relation)
        if d_head == ZERO:  # the two terms with Δhead vanish
            d_tail = prod(head, d_tail)
        else:
            d_tail = sum_(prod(d_head, tail), prod(head, d_tail), prod(d_head, d_tail))
        tail = prod(*unit, tail)
    return d_tail


def _reads(e: Expr, relation: str) -> bool:
    return any(isinstance(x, Rel) and x.name == relation for x in e.walk())


def post_update(e: Expr, relation: str) -> Expr:
    """e evaluated on the database after the batch: every R(x) becomes R(x) + ΔR(x)."""

    def step(x: Expr) -> Expr:
        if isinstance(x, Rel) and x.name == relation:
            return sum_(x, DeltaRel(x.name, x.vars))
        return x

    return transform_up(e, step)
