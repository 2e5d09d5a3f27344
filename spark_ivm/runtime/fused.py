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

Maps of one family (families.py: a view's COUNT, SUM and count of non-NULL values of one product per the
same keys, sharing store rows) are compared as reads of the family's rows, so that terms joining different
members have one product and fuse: TPC-H Q17's and Q22's statements re-evaluate a nested aggregate per
affected key and then join the view's count, sum and count of non-NULL values of one family; fused, they
re-evaluate it once. with_families reads a family's rows as the union of its members' rows.

Statements left over that still join the same product share it (shared_products): the product is computed
once per refresh, as a stage, and each statement sums its value over it.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from spark_ivm.calculus.analysis import all_vars, factors_of
from spark_ivm.calculus.expressions import (
    AggSum, Cmp, Const, DeltaRel, Exists, Expr, Lift, MapRef, Prod, Rel, Sum, aggsum, prod, sum_,
)
from spark_ivm.runtime.factor_shapes import is_pure
from spark_ivm.runtime.families import Families, family_name, read_as_families, value_var
from spark_ivm.runtime.sqlgen import VALUE, SqlGen, Sources, canonical_aliases, quote, statement_sql

Splits = Callable[[object, tuple[Expr, ...]], bool]


def with_families(sources: Sources, families: Families) -> Sources:
    """Sources that also read each family's rows (see the module doc): the union of its maps' rows, each
    weighing 1, with the map's value in its variable and 0 in the others'."""
    names = {family_name(members): members for members in families.values()}
    if not names:
        return sources

    def map_sql(name: str) -> str:
        members = names.get(name)
        if members is None:
            return sources.map(name)
        keys = "".join(f"{quote(k)}, " for k in sources.map_keys(members[0]))
        reads = []
        for i, member in enumerate(members):
            values = ", ".join(f"{VALUE if other == member else 0} AS {quote(value_var(other))}" for other in members)
            reads.append(f"SELECT {keys}{values}, 1 AS {VALUE} FROM {sources.map(member)} AS f{i}")
        return "(" + " UNION ALL ".join(reads) + ")"

    def map_keys(name: str) -> Sequence[str]:
        members = names.get(name)
        if members is None:
            return sources.map_keys(name)
        return (*sources.map_keys(members[0]), *(value_var(m) for m in members))

    return replace(sources, map=map_sql, map_keys=map_keys, families=families)


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


def fuse(statements: Sequence, splits: Splits = _never, families: Families | None = None) -> list:
    """The statements, those of each group that differ only in the values they sum replaced by one Fused
    (where the group has two or more statements), in the order of each group's first statement.

    splits(statement, heavy): whether a term of a statement of several terms, over the product `heavy`,
    may be fused apart from the statement's other terms. A statement whose terms are fused in part stays
    with its other terms. families: maps whose terms are compared as reads of their family's rows."""
    # (keys, heavy) -> statement -> (term, its values) of each of its terms over that product
    groups: dict[tuple, dict[int, list[tuple[int, list[Expr]]]]] = {}
    order: list[tuple] = []  # ("statement", i) or ("group", its key)
    terms_of: list[tuple[Expr, ...]] = []
    for i, s in enumerate(statements):
        order.append(("statement", i))
        terms = s.expr.terms if isinstance(s.expr, Sum) else (s.expr,)
        terms_of.append(terms)
        for j, term in enumerate(terms):
            parts = _parts(s, term, len(terms) == 1, families or {})
            if parts is None or (len(terms) > 1 and not splits(s, parts[0])):
                continue
            key = (tuple(s.keys), parts[0])
            if key not in groups:
                groups[key] = {}
                order.append(("group", key))
            groups[key].setdefault(i, []).append((j, parts[1]))
    fused_terms = {(i, j) for members in groups.values() if len(members) > 1
                   for i, terms in members.items() for j, _ in terms}
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
        values_of = [Counter(values) for terms in members.values() for _, values in terms]
        common = values_of[0]
        for values in values_of[1:]:
            common = common & values
        keys, heavy = item
        # A statement's terms over the same product (a disjunction's, read from one family) add their values.
        items.append(Fused(keys, prod(*heavy, *common.elements()), tuple(
            (statements[i], sum_(*(prod(*(Counter(values) - common).elements()) for _, values in terms)))
            for i, terms in members.items())))
    return items


def _parts(statement, term: Expr, whole: bool, families: Families) -> tuple[tuple[Expr, ...], list[Expr]] | None:
    """A term of a `+=` statement as (its product's factors that are not values, its values), maps of a family
    read as its rows; None for one that cannot be fused (a re-evaluation)."""
    if statement.op != "+=":
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
    factors = read_as_families(factors_of(term), families)
    return tuple(f for f in factors if not is_pure(f)), coefficient + [f for f in factors if is_pure(f)]


# Shared products of a trigger: name -> (keys, definition), read by its statements as maps.
SharedProducts = dict[str, tuple[tuple[str, ...], Expr]]


