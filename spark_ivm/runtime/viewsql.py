"""The user's view: a Spark view that returns exactly what the defining query returns, from the view's maps.

It takes one of two forms, chosen by the refresh that last wrote the store (see publish.py):
- "store": SQL over the map store. Reading it reads the store's latest version, and the first read of a
  new version makes Delta rebuild its state of the table (a few Spark jobs) before aggregating the maps.
- "rows": the view's rows as literals (a VALUES list) in its definition. Reading it runs no Spark job and
  touches no Delta table. The definition also carries, in a comment, the rows of the maps the view reads
  (one per map and key) when they fit: the next refresh adds its increments to them on the driver.
The literals hold at most spark.ivm.inlineRows rows each and heuristics.INLINE_SQL_CHARS_MAX characters in
all.
A view of the first rows of an ordering (ORDER BY … LIMIT) may carry the maps of its leading groups only,
with the bound they sort before (see top_rows.py).
The view's properties say which form it has, the store version it shows and whether it carries its maps
(PROPERTY_FORM, PROPERTY_VERSION, PROPERTY_MAPS: "yes", "no", or "top" for the leading groups').
"""

from __future__ import annotations

import datetime
import decimal
import functools
import math
import re
from dataclasses import dataclass
from decimal import Decimal

import sqlglot

from spark_ivm.runtime.mapstore import StoredMap
from spark_ivm.runtime.sqlgen import quote

PROPERTY_FORM = "spark_ivm.form"
PROPERTY_VERSION = "spark_ivm.store_version"
PROPERTY_MAPS = "spark_ivm.maps"  # "yes" when the definition carries the view's maps
STORE, ROWS = "store", "rows"
TOP = "top"  # PROPERTY_MAPS of a "rows" view carrying its leading groups' maps (see top_rows.py)
MAPS_TABLE = "__ivm_maps"  # the name the view's SQL reads its maps by when computed from literals
# The maps' rows in a "rows" view's text: a comment inside its SELECT, which Spark keeps in the view's text
# and skips when it reads the view. The literals in it write "*" as \u002a, so that no string in them
# opens or closes a comment.
_BEGIN, _END = "/*spark_ivm maps ", " spark_ivm end*/"
_BOUND = "/*spark_ivm bound "

_EXACT_TYPES = re.compile(r"tinyint|smallint|int|bigint|boolean|string|date|timestamp_ntz|binary|double|float"
                          r"|decimal\(\d+,\d+\)")


@dataclass(frozen=True)
class Column:
    """A column of inline rows: its name, Spark SQL type, the SQL that reads its value from a query's column
    for writing as a literal (raw), and the SQL that turns the literal back into the column (typed)."""
    name: str
    type_sql: str

    @property
    def timestamp(self) -> bool:
        return self.type_sql == "timestamp"

    def raw(self, column_sql: str) -> str:
        # A TIMESTAMP's value in Python depends on the driver's time zone; its microseconds do not.
        return f"unix_micros({column_sql})" if self.timestamp else column_sql

    def typed(self, raw_sql: str) -> str:
        return f"timestamp_micros({raw_sql})" if self.timestamp else f"CAST({raw_sql} AS {self.type_sql})"


def inlinable(type_sql: str) -> bool:
    """Whether values of the type can be written as literals that read back as the same values."""
    return type_sql == "timestamp" or bool(_EXACT_TYPES.fullmatch(type_sql))


def literal(value, column: Column, in_comment: bool = False) -> str:
    """A value (as Spark returns it for `column.raw(...)`) as a SQL literal."""
    if value is None:
        return "NULL"
    t = column.type_sql
    if column.timestamp or t in ("tinyint", "smallint", "int", "bigint"):
        return f"{int(value)}L"
    if t == "boolean":
        return "TRUE" if value else "FALSE"
    if t.startswith("decimal"):
        return f"{Decimal(value):f}BD"
    if t in ("double", "float"):
        text = "NaN" if math.isnan(value) else "Infinity" if value == math.inf else "-Infinity" if value == -math.inf \
            else repr(float(value))
        return f"CAST('{text}' AS DOUBLE)"
    if t == "date":
        return f"DATE '{value.isoformat()}'"
    if t == "timestamp_ntz":
        return f"TIMESTAMP_NTZ '{value.isoformat(sep=' ')}'"
    if t == "binary":
        return f"X'{bytes(value).hex()}'"
    return _string_literal(str(value), in_comment)


