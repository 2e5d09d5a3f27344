"""The view of an ordering's first rows (ORDER BY … LIMIT k), kept from a buffer of its leading groups.

Such a view's rows depend on every group of its query, yet a small change rarely moves more than a few:
computing them from the store reads every group of its maps at each refresh. So its definition carries,
beside its k rows, the maps of its leading groups and a bound (viewsql.Bound, ORDER BY values): the
buffer holds every group that sorts strictly before the bound, and no group outside it does. A refresh
- adds its increments of the view's maps to the buffer's groups, on the driver;
- reads the changed groups outside the buffer from the store at their keys, in one sorted and limited
  query (when more of them sort first than a buffer holds, the first left out tightens the bound): on the
  driver in DuckDB where the driver reads those rows of the store and holds the increments, else one Spark
  job;
- keeps the groups that now sort strictly before the bound: by the invariant, every group that does.
While at least k remain, the first k are the view's rows and the kept groups the next buffer. Otherwise
(the leading groups fell behind the bound) the buffer is computed again from the store: its first
heuristics.TOP_GROUPS_KEPT groups, the next one's ORDER BY values being the bound.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

from spark_ivm import heuristics
from spark_ivm.runtime.key_conditions import key_set_sql
from spark_ivm.runtime.viewsql import (
    Bound, Column, ORDER_COLUMN, held_bound_sql, held_maps_sql, inlinable, leading_groups_sql, literal,
    literal_rows_sql, map_columns, merged_maps, ordering, output_columns, rows_view_sql, view_maps,
)


@dataclass(frozen=True)
class Group:
    """One of the view's groups: its row (raw), ORDER BY values and keys (raw, in the query's key order)."""
    row: tuple
    order: tuple
    key: tuple


@dataclass
class Top:
    """The view's rows (raw) and its buffer: the leading groups in the view's order, their maps (raw rows
    in map_columns order) and the bound they sort before (values of `order`'s columns; none: every group)."""
    rows: list[tuple]
    groups: list[Group]
    maps: list[tuple]
    bound: tuple
    order: tuple[Column, ...]


def applies(entry, inline_rows: int) -> bool:
    """Whether the view shows the first rows of an ordering of groups that a buffer can keep: ORDER BY …
    LIMIT k of at most `inline_rows` rows, of groups of sums (no MIN, MAX, DISTINCT, bag), all of whose
    columns and maps' columns read back from literals."""
    query = entry.plan.query
    return (bool(query.order_by) and query.limit is not None and 0 < query.limit <= inline_rows
            and bool(query.keys) and not query.bag and all(a.reduce is None for a in query.aggregates)
            and all(inlinable(c.type_sql) for c in map_columns(entry) + output_columns(entry)))


def held(spark, view_text: str) -> tuple[list[tuple], tuple] | None:
    """The buffer a "rows" view's text carries, its maps and bound (no Spark job: literals), or None."""
    bound_sql = held_bound_sql(view_text)
    maps_sql = held_maps_sql(view_text, partial=True)
    if bound_sql is None or maps_sql is None:
        return None
    maps = [tuple(r) for r in spark.sql(maps_sql).collect()] if maps_sql else []
    return maps, tuple(spark.sql(bound_sql).collect()[0]) if bound_sql else ()


def computed(spark, entry, maps_at: str) -> Top | None:
    """The view's rows and buffer from its maps in `maps_at` (store rows): one Spark job."""
    found = _leading(spark, entry, maps_at)
    if found is None:
        return None
    groups, maps, bound, order, compare = found
    # Sorted from all groups: the first k are the view's rows even where they tie with the bound.
    return _top(entry, groups, maps, bound, order, compare, rows=[g.row for g in groups[:entry.plan.query.limit]])


def refreshed(spark, entry, buffer: tuple[list[tuple], tuple], increments: list[tuple], maps_at: str,
              driver: Driver | None = None) -> Top | None:
    """The view's rows and buffer after a refresh, from the buffer of the version it started from, its
    increments of the view's maps (raw rows in map_columns order) and the maps as of the new version in
    `maps_at`, or at given keys held by the `driver`; None where the leading groups fell behind the bound
    (or a value cannot be kept here)."""
    maps, bound = buffer
    key_of = _key_of(entry)
    buffered = {key_of(r) for r in maps}
    outside = {key_of(r) for r in increments} - buffered
    maps = merged_maps(maps, [r for r in increments if key_of(r) in buffered], map_columns(entry))
    ranked = _ranked_literals(spark, entry, maps)
    if ranked is None:
        return None
    groups, order, compare = ranked
    if outside:
        found = _leading_on_driver(entry, driver, outside) if driver is not None else None
        found = found or _leading(spark, entry, _at_keys(entry, maps_at, outside))
        if found is None:
            return None
        others, other_maps, other_bound, _, _ = found  # ordered as the buffer's groups (Spark's types)
        # Groups read beyond the first _kept sort no earlier than the first of them left out.
        if other_bound and (not bound or compare(other_bound, bound) < 0):
            bound = other_bound
        others = [g for g in others if g.key not in buffered]
        groups = sorted(groups + others, key=functools.cmp_to_key(lambda a, b: compare(a.order, b.order)))
        maps = maps + [m for m in other_maps if key_of(m) not in buffered]
    top = _top(entry, groups, maps, bound, order, compare)
    return top if len(top.rows) == entry.plan.query.limit or not top.bound else None


def view_text(entry, top: Top) -> str | None:
    """The view's "rows" definition carrying as much of the buffer as the metastore takes: its leading
    groups, fewer if need be (the first left out then bounds them); None if not even the view's rows with
    a buffer of as many groups fit."""
    limit = entry.plan.query.limit
    groups, maps, bound = top.groups, top.maps, top.bound
    key_of = _key_of(entry)
    while True:
        text = rows_view_sql(entry, top.rows, maps, Bound(bound, top.order))
        if len(text) <= heuristics.INLINE_SQL_CHARS_MAX:
            return text
        if len(groups) <= limit:
            return None
        bound = groups[max(limit, len(groups) // 2)].order
        groups = groups[:max(limit, len(groups) // 2)]
        kept = {g.key for g in groups}
        maps = [m for m in maps if key_of(m) in kept]


def _top(entry, groups: list[Group], maps: list[tuple], bound: tuple, order: tuple[Column, ...], compare,
         rows: list[tuple] | None = None) -> Top:
    """The view's rows (the first of the buffer's, unless given) and buffer from groups in the view's order
    and their maps: those strictly before the bound, at most _kept of them (the first left out then bounds
    them)."""
    if bound:
        groups = [g for g in groups if compare(g.order, bound) < 0]
    if len(groups) > _kept(entry):
        bound = groups[_kept(entry)].order
        groups = groups[:_kept(entry)]
    key_of = _key_of(entry)
    kept = {g.key for g in groups}
    rows = [g.row for g in groups[:entry.plan.query.limit]] if rows is None else rows
    return Top(rows, groups, [m for m in maps if key_of(m) in kept], bound, order)


def _kept(entry) -> int:
    """How many leading groups a buffer holds at most: TOP_GROUPS_KEPT, and never fewer than the view's rows."""
    return max(heuristics.TOP_GROUPS_KEPT, entry.plan.query.limit)


@dataclass(frozen=True)
class Driver:
    """What the driver offers a refresh of the view: `rows_at(column, values)`, a table expression of the
    maps as of the new version whose store column `column` holds one of the values (a superset), all held
    by the driver (None where it does not read them); `compute(sql)`, a query over held rows computed in
    DuckDB, as (Arrow rows, Spark schema) or None (see local_sql.DriverStatements.compute)."""
    rows_at: Callable[[str, list], str | None]
    compute: Callable[[str], tuple | None]


def _leading(spark, entry, maps_at: str):
    """The view's first _kept groups over the maps in `maps_at` (a query of store rows), their
    maps, the bound (the next group's ORDER BY values, or none), the ORDER BY columns and comparison; None
    where a value cannot be kept here."""
    frame = spark.sql(leading_groups_sql(entry, f"({maps_at}) AS maps", _kept(entry) + 1))
    return _groups_found(entry, frame.schema.fields, lambda: [tuple(r) for r in frame.collect()])


def _leading_on_driver(entry, driver: Driver, keys: set[tuple]):
    """_leading over the maps at the keys (of their first column), computed by the driver; None where it
    does not compute them."""
    column, values = _first_key(entry, keys)
    maps_at = driver.rows_at(column.name, values)
    computed = None if maps_at is None else driver.compute(leading_groups_sql(entry, f"({maps_at}) AS maps",
                                                                               _kept(entry) + 1))
    if computed is None:
        return None
    rows, schema = computed
    return _groups_found(entry, schema.fields, lambda: list(zip(*(c.to_pylist() for c in rows.columns))))


def _groups_found(entry, fields, collect: Callable[[], list[tuple]]):
    """_leading's result from the fields and rows (`collect`) of leading_groups_sql."""
    kept = _kept(entry)
    width, items, keys = len(output_columns(entry)), len(entry.plan.query.order_by), len(entry.plan.query.keys)
    order, compare = _ordering(entry, fields)
    if compare is None:
        return None
    rows = collect()
    groups = [Group(r[:width], r[width:width + items], r[width + items:width + items + keys]) for r in rows]
    if any(_unkeyable(g.key) for g in groups):
        return None
    maps = [m for g, r in zip(groups[:kept], rows) for m in _maps_of(entry, g.key, r[width + items + keys:])]
    bound = groups[kept].order if len(groups) > kept else ()
    return groups[:kept], maps, bound, order, compare


def _ranked_literals(spark, entry, maps: list[tuple]):
    """The groups of maps given as literals in the view's order, computed while Spark plans (no job), the
    ORDER BY columns and comparison; None where a value cannot be kept here."""
    sql = literal_rows_sql(entry, maps, keys=True)
    if sql is None:
        return None
    frame = spark.sql(sql)
    width, items = len(output_columns(entry)), len(entry.plan.query.order_by)
    order, compare = _ordering(entry, frame.schema.fields)
    if compare is None:
        return None
    groups = [Group(r[:width], r[width:width + items], r[width + items:]) for r in map(tuple, frame.collect())]
    if any(_unkeyable(g.key) for g in groups):
        return None
    return sorted(groups, key=functools.cmp_to_key(lambda a, b: compare(a.order, b.order))), order, compare


def _ordering(entry, fields):
    """The ORDER BY columns of the fields of the view's rows followed by their ORDER BY values, and their
    comparison (None where Spark's order is not reproduced here)."""
    width, items = len(output_columns(entry)), len(entry.plan.query.order_by)
    order = tuple(Column(ORDER_COLUMN.format(i), f.dataType.simpleString())
                  for i, f in enumerate(fields[width:width + items]))
    return order, ordering(entry, [c.type_sql for c in order])


def _maps_of(entry, key: tuple, sums: tuple) -> list[tuple]:
    """A group's map rows (raw, in map_columns order) from its keys and its aggregates' sums: one per map,
    or per map_id where maps share rows."""
    columns = map_columns(entry)
    position = {c.name: i for i, c in enumerate(columns)}
    layout = entry.layout
    key_at = [position[layout.key_column(k)] for k in entry.plan.query.keys]
    rows: dict[int, list] = {}
    for m, value in zip(view_maps(entry), sums):
        if value in (None, 0):
            continue  # no rows at this key: the store's sum reads as 0 too
        row = rows.get(m.map_id)
        if row is None:
            row = rows[m.map_id] = [None] * len(columns)
            row[0] = m.map_id
            for at, k in zip(key_at, key):
                row[at] = k
        row[position[m.value_column]] = value
    return [tuple(row) for row in rows.values()]


def _key_of(entry):
    """The function giving a map row's (raw, map_columns order) group key, in the query's key order."""
    position = {c.name: i for i, c in enumerate(map_columns(entry))}
    at = [position[entry.layout.key_column(k)] for k in entry.plan.query.keys]
    return lambda row: tuple(row[i] for i in at)


def _at_keys(entry, maps_at: str, keys: set[tuple]) -> str:
    """The rows of `maps_at` whose first key column holds a value of the keys' (a superset of theirs)."""
    column, values = _first_key(entry, keys)
    condition = key_set_sql(column.name, [column.typed(literal(v, column)) for v in values])
    return f"SELECT * FROM ({maps_at}) AS m WHERE {condition}"


def _first_key(entry, keys: set[tuple]) -> tuple[Column, list]:
    """The store column of the view's first key, and the keys' non-NULL values in it."""
    column = next(c for c in map_columns(entry) if c.name == entry.layout.key_column(entry.plan.query.keys[0]))
    return column, sorted({k[0] for k in keys if k[0] is not None}, key=repr)


def _unkeyable(key: tuple) -> bool:
    """Whether a key cannot be matched by equality here (NaN is not equal to itself)."""
    return any(isinstance(v, float) and math.isnan(v) for v in key)