def shared_products(statements: Sequence, exact: Callable[[str], bool]) -> tuple[SharedProducts, list]:
    """The `+=` statements of one trigger with the products they share computed once.

    Statements that differ only in the values they sum (a view's COUNT, SUM and non-NULL counts; TPC-H
    Q8's five maps over one 8-way join) would each evaluate the same joins. Where two or more terms
    `AggSum(K, H * v_i)` share their keys K and their factors H other than pure values v_i (and H joins a
    table or map, not only the batch), H becomes one shared product `s[K, V] := AggSum(K + V, H * c)` (V:
    the variables the v_i read, c: the values all of them multiply by), and each term
    `AggSum(K, s[K, V] * v_i)`: the sum of H's rows per binding of K and V, times v_i, is their sum.

    exact(map): whether the map's values are integers. A shared product multiplies the summed weights of
    H's rows by v_i, where the term multiplied each row's weight by v_i; with integral weights the two
    are the same numbers, while decimal weights may be rounded differently (Spark cuts the scale of a
    product beyond 38 digits), so H is shared only when every map in it is exact.

    Returns ({shared name: (its keys, its definition)}, the statements reading them)."""
    groups: dict[tuple, list[tuple[int, int, tuple[Expr, ...]]]] = {}  # (K, H) -> (statement, term, v)
    terms_of = []
    rewritten: set[int] = set()
    for i, s in enumerate(statements):
        terms = s.expr.terms if isinstance(s.expr, Sum) else (s.expr,)
        terms_of.append(list(terms))
        if s.op != "+=":
            continue
        for j, t in enumerate(terms):
            group, body = (t.group, t.expr) if isinstance(t, AggSum) else (tuple(s.keys), t)
            if set(group) != set(s.keys):
                continue
            factors = factors_of(body)
            heavy = tuple(f for f in factors if not is_pure(f))
            if _shareable(heavy, exact):
                groups.setdefault((tuple(s.keys), heavy), []).append((i, j, tuple(f for f in factors if is_pure(f))))
    shared: SharedProducts = {}
    for (keys, heavy), members in groups.items():
        if len(members) < 2:
            continue
        common = functools.reduce(operator.and_, (Counter(values) for _, _, values in members))
        own = [list((Counter(values) - common).elements()) for _, _, values in members]
        read = tuple(dict.fromkeys(v for values in own for f in values for v in all_vars(f) if v not in keys))
        name = f"__shared{len(shared)}"
        shared[name] = (keys + read, aggsum(keys + read, prod(*heavy, *common.elements())))
        for (i, j, _), values in zip(members, own):
            terms_of[i][j] = aggsum(keys, prod(MapRef(name, keys + read), *values))
            rewritten.add(i)
    return shared, [replace(s, expr=terms[0] if len(terms) == 1 else Sum(tuple(terms))) if i in rewritten else s
                    for i, (s, terms) in enumerate(zip(statements, terms_of))]


def with_shared(sources: Sources, shared: SharedProducts) -> Sources:
    """Sources that also read shared products (see shared_products) as maps keyed by their variables: each
    computed once, as a stage, when a statement first reads it (a subquery where stages are CTEs)."""
    if not shared:
        return sources

    def map_sql(name: str) -> str:
        if name not in shared:
            return sources.map(name)
        keys, definition = shared[name]
        sql = statement_sql(definition, keys, sources)
        return sources.stage(canonical_aliases(sql)) if sources.stage is not None else f"({sql})"

    return replace(sources, map=map_sql,
                   map_keys=lambda name: shared[name][0] if name in shared else sources.map_keys(name))


def _shareable(heavy: tuple[Expr, ...], exact: Callable[[str], bool]) -> bool:
    """Whether a product's non-value factors are worth sharing and safe to: they join a table or a map, and
    their rows weigh integers (exact_weight)."""
    return any(isinstance(f, (Rel, MapRef)) for f in heavy) and exact_weight(heavy, exact)


def exact_weight(heavy: tuple[Expr, ...], exact: Callable[[str], bool]) -> bool:
    """Whether each row of a product weighs an integer: each factor adds no weight (relations, batches,
    lifts, conditions) or an integral one (maps exact(map))."""
    return all(isinstance(f, (Rel, DeltaRel, Lift, Cmp)) or (isinstance(f, MapRef) and exact(f.name))
               for f in heavy)


def trigger_items(statements: Sequence, exact: Callable[[str], bool],
                  families: Families | None = None) -> tuple[SharedProducts, list]:
    """What a refresh computes for one trigger's statements: Fused groups (terms split where their rows weigh
    integers: exact_weight, a family's rows weighing 1, an Exists 0 or 1), and the other statements with the
    products they share (shared_products), in fuse's order. The Fused groups read families' rows: compute
    them from with_families(sources, families)."""
    names = {family_name(members) for members in (families or {}).values()}

    def splits(statement, heavy: tuple[Expr, ...]) -> bool:
        return exact_weight(tuple(f for f in heavy if not isinstance(f, Exists)), lambda m: m in names or exact(m))

    items = fuse(statements, splits, families)
    shared, alone = shared_products([item for item in items if not isinstance(item, Fused)], exact)
    rest = iter(alone)
    return shared, [item if isinstance(item, Fused) else next(rest) for item in items]


def fused_sql(fused: Fused, sources: Sources) -> str:
    """SELECT keys…, __v0, __v1, …: each member's increments per key, in member order."""
    return SqlGen(sources).sums(fused.product, [value for _, value in fused.members], fused.keys)
