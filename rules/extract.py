"""Extraction of aggregates into maps (the materialization step of the viewlet transform).

In each monomial of a delta, the factors that read the database (and no delta) are grouped into
connected components; each component becomes a map `m[k]` keyed by the variables it shares with the
rest of the monomial (the batch's variables, the group variables, variables compared with the
batch). A nested factor (the lift of a scalar subquery's aggregate, an existence test) stays where it
is and has its own aggregates extracted, keyed by its correlation variables: the nested aggregate is a
map looked up per outer binding; a lifted aggregate that holds nested aggregates of its own and sums
the database alone becomes one map whole (see `_nested_aggregate_map`). Values and filters that only
mention a component's variables move into that component, so maps hold pre-filtered, pre-multiplied
sums. Inside an AggSum, a component whose relations share a
summed variable that would make its map a product of theirs is split at that variable (the policy is
heuristics.splits_map_at). `materialize` turns a definition `AggSum(k, …)` into a
map reference (creating or reusing a map): this rule is mechanism, the compiler decides the names.

>>> from spark_ivm.calculus.parser import parse
>>> from spark_ivm.calculus.expressions import MapRef
>>> make = lambda d: MapRef("m", d.group)
>>> str(extract_aggregates(parse("AggSum([], ΔS(b, c) * R(a, b) * a)"), make))
'AggSum([], ΔS(b, c) * m[b])'
"""

from __future__ import annotations

from typing import Callable

from spark_ivm.calculus.analysis import (
    all_vars, factors_of, has_delta, is_nested, ivars, ovars, reads_database, reads_maps, schedule,
)
from spark_ivm.calculus.expressions import (
    AggSum, Cmp, Const, Exists, Expr, Fn, Lift, MapRef, Rel, Sum, aggsum, exists, lift, prod, sum_,
)
from spark_ivm.heuristics import splits_map_at

from .factorize import connected_components

__all__ = ["extract_aggregates"]

Materialize = Callable[[Expr], MapRef]


def extract_aggregates(e: Expr, materialize: Materialize, bound: tuple[str, ...] = (),
                       key_filters: bool = True, lifted: bool = False) -> Expr:
    """key_filters: filters of the monomial's keys by constants move into the maps too (see
    `_push_into_maps`). lifted: e is the value of a lift, whose aggregates that hold nested ones may
    become maps whole (see `_nested_aggregate_map`)."""
    if isinstance(e, Sum):
        return sum_(*(extract_aggregates(t, materialize, bound, key_filters, lifted) for t in e.terms))
    if lifted and _nested_aggregate_map(e):
        ref = materialize(e)
        if isinstance(ref, MapRef):
            return ref
    if isinstance(e, AggSum):
        body = _extract_monomial(factors_of(e.expr), set(e.group) | set(bound), materialize, bound, key_filters,
                                 summed=True)
        if isinstance(body, MapRef) and set(ovars(body)) <= set(e.group):
            return body  # the map already holds the sum by these keys
        return aggsum(e.group, body)
    return _extract_monomial(factors_of(e), set(ovars(e)) | set(bound), materialize, bound, key_filters)


def _extract_monomial(factors, visible: set[str], materialize: Materialize, bound, key_filters: bool,
                      summed: bool = False) -> Expr:
    """summed: the monomial is the body of an AggSum, which sums away a variable that splitting a map
    adds to the maps' keys."""
    batch_side: list[Expr] = []
    database_side: list[Expr] = []
    known = set(bound)
    for f in factors:
        if is_nested(f) or reads_database(f) and has_delta(f):
            batch_side.append(_extract_within(f, materialize, tuple(known), key_filters))
        elif reads_database(f):
            database_side.append(f)
        else:
            batch_side.append(f)
        known.update(ovars(f))
    if not database_side:
        return prod(*batch_side)

    batch_side, database_side = _push_into_maps(batch_side, database_side, visible, key_filters)
    needed = visible | {v for f in batch_side for v in all_vars(f)}
    linking = {v for f in database_side for v in all_vars(f)} - needed
    refs = []
    for component, keyed_by in _split_at_shared_variables(
            connected_components(database_side, linking), linking, needed if summed else set()):
        body = prod(*component)
        keys = [v for v in all_vars(body) if v in needed or v in keyed_by]
        missing = [v for v in ivars(body) if v not in ovars(body)]
        if missing:
            raise NotImplementedError(f"map with input variables {missing}: {body}")
        refs.append(materialize(aggsum(keys, body)))
    return prod(*schedule(batch_side + refs, bound))


