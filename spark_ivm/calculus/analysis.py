"""Structural facts about calculus expressions: variables, schemas, relations read, degree, renaming."""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, Mapping

from spark_ivm.calculus.expressions import (
    AggSum, Cmp, Const, DeltaRel, Exists, Expr, Fn, Lift, MapRef, Prod, Rel, Sum, Var, aggsum, lift,
)


def _ordered(*groups) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v for g in groups for v in g))


@lru_cache(maxsize=100_000)
def schema(e: Expr) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(input variables, output variables) of e, independent of any outer scope.

    Input variables must be bound from outside; output variables are bound by e. In a product, a
    factor's inputs may be bound by the factors to its left.
    """
    if isinstance(e, Const):
        return (), ()
    if isinstance(e, Var):
        return (e.name,), ()
    if isinstance(e, (Rel, DeltaRel)):
        return (), _ordered(e.vars)
    if isinstance(e, MapRef):
        return (), _ordered(e.keys)
    if isinstance(e, (Fn, Cmp)):
        # A value needs every variable its arguments mention or bind (a nested aggregate's group).
        return _ordered(*(_ordered(*schema(c)) for c in e.children())), ()
    if isinstance(e, Lift):
        ins, outs = schema(e.expr)
        return _ordered(ins, outs), (e.var,)
    if isinstance(e, AggSum):
        ins, outs = schema(e.expr)
        return ins, tuple(g for g in e.group if g in outs)
    if isinstance(e, Exists):
        return schema(e.expr)
    if isinstance(e, Sum):
        # A sum binds the variables every term binds; one that only some terms bind (the terms of a
        # nested aggregate's delta may have different correlations) must be bound from outside.
        parts = [schema(t) for t in e.terms]
        everywhere = [v for v in parts[0][1] if all(v in p[1] for p in parts)]
        elsewhere = [v for p in parts for v in p[1] if v not in everywhere]
        return _ordered(*(p[0] for p in parts), elsewhere), tuple(everywhere)
    if isinstance(e, Prod):
        ins: list[str] = []
        outs: list[str] = []
        for f in e.factors:
            f_ins, f_outs = schema(f)
            ins.extend(v for v in f_ins if v not in outs)
            outs.extend(f_outs)
        return _ordered(ins), _ordered(outs)
    raise TypeError(f"unknown node {e!r}")


def ivars(e: Expr) -> tuple[str, ...]:
    return schema(e)[0]


def ovars(e: Expr) -> tuple[str, ...]:
    return schema(e)[1]


@lru_cache(maxsize=100_000)
def all_vars(e: Expr) -> tuple[str, ...]:
    """Every variable mentioned anywhere in e (bound, free, grouped)."""
    own: tuple[str, ...] = ()
    if isinstance(e, Var):
        own = (e.name,)
    elif isinstance(e, (Rel, DeltaRel)):
        own = e.vars
    elif isinstance(e, MapRef):
        own = e.keys
    elif isinstance(e, Lift):
        own = (e.var,)
    elif isinstance(e, AggSum):
        own = e.group
    return _ordered(own, *(all_vars(c) for c in e.children()))


def relations(e: Expr) -> tuple[str, ...]:
    """Names of the base relations e reads (not deltas, not maps), in order of appearance."""
    return _ordered(x.name for x in e.walk() if isinstance(x, Rel))


def delta_relations(e: Expr) -> tuple[str, ...]:
    return _ordered(x.name for x in e.walk() if isinstance(x, DeltaRel))


def map_names(e: Expr) -> tuple[str, ...]:
    return _ordered(x.name for x in e.walk() if isinstance(x, MapRef))


def reads_database(e: Expr) -> bool:
    return any(isinstance(x, Rel) for x in e.walk())


def joins(e: Expr) -> bool:
    """Whether e reads more than one relation, batch or map (a batch twice counts twice): it joins rows."""
    return sum(isinstance(x, (Rel, DeltaRel, MapRef)) for x in e.walk()) > 1


def is_value(e: Expr) -> bool:
    """A pure value term: no relation, delta, map, lift or aggregate inside."""
    return all(isinstance(x, (Const, Var, Fn, Cmp, Prod)) for x in e.walk())


def degree(e: Expr) -> int:
    """The polynomial degree in base relations (a delta lowers it by one)."""
    if isinstance(e, Rel):
        return 1
    if isinstance(e, Prod):
        return sum(degree(f) for f in e.factors)
    if isinstance(e, Sum):
        return max((degree(t) for t in e.terms), default=0)
    if isinstance(e, (AggSum, Exists)):
        return degree(e.expr)
    if isinstance(e, Lift):
        return degree(e.expr)
    if isinstance(e, (Fn, Cmp)):
        return max((degree(c) for c in e.children()), default=0)
    return 0


def rename(e: Expr, mapping: Mapping[str, str]) -> Expr:
    """Rename variables everywhere in e (binding sites included)."""
    if not mapping:
        return e
    r = lambda v: mapping.get(v, v)  # noqa: E731
    if isinstance(e, Var):
        return Var(r(e.name))
    if isinstance(e, Rel):
        return Rel(e.name, tuple(map(r, e.vars)))
    if isinstance(e, DeltaRel):
        return DeltaRel(e.name, tuple(map(r, e.vars)))
    if isinstance(e, MapRef):
        return MapRef(e.name, tuple(map(r, e.keys)))
    if isinstance(e, Lift):
        return lift(r(e.var), rename(e.expr, mapping))
    if isinstance(e, AggSum):
        return aggsum(tuple(map(r, e.group)), rename(e.expr, mapping))
    if not e.children():
        return e
    return e.with_children(tuple(rename(c, mapping) for c in e.children()))


def transform_up(e: Expr, f: Callable[[Expr], Expr]) -> Expr:
    """Apply f bottom-up: children first, then the rebuilt node."""
    kids = e.children()
    if kids:
        new_kids = tuple(transform_up(c, f) for c in kids)
        if new_kids != kids:
            e = e.with_children(new_kids)
    return f(e)


def schedule(factors, bound=()) -> list[Expr]:
    """Order factors so each one's inputs are bound by the outer scope or by factors to its left.

    Stable: a product that is already in a valid order is returned unchanged.
    """
    remaining = list(factors)
    known = set(bound)
    ordered: list[Expr] = []
    while remaining:
        pick = next((i for i, f in enumerate(remaining) if set(ivars(f)) <= known), 0)
        f = remaining.pop(pick)
        ordered.append(f)
        known.update(ovars(f))
    return ordered


def join_order(factors, bound=()) -> list[Expr]:
    """A valid order (see `schedule`) for evaluating a product as joins: batches first, as they drive the
    joins; then each time the first factor whose inputs are bound that only tests what is bound so far (a
    relation or map all of whose variables are bound, a comparison without nested aggregates), else the
    first that does not bind variables apart from all bound so far, unless none does.

    Delta rules put a batch next to the factors of the term it replaced, not next to those it shares
    variables with: ΔL(o, c) * M1[c, name] * M2[o] taken as written joins the batch with all of M1 before
    M2 narrows it down (TPC-H Q10: the batch times every customer). A test narrows the rows before any
    join that adds rows to them: TPC-H Q17 joins the parts a lineitem batch touches with the map of their
    quantities (millions of rows) after the map of parts of the brand and container the query asks for."""
    remaining = sorted(factors, key=lambda f: not isinstance(f, DeltaRel))
    known = set(bound)

    def apart(f: Expr) -> bool:  # a cross join with what is bound so far
        outs = set(ovars(f))
        return bool(known) and bool(outs - known) and not (outs & known)

    def test(f: Expr) -> bool:  # binds nothing new and is cheap to join or check
        return (isinstance(f, (Rel, DeltaRel, MapRef)) or isinstance(f, Cmp) and not reads_database(f)) \
            and set(all_vars(f)) <= known

    ordered: list[Expr] = []
    while remaining:
        ready = [i for i, f in enumerate(remaining) if set(ivars(f)) <= known]
        pick = next((i for i in ready if test(remaining[i])), None)
        if pick is None:
            pick = next((i for i in ready if not apart(remaining[i])), ready[0] if ready else 0)
        f = remaining.pop(pick)
        ordered.append(f)
        known.update(ovars(f))
    return ordered


def factors_of(e: Expr) -> tuple[Expr, ...]:
    return e.factors if isinstance(e, Prod) else (e,)


def has_delta(e: Expr) -> bool:
    return any(isinstance(x, DeltaRel) for x in e.walk())


def reads_maps(e: Expr) -> bool:
    return any(isinstance(x, MapRef) for x in e.walk())


def is_nested(e: Expr) -> bool:
    """A factor that is not itself a sum over the database but holds one: a lift, an existence test
    or a value of a nested aggregate (SQL's scalar subqueries, EXISTS, IN, outer-join match counts)."""
    return isinstance(e, (Lift, Exists, Cmp, Fn)) and reads_database(e)


def affected_key_domains(e: Expr) -> list[Exists]:
    """The domains `Exists(Δt)` a delta of nested aggregates is restricted to (see `delta`): the
    statement re-evaluates its nested parts only for the keys these bind."""
    return [x for x in e.walk() if isinstance(x, Exists) and has_delta(x)]


def map_key_bindings(e: Expr) -> list[tuple[str, tuple[tuple[int, str, int], ...]]]:
    """Every map reference in e, with the keys a batch fixes: (map name, ((key position, delta relation,
    column position), …)) for each reference, in order.

    A key is fixed where its variable can only hold a value of a batch column, so that only the map's
    rows whose key is among the batch's values in that column can contribute:
    - the reference is a factor of a product whose other factors are non-zero only where the variable
      holds such a value (batch_columns): a batch ΔR sharing the variable, or a restriction to the keys
      a batch affects, such as `Exists(AggSum([k], ΔR(…k…)))`; the product is zero elsewhere;
    - or it is nested (in a lift, an existence test, a nested aggregate) in a factor to the right of such
      a factor: factors bind variables left to right, and a nested reference reads the bound value.
    Anything else fixes nothing: the tuple is empty."""
    return [(name, fixed) for name, fixed, _ in map_key_references(e)]


def map_key_links(e: Expr) -> list[tuple[str, tuple[tuple[int, str, int], ...]]]:
    """Every map reference in e, in the order of map_key_bindings, with the keys another map fixes: (map
    name, ((key position, other map, its key position), …)). A key not fixed by a batch is fixed by
    another map where both are factors of one product, share the key's variable, and a batch fixes a
    key of the other: the product is zero unless the variable holds a key of the other map's rows at
    the batch's values (a batch of customers reaches the lineitems' maps through the orders' map). A key a
    batch fixes is linked to every other such map too: the other's rows at the batch's values may hold
    few of them (TPC-H Q17: the parts of one brand and container among the parts a lineitem batch
    touches bound the map of quantities per part)."""
    return [(name, links) for name, _, links in map_key_references(e)]


def map_key_references(e: Expr) -> list[tuple[str, tuple, tuple]]:
    """Every map reference in e: (map name, the keys a batch fixes as map_key_bindings gives them, the keys
    another map fixes as map_key_links gives them), in one walk of e."""
    found: list[tuple[str, tuple, tuple]] = []

    def fixed(ref: MapRef, columns: dict[str, tuple[str, int]]) -> tuple[tuple[int, str, int], ...]:
        return tuple((i, *columns[k]) for i, k in enumerate(ref.keys) if k in columns)

    def linked(ref: MapRef, fixing: list[MapRef], columns: dict[str, tuple[str, int]]) -> tuple:
        links = []
        for i, k in enumerate(ref.keys):
            others = list(dict.fromkeys((g.name, g.keys.index(k)) for g in fixing if g is not ref and k in g.keys))
            links += [(i, *other) for other in (others if k in columns else others[:1])]
        return tuple(links)

    def visit(node: Expr, bound: dict[str, tuple[str, int]]) -> None:
        """bound: the variables bound to batch columns by the enclosing products' factors to the left."""
        if isinstance(node, MapRef):
            found.append((node.name, fixed(node, bound), ()))
            return
        if not isinstance(node, Prod):
            for child in node.children():
                visit(child, bound)
            return
        anywhere = dict(bound)  # variable -> the first batch column binding it, by any factor
        for f in node.factors:
            if not isinstance(f, MapRef):
                for v, column in batch_columns(f).items():
                    anywhere.setdefault(v, column)
        fixing = [f for f in node.factors if isinstance(f, MapRef) and fixed(f, anywhere)]
        left = dict(bound)
        for f in node.factors:
            if isinstance(f, MapRef):
                found.append((f.name, fixed(f, anywhere), linked(f, fixing, anywhere)))
            else:
                visit(f, left)
                for v, column in batch_columns(f).items():
                    left.setdefault(v, column)

    visit(e, {})
    return found


def batch_columns(e: Expr) -> dict[str, tuple[str, int]]:
    """Output variables of e that hold a value of a batch column wherever e is non-zero: variable ->
    (delta relation, column position). A product is non-zero only where each factor is; a sum only where
    some term is, so a sum binds a variable only where all its terms bind it to the same column."""
    if isinstance(e, DeltaRel):
        columns: dict[str, tuple[str, int]] = {}
        for position, v in enumerate(e.vars):
            columns.setdefault(v, (e.name, position))
        return columns
    if isinstance(e, Prod):
        columns = {}
        for f in e.factors:
            for v, column in batch_columns(f).items():
                columns.setdefault(v, column)
        return columns
    if isinstance(e, AggSum):
        return {v: c for v, c in batch_columns(e.expr).items() if v in e.group}
    if isinstance(e, Exists):
        return batch_columns(e.expr)
    if isinstance(e, Sum) and e.terms:
        first, *rest = (batch_columns(t) for t in e.terms)
        return {v: c for v, c in first.items() if all(other.get(v) == c for other in rest)}
    return {}