def _string_literal(text: str, in_comment: bool) -> str:
    escaped = []
    for ch in text:
        if ch in "\\'":
            escaped.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F or (in_comment and ch == "*"):
            escaped.append(f"\\u{ord(ch):04x}")
        else:
            escaped.append(ch)
    return "'" + "".join(escaped) + "'"


def _values(rows: list[tuple], columns: list[Column], alias: str, in_comment: bool = False) -> str:
    names = ", ".join(f"c{i}" for i in range(len(columns)))
    values = ", ".join("(" + ", ".join(literal(v, c, in_comment) for v, c in zip(row, columns)) + ")" for row in rows)
    return f"VALUES {values} AS {alias}({names})"


def values_sql(rows: list[tuple], columns: list[Column], note: str = "") -> str:
    """SELECT of the rows as literals, each column named and typed as `columns` say; `note`, a comment
    placed inside the SELECT."""
    if not rows:
        nulls = ", ".join(f"CAST(NULL AS {c.type_sql}) AS {quote(c.name)}" for c in columns)
        return f"SELECT {note}{nulls} WHERE FALSE"
    typed = ", ".join(f"{c.typed(f'c{i}')} AS {quote(c.name)}" for i, c in enumerate(columns))
    return f"SELECT {note}{typed} FROM {_values(rows, columns, '__rows')}"


def rows_view_sql(entry, rows: list[tuple], maps: list[tuple] | None = None, bound: Bound | None = None) -> str:
    """The "rows" form: the view's rows (raw, in output column order), carrying the maps' rows (raw, in
    map_columns order) if given: all of them, or with a bound only those of the groups sorting before it
    (see top_rows.py)."""
    note = ""
    if bound is not None:
        held = _values([bound.values], bound.columns, "__bound", in_comment=True) if bound.values else "none"
        note = f"{_BOUND}{held}{_END} "
    if maps is not None:
        held = _values(maps, map_columns(entry), "__maps", in_comment=True) if maps else "none"
        note += f"{_BEGIN}{held}{_END} "
    return values_sql(rows, output_columns(entry), note)


@dataclass(frozen=True)
class Bound:
    """The ORDER BY values (raw, of `columns`) that the groups whose maps a "rows" view carries sort before;
    empty where it carries every group's."""
    values: tuple
    columns: tuple[Column, ...] = ()


def held_maps_sql(view_text: str, partial: bool = False) -> str | None:
    """SELECT of the maps' rows a "rows" view's text carries, as written (see Column.raw); None if it
    carries none (or, unless `partial`, only some groups' maps), "" if it carries an empty list."""
    if _BOUND in view_text and not partial:
        return None
    return _held(view_text, _BEGIN)


def held_bound_sql(view_text: str) -> str | None:
    """SELECT of the bound a "rows" view's text carries with some groups' maps; None if it has none, "" if
    it carries every group's maps."""
    return _held(view_text, _BOUND)


def _held(view_text: str, begin_mark: str) -> str | None:
    begin = view_text.find(begin_mark)
    end = view_text.find(_END, begin + 1)
    if begin < 0 or end < 0:
        return None
    held = view_text[begin + len(begin_mark):end]
    return "" if held == "none" else f"SELECT * FROM {held}"


def maps_sql(entry, maps: list[tuple]) -> str:
    """The view's SQL over its maps' rows given as literals (raw, in map_columns order)."""
    return f"WITH {MAPS_TABLE} AS ({values_sql(maps, map_columns(entry))}) {read_view_sql(entry, MAPS_TABLE)}"


# -- the view's rows over its maps' literals, without a Spark job ------------------------------------------
# Spark computes a projection and a filter over literal rows while planning (a local relation), but runs a
# job for an aggregate or a sort. So the groups are summed here, from the maps' rows (one per map and key),
# and the rows sorted and limited here, by sort keys Spark computes beside the columns.
ORDER_COLUMN = "__ivm_order_{}"
KEY_COLUMN = "__ivm_key_{}"
VALUE_COLUMN = "__ivm_value_{}"
# Sort keys of the types whose Python values compare as Spark's do (a TIMESTAMP's depends on the driver's
# time zone): those written exactly as literals.
_SORTABLE_TYPES = _EXACT_TYPES