def _split_at_shared_variables(components, linking: set[str], needed: set[str]):
    """Each component as (its factors, the variables added to its keys): a component whose relations
    share a summed variable such that its map would hold a product (customers and suppliers of the
    same nation, say) is split there into maps keyed by that variable too (see heuristics.splits_map_at),
    joined on it by the statement. Without `needed` (a monomial outside an AggSum, where the variable
    would become free) nothing is split."""
    todo = [(c, frozenset()) for c in components]
    if not needed:
        return todo
    out = []
    while todo:
        component, keyed_by = todo.pop(0)
        split = _split_once(component, linking - keyed_by, needed | keyed_by)
        if split is None:
            out.append((component, keyed_by))
        else:
            var, parts = split
            todo[:0] = [(p, keyed_by | {var}) for p in parts]
    return out


def _split_once(component, linking: set[str], needed: set[str]):
    """(variable, parts) of the first split the policy takes, or None."""
    joined = {v: sum(1 for f in component if isinstance(f, Rel) and v in f.vars)
              for f in component for v in all_vars(f) if v in linking}
    for var in sorted(joined, key=lambda v: -joined[v]):
        if not splits_map_at(joined[var], len(component)):
            continue  # not split there even if every factor were a keyed part of its own
        parts = connected_components(component, linking - {var})
        keyed = sum(1 for p in parts if any(v in needed for f in p for v in all_vars(f)))
        if len(parts) > 1 and splits_map_at(joined[var], keyed):
            return var, parts
    return None


def _extract_within(f: Expr, materialize: Materialize, bound: tuple[str, ...], key_filters: bool) -> Expr:
    """The factor with the aggregates inside it extracted (the factor itself stays a factor)."""
    if isinstance(f, Lift):
        return lift(f.var, extract_aggregates(f.expr, materialize, bound, key_filters, lifted=True))
    if isinstance(f, Exists):
        return exists(extract_aggregates(f.expr, materialize, bound, key_filters))
    if isinstance(f, (Cmp, Fn)):
        return f.with_children(tuple(
            extract_aggregates(c, materialize, bound, key_filters) if reads_database(c) or has_delta(c) else c
            for c in f.children()))
    return extract_aggregates(f, materialize, bound, key_filters)


def _nested_aggregate_map(e: Expr) -> bool:
    """A lifted value kept as one map of its own: an aggregate of the database alone (no batch, no
    outer variable) keyed by columns of its relations, that holds nested aggregates. Its statements
    then read one value per key instead of re-evaluating the nested aggregates over every row of its
    relations per affected key. Keys that are computed values (q15's revenue) stay extracted: a map
    keyed by them would be as large as what it aggregates."""
    if not isinstance(e, AggSum) or has_delta(e) or reads_maps(e) or ivars(e) or not reads_database(e):
        return False
    columns = {v for f in factors_of(e.expr) if isinstance(f, Rel) for v in f.vars}
    return set(e.group) <= columns and any(is_nested(f) and reads_database(f) for f in factors_of(e.expr))


def _push_into_maps(batch_side: list[Expr], database_side: list[Expr], visible: set[str], key_filters: bool):
    """Move value factors that only concern database variables from the batch side into the maps: those
    that need a variable only the database binds, and (key_filters) filters by constants of the
    monomial's keys that the batch side does not bind and one database factor does, so that the map
    holds only the rows the statement keeps (TPC-H Q3's orders by date, kept only before the date)
    without joining two maps into one."""
    database_vars = {v for f in database_side for v in ovars(f)}
    moved = True
    while moved:
        moved = False
        bound_by_batch = {v for f in batch_side for v in ovars(f)}
        batch_vars = visible | bound_by_batch
        for f in batch_side:
            if has_delta(f) or reads_maps(f) or reads_database(f) or ovars(f) and not isinstance(f, Lift):
                continue  # a map's definition reads base relations only
            used = set(ivars(f))
            keys_filter = (key_filters and _filters_by_constant(f) and not used & bound_by_batch
                           and any(used <= set(ovars(g)) for g in database_side))
            if used <= database_vars and (keys_filter or not used <= batch_vars):
                batch_side = [g for g in batch_side if g is not f]
                database_side = database_side + [f]
                database_vars |= set(ovars(f))
                moved = True
                break
    return batch_side, database_side


def _filters_by_constant(f: Expr) -> bool:
    """A comparison of variables with a constant, not a NULL test: the NULL tests of join keys stay on
    the batch side, where the maps that share a definition without them stay one map."""
    return (isinstance(f, Cmp) and f.op not in ("is", "is not") and bool(ivars(f))
            and any(isinstance(x, Const) for x in f.walk()))
