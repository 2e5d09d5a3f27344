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

Maps of one family (maps that share their store rows, see mapstore: a view's COUNT, SUM and count of non-NULL
values of one product per the same keys) are read as the family's rows: a term `H * M_sum[k]` becomes
`H * F[k, c, s] * s` and `H * M_count[k]` becomes `H * F[k, c, s] * c`, F holding each map's rows with weight 1
and its value in a variable of its own (0 in the others'). The terms then have one product, H * F, and fuse:
TPC-H Q17's and Q22's statements re-evaluate a nested aggregate per affected key and then join the view's
count, sum and count of non-NULL values of one product; fused, they re-evaluate it once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

from spark_ivm.calculus.analysis import factors_of
from spark_ivm.calculus.expressions import AggSum, Const, Exists, Expr, MapRef, Prod, Sum, Var, prod, sum_
from spark_ivm.runtime.sqlgen import (
    VALUE, SharedProducts, SqlGen, Sources, exact_weight, is_pure, quote, shared_products,
)

Splits = Callable[[object, tuple[Expr, ...]], bool]
# Per map of a family: the family's maps, in order (their keys are the same).
Families = Mapping[str, tuple[str, ...]]


def family_name(members: Sequence[str]) -> str:
    return "__rows_" + members[0]


def value_var(member: str) -> str:
    """The variable holding a member's value in its family's rows."""
    return "__value_" + member


def _read_as_families(factors: Sequence[Expr], families: Families) -> list[Expr]:
    """The factors with each map of a family read as the family's rows times the map's value; as they are
    where the factors read a family twice (its value variables would clash)."""
    read = [families[f.name] for f in factors if isinstance(f, MapRef) and f.name in families]
    if not read or len(set(read)) < len(read):
        return list(factors)
    out: list[Expr] = []
    for f in factors:
        if isinstance(f, MapRef) and f.name in families:
            members = families[f.name]
            out += [MapRef(family_name(members), f.keys + tuple(value_var(m) for m in members)), Var(value_var(f.name))]
        else:
            out.append(f)
    return out


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

    return replace(sources, map=map_sql, map_keys=map_keys)


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
    factors = _read_as_families(factors_of(term), families)
    return tuple(f for f in factors if not is_pure(f)), coefficient + [f for f in factors if is_pure(f)]


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
