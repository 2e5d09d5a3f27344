"""The viewlet transform: materialize the view, take its delta per base relation, extract the
database-reading parts of each delta as new maps, and recurse on those maps until the deltas read
only the batch (or the policy's depth is reached). Given statistics, the policy keeps a map only where
it is much smaller than the relations it reads; the deltas read the relations in place of the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from spark_ivm.calculus.analysis import all_vars, reads_database, relations, rename, transform_up
from spark_ivm.calculus.delta import delta
from spark_ivm.calculus.expressions import ZERO, AggSum, Expr, MapRef, aggsum, sum_
from spark_ivm.compiler.estimate import estimated_rows, source_rows
from spark_ivm.compiler.plan import MapDecl, Plan, Statement, Trigger
from spark_ivm.errors import UnsupportedQueryError
from spark_ivm.frontend.view_query import ViewQuery
from spark_ivm.heuristics import Policy, key_filters_in_maps, materializes
from spark_ivm.rules import SIMPLIFY, RuleExecutor, extract_aggregates

__all__ = ["compile_maps", "compile_query", "compile_view", "simplify"]


def simplify(e: Expr, strict: bool = False) -> Expr:
    return RuleExecutor(SIMPLIFY, strict=strict).execute(e)


def canonical(definition: AggSum) -> Expr:
    """The definition with variables renamed by position: equal for maps that hold the same data."""
    names = {k: f"#k{i}" for i, k in enumerate(definition.group)}
    for v in all_vars(definition):
        names.setdefault(v, f"#v{len(names)}")
    return rename(definition, names)


@dataclass
class MapRegistry:
    """Every map of a plan, with sharing of maps whose canonical definitions are equal."""

    maps: list[MapDecl] = field(default_factory=list)
    by_definition: dict[Expr, MapDecl] = field(default_factory=dict)
    roots: dict[str, str] = field(default_factory=dict)  # map name -> name of its level-0 ancestor
    notes: dict[str, None] = field(default_factory=dict)  # the materialization decisions, in order

    def declare(self, name: str, definition: AggSum, level: int, maintenance: str) -> MapDecl:
        if any(m.name == name for m in self.maps):
            raise ValueError(f"map {name} declared twice")
        m = MapDecl(name, definition.group, definition, level, maintenance)
        self.maps.append(m)
        self.by_definition.setdefault(canonical(definition), m)
        return m

    def shared(self, definition: AggSum) -> MapDecl | None:
        return self.by_definition.get(canonical(definition))

    def fresh_name(self, stem: str) -> str:
        taken = {m.name for m in self.maps}
        if stem not in taken:
            return stem
        n = 2
        while f"{stem}{n}" in taken:
            n += 1
        return f"{stem}{n}"


def compile_maps(
    roots: Sequence[tuple[str, Expr]],
    policy: Policy = Policy(),
    query: ViewQuery | None = None,
    strict: bool = False,
) -> Plan:
    """Compile maps given as (name, AggSum definition) into a plan of triggers."""
    registry = MapRegistry()
    for name, definition in roots:
        if not isinstance(definition, AggSum):
            raise ValueError(f"map {name} must be defined by an AggSum, got {definition}")
        # A simplified definition may be a sum of AggSums (e.g. from OR); the map keeps one group.
        definition = aggsum(definition.group, simplify(definition, strict))
        if not isinstance(definition, AggSum):  # 0: a condition no row meets ('a' = 1, say), left to the rules
            raise UnsupportedQueryError("a query or aggregate that is empty whatever the data",
                                        detail=f"map {name} simplifies to 0: a condition is always false")
        existing = registry.shared(definition)
        registry.declare(name, definition, 0, policy.maintenance(0))
        registry.roots[name] = name if existing is None else registry.roots[existing.name]

    statements: dict[str, list[Statement]] = {}
    done = 0
    while done < len(registry.maps):
        m = registry.maps[done]
        done += 1
        for relation in relations(m.definition):
            stmt = _statement(m, relation, registry, policy, strict)
            if stmt is not None:
                statements.setdefault(relation, []).append(stmt)

    triggers = tuple(Trigger(r, tuple(s)) for r, s in statements.items())
    return Plan(tuple(registry.maps), triggers, query=query, depth=policy.depth, notes=tuple(registry.notes))


def _statement(m: MapDecl, relation: str, registry: MapRegistry, policy: Policy, strict: bool):
    if m.maintenance == "recompute":
        return Statement(m.name, m.keys, ":=", m.definition)
    d = simplify(delta(m.definition, relation), strict)
    if d == ZERO:
        return None
    if m.maintenance != "incremental":
        return Statement(m.name, m.keys, "+=", d)
    # Decided on dry runs (maps looked up, not declared), so that the form not taken leaves no maps.
    key_filters, over_maps = _key_filters_in_maps(d, registry, policy)
    look_up = _look_up(registry, policy)
    delta_size = _size(over_maps)
    if policy.reevaluates(delta_size):
        contents = _contents_after_batch(m, relation, look_up, look_up, policy, strict, key_filters)
        if contents is not None and _size(contents) < delta_size:
            contents = _contents_after_batch(m, relation, _materializer(registry, policy, m, relation, 1),
                                             _materializer(registry, policy, m, relation, 2), policy, strict,
                                             key_filters)
            return Statement(m.name, m.keys, ":=", contents)
    materialize = _materializer(registry, policy, m, relation, 1)
    return Statement(m.name, m.keys, "+=", extract_aggregates(d, materialize, key_filters=key_filters))


def _key_filters_in_maps(d: Expr, registry: MapRegistry, policy: Policy) -> tuple[bool, Expr]:
    """Whether the maps of this delta take in the filters of their keys by constants, by the maps not
    declared yet that either form needs (heuristics.key_filters_in_maps), and the delta over the maps of
    the form taken (looked up, not declared)."""
    forms = {}
    for key_filters in (True, False):
        placeholders: dict[Expr, str] = {}
        over_maps = extract_aggregates(d, _look_up(registry, policy, placeholders), key_filters=key_filters)
        forms[key_filters] = (over_maps, len(placeholders))
        if not placeholders:
            return key_filters, over_maps  # no new map: no form needs fewer
    taken = key_filters_in_maps(forms[True][1], forms[False][1])
    return taken, forms[taken][0]


def _size(e: Expr) -> int:
    return sum(1 for _ in e.walk())


def _materializer(registry: MapRegistry, policy: Policy, m: MapDecl, relation: str, levels_down: int):
    """Turns a definition into a reference to its map, declaring the map (a level below m's) if new."""
    root = registry.roots[m.name]
    level = m.level + levels_down

    def materialize(definition: AggSum) -> MapRef | AggSum:
        existing = registry.shared(definition)
        if existing is None:
            estimate = _estimate(definition, policy)
            if estimate is not None and not materializes(*estimate):
                registry.notes[f"not kept: a map [{', '.join(definition.group)}] of "
                               f"{' * '.join(dict.fromkeys(relations(definition)))}, about {estimate[0]:,} rows "
                               f"over {estimate[1]:,} rows: its statements read the relations"] = None
                return definition
            name = registry.fresh_name(f"{root}_m{relation}")
            existing = registry.declare(name, definition, level, policy.maintenance(level))
            registry.roots[name] = root
            if estimate is not None:
                registry.notes[f"kept: {name}, about {estimate[0]:,} rows over {estimate[1]:,} rows"] = None
        return MapRef(existing.name, definition.group)

    return materialize


def _estimate(definition: AggSum, policy: Policy) -> tuple[int, int] | None:
    """A map's estimated rows and the rows of the relations it reads, by the policy's statistics (None: no
    statistics of them)."""
    if policy.statistics is None:
        return None
    rows, read = estimated_rows(definition, policy.statistics), source_rows(definition, policy.statistics)
    return None if rows is None or read is None else (rows, read)


def _look_up(registry: MapRegistry, policy: Policy, placeholders: dict[Expr, str] | None = None):
    """Like a materializer, but declares nothing: a map not declared yet gets a placeholder name (kept in
    `placeholders`, by canonical definition)."""
    placeholders = {} if placeholders is None else placeholders

    def look_up(definition: AggSum) -> MapRef | AggSum:
        existing = registry.shared(definition)
        if existing is not None:
            return MapRef(existing.name, definition.group)
        estimate = _estimate(definition, policy)
        if estimate is not None and not materializes(*estimate):
            return definition
        name = placeholders.setdefault(canonical(definition), f"?{len(placeholders)}")
        return MapRef(name, definition.group)

    return look_up


def _contents_after_batch(m: MapDecl, relation: str, materialize, materialize_deeper, policy: Policy,
                          strict: bool, key_filters: bool) -> Expr | None:
    """m's contents after a batch of `relation`, computed from the maps before it and the batch: m's
    definition over maps, each map M that reads the relation replaced by `M + ΔM`. None when that would
    read a base relation (a map below m is maintained first-order)."""
    sites: dict[MapRef, AggSum] = {}

    def at_site(definition: AggSum) -> MapRef:
        ref = materialize(definition)
        sites[ref] = definition
        return ref

    over_maps = extract_aggregates(m.definition, at_site, key_filters=key_filters)
    incremental_below = policy.maintenance(m.level + 1) == "incremental"

    def after_batch(x: Expr) -> Expr:
        if not isinstance(x, MapRef) or x not in sites:
            return x
        d = simplify(delta(sites[x], relation), strict)
        if d == ZERO:
            return x
        return sum_(x, extract_aggregates(d, materialize_deeper, key_filters=key_filters) if incremental_below else d)

    contents = transform_up(over_maps, after_batch)
    return None if reads_database(contents) else contents


def compile_query(query: ViewQuery, name: str = "q", depth: int | None = None, strict: bool = False,
                  policy: Policy | None = None) -> Plan:
    """The plan of a view; policy, when given, replaces the default policy of the depth."""
    roots = [(f"{name}_{a.name}", a.definition) for a in query.aggregates]
    try:
        return compile_maps(roots, policy or Policy(depth), query=query, strict=strict)
    except RecursionError:
        from spark_ivm.frontend.source import nested_too_deeply

        raise nested_too_deeply() from None
    except NotImplementedError as e:  # a map the rules cannot form, e.g. of a subquery correlated through OR
        raise UnsupportedQueryError("a query the compiler cannot turn into maps", detail=str(e)) from None


def compile_view(
    sql: str,
    schemas: Mapping[str, Sequence[object]],
    depth: int | None = None,
    name: str = "q",
) -> Plan:
    """Compile `SELECT …` over tables with the given columns into a plan of maps and triggers. A column
    is its name, a (name, type) pair, or (name, type, nullable) with nullable False for a column declared
    NOT NULL (or a Spark StructField)."""
    from spark_ivm.frontend.translate import translate

    return compile_query(translate(sql, schemas), name=name, depth=depth)