def literal_rows_sql(entry, maps: list[tuple], keys: bool = False) -> str | None:
    """SELECT of the view's rows (raw, in output column order) over its maps' rows given as literals (raw,
    in map_columns order), followed by one column per ORDER BY item, unsorted and not limited (see
    sorted_rows), and with `keys` by the group's keys (raw, in the query's key order); None where the view's
    rows need Spark's aggregation: MIN, MAX and DISTINCT aggregates, and views of rows with multiplicities
    (bags)."""
    query = entry.plan.query
    if query.bag or any(a.reduce is not None for a in query.aggregates):
        return None
    columns = map_columns(entry)
    position = {c.name: i for i, c in enumerate(columns)}
    types = dict(entry.layout.key_types)
    stored = dict(zip((a.name for a in query.aggregates), view_maps(entry)))
    sums = [_sum_type(m.value_type) for m in stored.values()]
    if None in sums:
        return None
    key_at = [position[entry.layout.key_column(k)] for k in query.keys]
    groups: dict[tuple, list] = {} if query.keys else {(): [None] * len(stored)}
    for row in maps:
        for i, m in enumerate(stored.values()):
            if row[0] == m.map_id:
                group = groups.setdefault(tuple(row[j] for j in key_at), [None] * len(stored))
                group[i] = row[position[m.value_column]]
    # A group's missing or NULL sum reads as 0, as COALESCE(SUM(…), 0) over the store does.
    rows = [key + tuple(_zero(t) if v is None else v for v, t in zip(values, sums)) for key, values in groups.items()]
    g = values_sql(rows, [Column(k, types[k]) for k in query.keys]
                   + [Column(name, t) for name, t in zip(stored, sums)])
    raw = [c.raw(quote(c.name)) for c in output_columns(entry)]
    order = [f"{sql} AS {ORDER_COLUMN.format(i)}" for i, (sql, _, _) in enumerate(_order_items(query.order_by))]
    key_columns, carried = _carried_keys(entry) if keys else ([], [])
    return (f"SELECT {', '.join(raw + order + [c.raw(c.name) for c in key_columns])} FROM "
            f"(SELECT {', '.join(_typed_columns(entry) + carried)} FROM ({g}) AS g{_live_groups(query)}) AS v")


def sorted_rows(entry, rows: list[tuple], order_types: list[str]) -> list[tuple] | None:
    """The rows of literal_rows_sql sorted by their trailing ORDER BY columns as Spark sorts (NULLs first or
    last as each item says, NaN above every number, strings by code point) and limited, without those
    columns; None if a sort key's type (`order_types`, Spark SQL) is one not compared here the same way."""
    query = entry.plan.query
    compare = ordering(entry, order_types)
    if compare is None:
        return None
    items = len(query.order_by)
    width = len(rows[0]) - items if rows else 0
    ordered = sorted(rows, key=functools.cmp_to_key(lambda a, b: compare(a[width:], b[width:]))) if items else rows
    limited = ordered if query.limit is None else ordered[:query.limit]
    return [r[:width] for r in limited] if items else limited


def ordering(entry, order_types: list[str]):
    """The comparison of two tuples of the view's ORDER BY values as Spark sorts them (-1, 0, 1); None if a
    sort key's type (`order_types`, Spark SQL) is one not compared here the same way."""
    if not all(_SORTABLE_TYPES.fullmatch(t) for t in order_types):
        return None
    items = [(desc, nulls_first) for _, desc, nulls_first in _order_items(entry.plan.query.order_by)]

    def compare(a: tuple, b: tuple) -> int:
        for (desc, nulls_first), x, y in zip(items, a, b):
            if x is None or y is None:
                if (x is None) != (y is None):
                    return -1 if (x is None) == nulls_first else 1
                continue
            x, y = _sort_value(x), _sort_value(y)
            order = (x > y) - (x < y)
            if order:
                return -order if desc else order
        return 0

    return compare


@functools.lru_cache(maxsize=256)
def _order_items(order_by: tuple[str, ...]) -> tuple[tuple[str, bool, bool], ...]:
    """The ORDER BY items: the expression's SQL, descending, NULLs first (Spark's default where not said).
    Parsed once per view's ORDER BY, not at every refresh."""
    items = []
    for o in order_by:
        ordered = sqlglot.parse_one(f"SELECT 1 ORDER BY {o}", read="spark").args["order"].expressions[0]
        items.append((ordered.this.sql("spark"), bool(ordered.args.get("desc")), bool(ordered.args.get("nulls_first"))))
    return tuple(items)


def _sort_value(value):
    if isinstance(value, float):
        return (1, 0.0) if math.isnan(value) else (0, value)
    return value


