"""Statements of one trigger that sum different values over the same product, computed by one aggregation.

A trigger's statements often differ only in the value they sum: a view's SUMs, COUNTs and counts of
non-NULL values over one batch (TPC-H Q1 has eleven over the lineitem batch, Q8 five over one join).
Computed one by one, each is an aggregation with a shuffle of its own, and on a small batch a shuffle's
fixed cost is most of the work. Fused, one aggregation computes every sum per key and one pass over its rows
makes the store rows of every target map. Each sum is the one its statement computes alone (the same
product times the same value, summed per key), so fusing changes no result, not even a rounding.

A statement of several terms (a disjunction's terms, TPC-H Q19's three; a join's cases) is fused term by
term where `splits` allows it: its i-th term joins the i-th terms of the other statements over the same
product, and the terms left over stay one statement. Each term's sum is then rounded to the map's type
apart from the others; where the term's rows weigh integers (see exact_weight) that rounding is exact.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from spark_ivm.calculus.analysis import factors_of
from spark_ivm.calculus.expressions import AggSum, Const, Expr, Prod, Sum, prod, sum_
from spark_ivm.runtime.sqlgen import SharedProducts, SqlGen, Sources, exact_weight, is_pure, shared_products

Splits = Callable[[object, tuple[Expr, ...]], bool]


@dataclass(frozen=True)
class Fused:
    """Statements `target_i[keys] += AggSum(keys, product * value_i)`, one per member."""
    keys: tuple[str, ...]
    product: Expr
    members: tuple[tuple[object, Expr], ...]  # (statement, the value it sums over the product)

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(s.target for s, _ in self.members)


def _never(statement, heavy: tuple[Expr, ...]) -> bool:
    return False


def fuse(statements: Sequence, splits: Splits = _never) -> list:
    """The statements, those of each group that differ only in the values they sum replaced by one Fused
    (where the group has two or more statements), in the order of each group's first statement.

    splits(statement, heavy): whether a term of a statement of several terms, over the product `heavy`,
    may be fused apart from the statement's other terms. A statement whose terms are fused in part stays
    with its other terms."""
    groups: dict[tuple, list[tuple[int, int, list[Expr]]]] = {}  # (keys, heavy) -> (statement, term, values)
    order: list[tuple] = []  # ("statement", i) or ("group", its key)
    terms_of: list[tuple[Expr, ...]] = []
    for i, s in enumerate(statements):
        order.append(("statement", i))
        terms = s.expr.terms if isinstance(s.expr, Sum) else (s.expr,)
        terms_of.append(terms)
        for j, term in enumerate(terms):
            parts = _parts(s, term, whole=len(terms) == 1)
            if parts is None or (len(terms) > 1 and not splits(s, parts[0])):
                continue
            key = (tuple(s.keys), parts[0])
            if key not in groups:
                groups[key] = []
                order.append(("group", key))
            if all(i != member for member, _, _ in groups[key]):  # a statement at most once per group
                groups[key].append((i, j, parts[1]))
    fused_terms = {(i, j) for members in groups.values() if len(members) > 1 for i, j, _ in members}
    items = []
    for kind, item in order:
        if kind == "statement":
            s, terms = statements[item], terms_of[item]
            left = [t for j, t in enumerate(terms) if (item, j) not in fused_terms]
            if len(left) == len(terms):
                items.append(s)
            elif left:
                items.append(replace(s, expr=sum_(*left)))
            continue
        members = groups[item]
        if len(members) < 2:
            continue
        common = Counter(members[0][2])
        for _, _, values in members[1:]:
            common &= Counter(values)
        keys, heavy = item
        product = prod(*heavy, *common.elements())
        items.append(Fused(keys, product, tuple(
            (statements[i], prod(*(Counter(values) - common).elements()) if Counter(values) - common else Const(1))
            for i, _, values in members)))
    return items


def _parts(statement, term: Expr, whole: bool) -> tuple[tuple[Expr, ...], list[Expr]] | None:
    """A term of a `+=` statement as (its product's factors that are not values, its values); None for one
    that cannot be fused (a re-evaluation, nested aggregates re-evaluated per key)."""
    if statement.op != "+=" or statement.reevaluated_keys is not None:
        return None
    coefficient: list[Expr] = []
    if not whole and isinstance(term, Prod) and isinstance(term.factors[0], Const) and len(term.factors) == 2:
        coefficient, term = [term.factors[0]], term.factors[1]  # -1 * AggSum(…): the -1 is a value
    if isinstance(term, AggSum):
        if set(term.group) != set(statement.keys):
            return None
        term = term.expr
    elif not whole:
        return None
    factors = factors_of(term)
    return tuple(f for f in factors if not is_pure(f)), coefficient + [f for f in factors if is_pure(f)]


def trigger_items(statements: Sequence, exact: Callable[[str], bool]) -> tuple[SharedProducts, list]:
    """What a refresh computes for one trigger's statements: Fused groups (terms split where exact_weight),
    and the other statements with the products they share (shared_products), in fuse's order."""
    items = fuse(statements, splits=lambda s, heavy: exact_weight(heavy, exact))
    shared, alone = shared_products([item for item in items if not isinstance(item, Fused)], exact)
    rest = iter(alone)
    return shared, [item if isinstance(item, Fused) else next(rest) for item in items]


def fused_sql(fused: Fused, sources: Sources) -> str:
    """SELECT keys…, __v0, __v1, …: each member's increments per key, in member order."""
    return SqlGen(sources).sums(fused.product, [value for _, value in fused.members], fused.keys)
