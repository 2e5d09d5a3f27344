"""What the SQL generator (sqlgen) asks of a product's factors: which only weigh its rows, which join a
batch, how a correlated variable is used (bound by a lift, or only compared), and a map's value as the sum
of its rows. Pure functions over calculus expressions.
"""

from __future__ import annotations

from typing import Sequence

from spark_ivm.calculus.analysis import all_vars, factors_of
from spark_ivm.calculus.expressions import (
    FLIPPED_CMP, NULL, AggSum, Cmp, Const, DeltaRel, Exists, Expr, Fn, Lift, MapRef, Prod, Sum, Var,
)


def is_pure(e: Expr) -> bool:
    """A value computed from variables alone (no relation, map, batch, lift or aggregate inside)."""
    return all(isinstance(x, (Const, Var, Fn, Cmp, Prod, Sum)) for x in e.walk())


def weighs_only(f: Expr, nested: set[str]) -> bool:
    """A value multiplied into the rows' `__v`, or the test that a summed value is not NULL (a variable no
    nested part of the product reads): it binds nothing and hardly narrows the rows."""
    if isinstance(f, Cmp):
        return f.op == "is not" and f.right == NULL and isinstance(f.left, Var) and f.left.name not in nested
    return is_pure(f)


def mentioning(v: str, factors: Sequence[Expr]) -> list[Expr]:
    return [f for f in factors if v in all_vars(f)]


def joins_batch_in_every_term(e: Expr) -> bool:
    """Whether each of e's terms (through sums, Exists and AggSum) joins a batch (ΔR), or a part that does:
    its rows are then at most those a batch reaches."""
    if isinstance(e, Sum):
        return all(joins_batch_in_every_term(t) for t in e.terms)
    if isinstance(e, (AggSum, Exists)):
        return joins_batch_in_every_term(e.expr)
    return any(isinstance(f, DeltaRel) or isinstance(f, (Sum, AggSum, Exists)) and joins_batch_in_every_term(f)
               for f in factors_of(e))


def as_aggsum(term: Expr) -> Expr:
    """A map's value at its keys as the sum of its rows per those keys, `M[k]` as `AggSum([k], M[k])` (the
    same value), so that a nested sum of a map and a batch's aggregate (the new value `M + ΔM`) has the
    shape of the sums it may join with (maps of one family, the same batch)."""
    if isinstance(term, MapRef) and len(set(term.keys)) == len(term.keys):
        return AggSum(term.keys, term)
    return term


def bound_by_lift(v: str, factors: Sequence[Expr]) -> bool:
    """Whether, among the factors, only one lift `(v ^= t)` (t without v) and values mention v."""
    using = mentioning(v, factors)
    lifts = [f for f in using if isinstance(f, Lift) and f.var == v and v not in all_vars(f.expr)]
    return len(lifts) == 1 and all(f is lifts[0] or is_pure(f) for f in using)


def only_compared(v: str, factors: Sequence[Expr], correlated: Sequence[str]) -> tuple[Cmp, Expr, str] | None:
    """The one factor mentioning v, if it is an inequality between v and a value t of no correlated variable;
    with t and the comparison as `t op v`."""
    using = mentioning(v, factors)
    if len(using) != 1 or not isinstance(using[0], Cmp) or using[0].op not in ("<", "<=", ">", ">="):
        return None
    c = using[0]
    if Var(v) not in (c.left, c.right):
        return None
    value, op = (c.left, c.op) if c.right == Var(v) else (c.right, FLIPPED_CMP[c.op])
    if not is_pure(value) or set(all_vars(value)) & set(correlated):
        return None
    return c, value, op