def _sum_type(type_sql: str) -> str | None:
    """The type of Spark's SUM over a column of the type."""
    if type_sql in ("tinyint", "smallint", "int", "bigint"):
        return "bigint"
    if type_sql in ("float", "double"):
        return "double"
    decimal_type = re.fullmatch(r"decimal\((\d+),(\d+)\)", type_sql)
    if decimal_type:
        return f"decimal({min(38, int(decimal_type[1]) + 10)},{decimal_type[2]})"
    return None


def _zero(type_sql: str):
    return 0.0 if type_sql == "double" else Decimal(0) if type_sql.startswith("decimal") else 0


# -- the view's SQL over its maps --------------------------------------------------------------------------
def view_maps(entry) -> list[StoredMap]:
    """The maps the view reads: one per aggregate of its query."""
    prefix = entry.name.split(".")[-1]
    return [entry.layout.map(f"{prefix}_{a.name}") for a in entry.plan.query.aggregates]


def view_map_ids(entry) -> list[int]:
    """The map_ids of the maps the view reads, each once (maps that share rows share one)."""
    return list(dict.fromkeys(m.map_id for m in view_maps(entry)))


def map_columns(entry) -> list[Column]:
    """The store columns the view's SQL reads: map_id, the keys of its maps and their value columns."""
    layout = entry.layout
    maps = view_maps(entry)
    keys = list(dict.fromkeys(k for m in maps for k in m.keys))
    types = dict(layout.key_types)
    values = dict((m.value_column, m.value_type) for m in maps)
    return ([Column("map_id", "int")] + [Column(layout.key_column(k), types[k]) for k in keys]
            + [Column(c, t) for c, t in values.items()])


def output_columns(entry) -> list[Column]:
    return [Column(name, type_sql) for name, type_sql in entry.output_types]


def merged_maps(rows: list[tuple], increments: list[tuple], columns: list[Column]) -> list[tuple]:
    """The maps' rows after adding the increments: one row per map and key, keys whose value sums to 0
    left out, in key order. Rows and increments are raw rows in map_columns order."""
    keys = [i for i, c in enumerate(columns) if not c.name.startswith("v_")]
    values = [i for i, c in enumerate(columns) if c.name.startswith("v_")]
    sums: dict[tuple, list] = {}
    with decimal.localcontext() as context:
        context.prec = 100  # exact for any DECIMAL(38, s) sum
        for row in list(rows) + list(increments):
            total = sums.setdefault(tuple(row[i] for i in keys), [None] * len(values))
            for j, i in enumerate(values):
                if row[i] is not None:
                    total[j] = row[i] if total[j] is None else total[j] + row[i]
    merged = []
    for key, total in sums.items():
        if any(v not in (None, 0) for v in total):
            row = [None] * len(columns)
            for i, k in zip(keys, key):
                row[i] = k
            for i, v in zip(values, total):
                row[i] = v
            merged.append(tuple(row))
    return sorted(merged, key=lambda r: tuple((v is None, _sortable(v)) for v in (r[i] for i in keys)))


def _sortable(value):
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    return value if isinstance(value, (int, float, Decimal, str, bool)) else str(value)


def read_view_sql(entry, table: str | None = None) -> str:
    """The view's SQL over its maps in the store, or in `table` (a table name or expression of store rows):
    the defining query's rows, names and types."""
    query = entry.plan.query
    layout = entry.layout
    table = table or layout.table
    prefix = entry.name.split(".")[-1]
    stored = {a.name: layout.map(f"{prefix}_{a.name}") for a in query.aggregates}
    group = f" GROUP BY {', '.join(layout.key_column(k) for k in query.keys)}" if query.keys else ""
    body = f"({_groups_sql(entry, table)}) AS g"
    for i, a in enumerate(a for a in query.aggregates if a.reduce is not None):
        m = stored[a.name]
        value_key = layout.key_column(a.value_keys[0])
        reduced = _REDUCERS[a.reduce].format(value_key)
        # The values present in each group: those whose count sums to more than 0.
        present = (f"SELECT {', '.join([layout.key_column(k) for k in query.keys] + [value_key])} FROM {table} "
                   f"WHERE map_id = {m.map_id} GROUP BY {', '.join([layout.key_column(k) for k in query.keys] + [value_key])} "
                   f"HAVING SUM({m.value_column}) > 0")
        # The reduced side's keys get names of their own, so the outer SELECT's key names stay unambiguous.
        side_keys = [f"{layout.key_column(k)} AS {quote('__r_' + k)}" for k in query.keys]
        sub = f"SELECT {', '.join(side_keys + [f'{reduced} AS {quote(a.name)}'])} FROM ({present}) AS present{group}"
        on = " AND ".join(f"g.{quote(k)} <=> r{i}.{quote('__r_' + k)}" for k in query.keys)
        body += f" LEFT JOIN ({sub}) AS r{i} ON {on}" if on else f" CROSS JOIN ({sub}) AS r{i}"
    select = f"SELECT {', '.join(_typed_columns(entry))} FROM {body}"
    if query.bag and not query.distinct:
        select += f" LATERAL VIEW explode(sequence(1, CAST({query.multiplicity} AS BIGINT))) copies AS __copy"
    select += _live_groups(query)
    if query.order_by:
        select = f"SELECT * FROM ({select}) AS o ORDER BY {', '.join(query.order_by)}"
    if query.limit is not None:
        select += f" LIMIT {query.limit}"
    return select


