"""Variable elimination: an equality `{x = y}` or a lift `(y ^= x)` between variables of one AggSum
body removes a variable local to the body by substituting the other one.

Variables visible outside the AggSum (its group variables and its inputs) are never eliminated.
SQL's `=` is false on NULL while a shared variable joins NULL with NULL, so an eliminated equality
leaves the guard `{x IS NOT NULL}` behind; a lift binds NULL like any value and needs no guard.

>>> from spark_ivm.calculus.parser import parse
>>> str(unify(parse("AggSum([], R(a, rb) * S(sb, c) * {rb = sb} * a)")))
'AggSum([], R(a, rb) * S(rb, c) * {rb IS NOT NULL} * a)'
"""

from __future__ import annotations

from spark_ivm.calculus.analysis import factors_of, ivars, ovars, rename, transform_up
from spark_ivm.calculus.expressions import NULL, AggSum, Cmp, Expr, Lift, Var, aggsum, cmp, prod

__all__ = ["unify"]


def unify(e: Expr) -> Expr:
    return transform_up(e, _unify_aggsum)


def _unify_aggsum(e: Expr) -> Expr:
    if not isinstance(e, AggSum):
        return e
    factors = list(factors_of(e.expr))
    fixed = set(e.group) | set(ivars(e))
    while True:
        step = _one_elimination(factors, fixed)
        if step is None:
            return aggsum(e.group, prod(*factors))
        factors = step


def _one_elimination(factors: list[Expr], fixed: set[str]) -> list[Expr] | None:
    for i, f in enumerate(factors):
        if isinstance(f, Cmp) and f.op == "=" and isinstance(f.left, Var) and isinstance(f.right, Var):
            pair = _choose(f.left.name, f.right.name, factors, i, fixed)
            if pair:
                keep, drop = pair
                guard = cmp("is not", Var(keep), NULL)
                return _substitute(factors, i, drop, keep, replacement=guard)
        if isinstance(f, Lift) and isinstance(f.expr, Var) and f.var != f.expr.name:
            pair = _choose(f.expr.name, f.var, factors, i, fixed, lifted=f.var)
            if pair:
                keep, drop = pair
                return _substitute(factors, i, drop, keep, replacement=None)
    return None


def _choose(x: str, y: str, factors, position: int, fixed: set[str], lifted: str | None = None):
    """(kept, eliminated) variables, or None when neither may go. Prefers eliminating y."""
    if x == y:
        return None
    others = [f for j, f in enumerate(factors) if j != position]
    bound_elsewhere = {v for f in others for v in ovars(f)}
    for keep, drop in ((x, y), (y, x)):
        if drop in fixed:
            continue
        # The eliminated variable must be bound inside the body (a lift binds its own variable).
        if drop not in bound_elsewhere and drop != lifted:
            continue
        if keep not in bound_elsewhere and keep not in fixed:
            continue
        return keep, drop
    return None


def _substitute(factors, position: int, drop: str, keep: str, replacement: Expr | None) -> list[Expr]:
    out = []
    for j, f in enumerate(factors):
        if j == position:
            if replacement is not None:
                out.append(replacement)
        else:
            out.append(rename(f, {drop: keep}))
    return out
