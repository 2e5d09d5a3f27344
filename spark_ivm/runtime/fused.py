"""Statements of one trigger that sum different values over the same product, computed by one aggregation.

A trigger's statements often differ only in the value they sum: a view's SUMs, COUNTs and counts of
non-NULL values over one batch (TPC-H Q1 has eleven over the lineitem batch, Q8 five over one join).
Computed one by one, each is an aggregation with a shuffle of its own, and on a small batch a shuffle's
fixed cost is most of the work. Fused, one aggregation computes every sum per key and one pass over its rows
makes the store rows of every target map. Each sum is the one its statement computes alone (the same
product times the same value, summed per key), so fusing changes no result, not even a rounding.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from spark_ivm.calculus.analysis import factors_of
from spark_ivm.calculus.expressions import AggSum, Const, Expr, Sum, prod
from spark_ivm.runtime.sqlgen import SqlGen, Sources, is_pure


@dataclass(frozen=True)
class Fused:
    """Statements `target_i[keys] += AggSum(keys, product * value_i)`, one per member."""
    keys: tuple[str, ...]
    product: Expr
    members: tuple[tuple[object, Expr], ...]  # (statement, the value it sums over the product)

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(s.target for s, _ in self.members)


def fuse(statements: Sequence) -> list:
    """The statements, those of each group that differ only in the values they sum replaced by one Fused
    (where the group has two or more), in the order of each group's first statement."""
    groups: dict[tuple, list[tuple[object, list[Expr]]]] = {}
    order: list = []  # a statement alone, or the key of its group
    for s in statements:
        parts = _parts(s)
        if parts is None:
            order.append(s)
            continue
        heavy, values = parts
        key = (tuple(s.keys), heavy)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append((s, values))
    fused = []
    for item in order:
        if not isinstance(item, tuple):
            fused.append(item)
            continue
        members = groups[item]
        if len(members) == 1:
            fused.append(members[0][0])
            continue
        common = Counter(members[0][1])
        for _, values in members[1:]:
            common &= Counter(values)
        keys, heavy = item
        product = prod(*heavy, *common.elements())
        fused.append(Fused(keys, product, tuple(
            (s, prod(*(Counter(values) - common).elements()) if Counter(values) - common else Const(1))
            for s, values in members)))
    return fused


def _parts(statement) -> tuple[tuple[Expr, ...], list[Expr]] | None:
    """A `+=` statement of one term as (its product's factors that are not values, its values); None for
    one that cannot be fused (a re-evaluation, a sum of terms, nested aggregates re-evaluated per key)."""
    if statement.op != "+=" or isinstance(statement.expr, Sum) or statement.reevaluated_keys is not None:
        return None
    e = statement.expr
    if isinstance(e, AggSum):
        if set(e.group) != set(statement.keys):
            return None
        e = e.expr
    factors = factors_of(e)
    return tuple(f for f in factors if not is_pure(f)), [f for f in factors if is_pure(f)]


def fused_sql(fused: Fused, sources: Sources) -> str:
    """SELECT keys…, __v0, __v1, …: each member's increments per key, in member order."""
    return SqlGen(sources).sums(fused.product, [value for _, value in fused.members], fused.keys)