def _groups_sql(entry, table: str) -> str:
    """SELECT of the view's groups over its maps in `table` (store rows): its keys and the sums of its
    aggregates' maps (not MIN, MAX, DISTINCT), by name."""
    query = entry.plan.query
    layout = entry.layout
    stored = dict(zip((a.name for a in query.aggregates), view_maps(entry)))
    sums = [a for a in query.aggregates if a.reduce is None]
    keys = [f"{layout.key_column(k)} AS {quote(k)}" for k in query.keys]
    # A map's value is the sum of its rows at a key (see mapstore.py).
    columns = [f"COALESCE(SUM(CASE WHEN map_id = {stored[a.name].map_id} THEN {stored[a.name].value_column} END), 0)"
               f" AS {quote(a.name)}" for a in sums]
    ids = ", ".join(str(i) for i in dict.fromkeys(stored[a.name].map_id for a in sums))
    group = f" GROUP BY {', '.join(layout.key_column(k) for k in query.keys)}" if query.keys else ""
    return f"SELECT {', '.join(keys + columns)} FROM {table} WHERE map_id IN ({ids}){group}"


def leading_groups_sql(entry, table: str, limit: int) -> str:
    """SELECT of the view's first `limit` groups over its maps in `table` (store rows), in the view's order
    and not limited to its LIMIT: each as literal_rows_sql gives it with its keys, followed by its
    aggregates' sums (in the query's order). For views without MIN, MAX or DISTINCT aggregates."""
    query = entry.plan.query
    key_columns, carried = _carried_keys(entry)
    sums = [f"g.{quote(a.name)} AS {VALUE_COLUMN.format(i)}" for i, a in enumerate(query.aggregates)]
    order = [f"{sql} AS {ORDER_COLUMN.format(i)}" for i, (sql, _, _) in enumerate(_order_items(query.order_by))]
    raw = ([c.raw(quote(c.name)) for c in output_columns(entry)] + order + [c.raw(c.name) for c in key_columns]
           + [VALUE_COLUMN.format(i) for i in range(len(sums))])
    groups = (f"SELECT {', '.join(_typed_columns(entry) + carried + sums)} FROM ({_groups_sql(entry, table)}) AS g"
              f"{_live_groups(query)}")
    return f"SELECT {', '.join(raw)} FROM ({groups}) AS v ORDER BY {', '.join(query.order_by)} LIMIT {limit}"


def _carried_keys(entry) -> tuple[list[Column], list[str]]:
    """The columns that carry a group's keys beside the view's columns (KEY_COLUMN), and their SELECT items
    over the groups `g`."""
    keys = entry.plan.query.keys
    types = dict(entry.layout.key_types)
    columns = [Column(KEY_COLUMN.format(i), types[k]) for i, k in enumerate(keys)]
    return columns, [f"g.{quote(k)} AS {c.name}" for k, c in zip(keys, columns)]


def _typed_columns(entry) -> list[str]:
    """The view's columns over its groups (keys and aggregates by name), cast to the query's types."""
    return [f"CAST({c.sql} AS {t}) AS {quote(n)}" for c, (n, t) in zip(entry.plan.query.columns, entry.output_types)]


def _live_groups(query) -> str:
    """The WHERE clause keeping the groups the view shows: live ones (grouped views) passing HAVING."""
    conditions = ([f"({query.multiplicity}) > 0"] if query.keys else []) + ([f"({query.having})"] if query.having else [])
    return f" WHERE {' AND '.join(conditions)}" if conditions else ""


_REDUCERS = {
    "min": "MIN({})",
    "max": "MAX({})",
    "count_distinct": "COUNT({})",
    "sum_distinct": "SUM({})",
    "avg_distinct": "AVG({})",
}
