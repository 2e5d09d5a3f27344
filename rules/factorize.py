"""Factorization: an AggSum of a product splits into a product of AggSums over the connected
components of the product's variable hypergraph.

Two factors are connected when they share a variable that is summed away inside the AggSum (not a
group variable, not an input). `AggSum(g, A * B) = AggSum(g ∩ vars(A), A) * AggSum(g ∩ vars(B), B)`
when A and B share no such variable. Pure values over group or input variables stay plain factors.

>>> from spark_ivm.calculus.parser import parse
>>> str(factorize(parse("AggSum([], R(a, b) * a * S(c))")))
'AggSum([], R(a, b) * a) * AggSum([], S(c))'
"""

from __future__ import annotations

from spark_ivm.calculus.analysis import all_vars, factors_of, ivars, ovars, schedule, transform_up
from spark_ivm.calculus.expressions import AggSum, Expr, aggsum, prod

__all__ = ["factorize", "connected_components"]


def factorize(e: Expr) -> Expr:
    return transform_up(e, _factorize_aggsum)


def _factorize_aggsum(e: Expr) -> Expr:
    if not isinstance(e, AggSum):
        return e
    factors = factors_of(e.expr)
    if len(factors) < 2:
        return e
    linking = set(all_vars(e.expr)) - set(e.group) - set(ivars(e))
    components = connected_components(factors, linking)
    if len(components) < 2:
        return e
    parts = []
    for component in components:
        body = prod(*component)
        outputs = ovars(body)
        if outputs:
            parts.append(aggsum([g for g in e.group if g in outputs], body))
        else:
            parts.append(body)
    return prod(*schedule(parts, ivars(e)))


def connected_components(factors, linking: set[str]) -> list[list[Expr]]:
    """Groups of factors connected through shared `linking` variables, in order of first factor.

    A factor that reads a variable bound by another factor (a filter, a value, a lift's body) always
    stays with that factor: apart from it, the variable would be unbound.
    """
    parent = list(range(len(factors)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, f in enumerate(factors):
        for v in all_vars(f):
            if v not in linking:
                continue
            if v in owner:
                parent[find(i)] = find(owner[v])
            else:
                owner[v] = i
    binder = {}
    for i, f in enumerate(factors):
        for v in ovars(f):
            binder.setdefault(v, i)
    for i, f in enumerate(factors):
        for v in ivars(f):
            if v in binder:
                parent[find(i)] = find(binder[v])
    groups: dict[int, list[Expr]] = {}
    for i, f in enumerate(factors):
        groups.setdefault(find(i), []).append(f)
    return list(groups.values())
