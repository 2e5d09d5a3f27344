"""Extraction of aggregates into maps (the materialization step of the viewlet transform).

In each monomial of a delta, the factors that read the database (and no delta) are grouped into
connected components; each component becomes a map `m[k]` keyed by the variables it shares with the
rest of the monomial (the batch's variables, the group variables, variables compared with the
batch). Values and filters that only mention a component's variables move into that component, so
maps hold pre-filtered, pre-multiplied sums. `materialize` turns a definition `AggSum(k, …)` into a
map reference (creating or reusing a map): this rule is mechanism, the compiler decides the names.

>>> from spark_ivm.calculus_parser import parse
>>> from spark_ivm.calculus import MapRef
>>> make = lambda d: MapRef("m", d.group)
>>> str(extract_aggregates(parse("AggSum([], ΔS(b, c) * R(a, b) * a)"), make))
'AggSum([], ΔS(b, c) * m[b])'
"""

from __future__ import annotations

from typing import Callable

from spark_ivm.analysis import (
    all_vars, factors_of, has_delta, ivars, ovars, reads_database, schedule,
)
from spark_ivm.calculus import AggSum, Expr, Lift, MapRef, Sum, aggsum, prod, sum_

from .factorize import connected_components

__all__ = ["extract_aggregates"]

Materialize = Callable[[Expr], MapRef]


def extract_aggregates(e: Expr, materialize: Materialize, bound: tuple[str, ...] = ()) -> Expr:
    if isinstance(e, Sum):
        return sum_(*(extract_aggregates(t, materialize, bound) for t in e.terms))
    if isinstance(e, AggSum):
        body = _extract_monomial(factors_of(e.expr), set(e.group) | set(bound), materialize, bound)
        return aggsum(e.group, body)
    return _extract_monomial(factors_of(e), set(ovars(e)) | set(bound), materialize, bound)


def _extract_monomial(factors, visible: set[str], materialize: Materialize, bound) -> Expr:
    batch_side: list[Expr] = []
    database_side: list[Expr] = []
    known = set(bound)
    for f in factors:
        if reads_database(f) and not has_delta(f):
            database_side.append(f)
        elif reads_database(f):
            batch_side.append(extract_aggregates(f, materialize, tuple(known)))
        else:
            batch_side.append(f)
        known.update(ovars(f))
    if not database_side:
        return prod(*factors)

    batch_side, database_side = _push_into_maps(batch_side, database_side, visible)
    needed = visible | {v for f in batch_side for v in all_vars(f)}
    linking = {v for f in database_side for v in all_vars(f)} - needed
    refs = []
    for component in connected_components(database_side, linking):
        body = prod(*component)
        keys = [v for v in all_vars(body) if v in needed]
        missing = [v for v in ivars(body) if v not in ovars(body)]
        if missing:
            raise NotImplementedError(f"map with input variables {missing}: {body}")
        refs.append(materialize(aggsum(keys, body)))
    return prod(*schedule(batch_side + refs, bound))


def _push_into_maps(batch_side: list[Expr], database_side: list[Expr], visible: set[str]):
    """Move value factors that only concern database variables from the batch side into the maps."""
    database_vars = {v for f in database_side for v in ovars(f)}
    moved = True
    while moved:
        moved = False
        batch_vars = visible | {v for f in batch_side for v in ovars(f)}
        for f in batch_side:
            if has_delta(f) or ovars(f) and not isinstance(f, Lift):
                continue
            used = set(ivars(f))
            if used <= database_vars and not used <= batch_vars:
                batch_side = [g for g in batch_side if g is not f]
                database_side = database_side + [f]
                database_vars |= set(ovars(f))
                moved = True
                break
    return batch_side, database_side
