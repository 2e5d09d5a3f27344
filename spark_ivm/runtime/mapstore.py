"""The map store: the maps of one or more views, and each view's progress record, in one Delta table.

    map_id INT | k_<var> … (typed key columns, NULL where a map has no such key) |
    v_<type>, v_<type>__2 … (value columns by type; a map uses one) | src STRING | src_version BIGINT

A map's value at a key is the SUM of its rows at that key: a refresh appends each map's increments
(one row per map and key) instead of updating rows in place, because on Delta an append is one cheap
commit while a MERGE costs several Spark jobs to find and rewrite the rows it touches. Every
`spark.ivm.compactEvery`-th refresh of a store (config.COMPACT_EVERY; sooner, see compaction.compacts_early)
overwrites the files appended since the last one and the small ones with one row per key instead, dropping
keys whose value reached 0, so the rows a read aggregates stay bounded. Building and compacting a store write its
rows sorted by map and key (`key_order`) in files of bounded size, so that a refresh reading a map only
at the keys its batches can join (`WHERE k BETWEEN …`, see key_conditions) reads few of its files.

Rows with a negative map_id are bookkeeping, also read as aggregates: a view's progress (per source
table, the last Delta version applied: the MAX of its rows), the token of the view's catalog entry,
and the store's refresh sequence number (`SEQUENCE_ID`). Because maps and progress share one table, a
refresh is one commit, atomic across maps. The commit's user metadata holds the same bookkeeping
(`bookkeeping_metadata`), so the next refresh reads it from the Delta log instead of the rows. It is
exactly once because the commit is a transaction that read the whole store as of the version the refresh
computed from: Delta refuses it if anything was written to the store since, so of two refreshes computed
from one version only one commits (see deltalog.DeltaLogs.append). Views created
`WITH (store = 'name')` share a store, so REFRESH INCREMENTAL VIEWS refreshes all of them in that
one commit too.

Maps that sum different values over the same product per the same keys (a view's SUMs and COUNTs,
the counts and sums of one join that its triggers read) hold the same keys: they share their rows, under
one map_id, each with a value column of its own (`v_<type>__2` for the second of a type). A refresh's
increments of them are summed into one row per key, CREATE writes one, and a map read selects the rows
with a value in its column (NULL there: no row of that map at the key). So the store holds, and a refresh
reads, one row per key of such a family instead of one per map.

A view knows only its own maps (`StoreLayout`); the store's columns are the union over its views and
are read from the table when rows are written (`StoreColumns`).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

from spark_ivm.runtime.key_conditions import Condition, HoldsValue, MapIs, all_of
from spark_ivm.runtime.sqlgen import VALUE, literal_sql, quote

PROGRESS = -1  # the progress id of a view with a store of its own
SEQUENCE_ID = -(2**31)  # the row holding the store's refresh sequence number
SEQUENCE = "#refresh"  # its `src`
ENTRY_TOKEN = "#entry"  # `src` of a progress row holding the token of the view's catalog entry


def value_column(type_sql: str) -> str:
    return "v_" + re.sub(r"[^a-z0-9]+", "_", type_sql.lower()).strip("_")


def shared_value_column(type_sql: str, number: int) -> str:
    """The value column of the number-th map of a type among maps that share rows (the first: v_<type>)."""
    return value_column(type_sql) if number == 1 else f"{value_column(type_sql)}__{number}"


def key_column(var_name: str, type_sql: str | None = None) -> str:
    """The store column of a key variable; with a type, the variant used when `k_<var>` is taken by
    another view's key of a different type."""
    base = f"k_{var_name}"
    return base if type_sql is None else f"{base}_{re.sub(r'[^a-z0-9]+', '_', type_sql.lower()).strip('_')}"


@dataclass(frozen=True)
class StoredMap:
    map_id: int
    name: str
    keys: tuple[str, ...]
    value_type: str  # Spark SQL type of the value
    column: str | None = None  # its value column, where not v_<type>: see shared_value_column

    @property
    def value_column(self) -> str:
        return self.column or value_column(self.value_type)


@dataclass(frozen=True)
class StoreColumns:
    """All columns of a store table, in order: map_id, key columns, value columns, src, src_version."""
    columns: tuple[tuple[str, str], ...]

    @property
    def keys(self) -> list[str]:
        return [c for c, _ in self.columns if c.startswith("k_")]

    @property
    def values(self) -> list[tuple[str, str]]:
        return [(c, t) for c, t in self.columns if c.startswith("v_")]

    def type_of(self, column: str) -> str:
        return dict(self.columns)[column]


@dataclass(frozen=True)
class StoreLayout:
    """Where one view's maps and progress live in a store."""
    table: str
    maps: tuple[StoredMap, ...]
    key_types: tuple[tuple[str, str], ...]  # (variable, Spark SQL type) of every key variable of the view
    key_names: tuple[tuple[str, str], ...] = ()  # (variable, store column); default k_<var>
    progress_id: int = PROGRESS

    def map(self, name: str) -> StoredMap:
        for m in self.maps:
            if m.name == name:
                return m
        raise KeyError(name)

    def key_column(self, var_name: str) -> str:
        return dict(self.key_names).get(var_name, key_column(var_name))

    @property
    def map_ids(self) -> list[int]:
        return list(dict.fromkeys(m.map_id for m in self.maps)) + [self.progress_id]

    def shares_rows(self, name: str) -> bool:
        """Whether the map's rows hold other maps' values too (see the module's docstring)."""
        map_id = self.map(name).map_id
        return sum(m.map_id == map_id for m in self.maps) > 1

    @functools.cached_property
    def families(self) -> dict[str, tuple[str, ...]]:
        """Per map that shares its rows with others (of the same keys): all maps of those rows, in order
        (read by every statement of a refresh: computed once per layout)."""
        by_id: dict[int, list[StoredMap]] = {}
        for m in self.maps:
            by_id.setdefault(m.map_id, []).append(m)
        return {m.name: tuple(x.name for x in maps) for maps in by_id.values()
                if len(maps) > 1 and len({x.keys for x in maps}) == 1 for m in maps}

    @property
    def shares_any_rows(self) -> bool:
        """Whether any two of the view's maps share rows."""
        return len({m.map_id for m in self.maps}) < len(self.maps)

    @property
    def value_columns(self) -> tuple[tuple[str, str], ...]:
        seen: dict[str, str] = {}
        for m in self.maps:
            seen.setdefault(m.value_column, m.value_type)
        return tuple(seen.items())

    @property
    def columns(self) -> StoreColumns:
        """The columns this view needs in its store."""
        return StoreColumns(tuple([("map_id", "int")]
                                  + [(self.key_column(v), t) for v, t in self.key_types]
                                  + list(self.value_columns)
                                  + [("src", "string"), ("src_version", "bigint")]))

    def read_map_sql(self, name: str, store: str | None = None, where: Condition | None = None) -> str:
        """A map as `key columns (named by the map's keys), __v`, from the store (or from `store`, a table
        expression of the store's rows); with `where` (a condition on store columns), only the rows it
        holds for.

        The rows are the map as a relation with multiplicities: a key may have several rows, and its
        value is their sum. That is all a trigger needs, because a map's value enters a statement as a
        factor of a product that is then summed (sums distribute over the rows), and every non-linear
        use (a lift, Exists, a comparison) reads an aggregate that sums first. Not aggregating here
        keeps a map read a plain scan, which joins a small batch without a shuffle."""
        m = self.map(name)
        cols = [f"{self.key_column(k)} AS {quote(k)}" for k in m.keys] + [f"{m.value_column} AS {VALUE}"]
        return f"(SELECT {', '.join(cols)} FROM {store or self.table} WHERE {self.rows_of(name, where)})"

    def rows_of(self, name: str, where: Condition | None = None) -> Condition:
        """The condition selecting a map's rows of the store (those `where` holds for, if given)."""
        m = self.map(name)
        return all_of(MapIs((m.map_id,)), HoldsValue(m.value_column) if self.shares_rows(name) else None, where)

    def rows_sql(self, name: str, increments_sql: str, store: StoreColumns | None = None) -> str:
        """Rows of the store's shape from `increments_sql` (key columns named by the map's keys, __v)."""
        m = self.map(name)
        own = {self.key_column(k): quote(k) for k in m.keys}
        own[m.value_column] = VALUE
        cols = []
        for col, type_sql in (store or self.columns).columns:
            if col == "map_id":
                cols.append(f"{m.map_id} AS map_id")
            else:
                cols.append(f"CAST({own.get(col, 'NULL')} AS {type_sql}) AS {col}")
        return f"SELECT {', '.join(cols)} FROM ({increments_sql}) AS inc"

    def fused_rows_sql(self, targets, sums_sql: str, store: StoreColumns | None = None, live: bool = False) -> str:
        """Rows of the store's shape from `sums_sql` (key columns named by the maps' keys, then `__v0`,
        `__v1`, …: the increments of targets[0], targets[1], …): a row per key and target map, one for the
        targets that share rows; with `live`, a map's contents rather than increments to be summed: values
        that are 0 written as NULL (no row of that map), and rows with no value left out."""
        store = store or self.columns
        own: dict[int, dict[str, str]] = {}  # per map_id: the SQL of each column it sets
        for i, name in enumerate(targets):
            m = self.map(name)
            columns = own.setdefault(m.map_id, {self.key_column(k): quote(k) for k in m.keys})
            columns[m.value_column] = f"NULLIF({VALUE}{i}, 0)" if live else f"{VALUE}{i}"
        rows = [str(map_id) if col == "map_id" else f"CAST({columns.get(col, 'NULL')} AS {type_sql})"
                for map_id, columns in own.items() for col, type_sql in store.columns]
        names = ", ".join(col for col, _ in store.columns)
        stacked = f"SELECT stack({len(own)}, {', '.join(rows)}) AS ({names}) FROM ({sums_sql}) AS f"
        if not live:
            return stacked
        # A row holds its maps' values in their value columns and NULL in the others.
        values = " OR ".join(f"COALESCE({c}, 0) <> 0" for c, _ in store.values)
        return f"SELECT * FROM ({stacked}) AS s WHERE {values}"

    def progress_sql(self, versions: dict[str, int], store: StoreColumns | None = None) -> str:
        """Progress rows: per source, the last version applied (or, for ENTRY_TOKEN, the entry's token)."""
        return bookkeeping_rows_sql([(self.progress_id, source, version) for source, version in versions.items()],
                                    store or self.columns)


def bookkeeping_rows_sql(rows: list[tuple[int, str, int]], store: StoreColumns) -> str:
    """Bookkeeping rows (map_id, src, src_version) in the store's row shape, as an inline table.

    Not a SELECT of literals: Spark compiles such literals into the code it generates for the query, so
    that every refresh, whose sequence number and versions are new, would compile its plan again. An
    inline table's rows are data, and the code of the last refresh is reused."""
    def value(column: str, type_sql: str, row: tuple[int, str, int]) -> str:
        map_id, src, version = row
        known = {"map_id": str(map_id), "src": literal_sql(src), "src_version": str(version)}
        return f"CAST({known.get(column, 'NULL')} AS {type_sql})"

    values = ", ".join("(" + ", ".join(value(c, t, row) for c, t in store.columns) + ")" for row in rows)
    return f"SELECT * FROM VALUES {values} AS bookkeeping({', '.join(c for c, _ in store.columns)})"


def sequence_sql(number: int, store: StoreColumns) -> str:
    """The store's refresh sequence number row."""
    return bookkeeping_rows_sql([(SEQUENCE_ID, SEQUENCE, number)], store)


def bookkeeping_sql(store: str) -> str:
    """Per bookkeeping id and `src`, the latest value: progress versions, entry tokens, the sequence."""
    return (f"SELECT map_id, src, MAX(src_version) AS src_version FROM {store} WHERE map_id < 0 "
            f"GROUP BY map_id, src")


# The key of the store's bookkeeping in the user metadata of the commits a refresh or CREATE makes.
METADATA_KEY = "spark_ivm"
METADATA_FORMAT = 1


def bookkeeping_metadata(bookkeeping: dict[int, dict[str, int]]) -> str:
    """The user metadata of a commit that leaves the store with this bookkeeping (see progress_of): the
    same as its bookkeeping rows hold, so that a refresh reads it from the commit in the Delta log instead
    of aggregating the store's rows."""
    return json.dumps({METADATA_KEY: {"format": METADATA_FORMAT,
                                      "bookkeeping": {str(i): p for i, p in sorted(bookkeeping.items())}}},
                      sort_keys=True, separators=(",", ":"))


def bookkeeping_of(user_metadata: str | None) -> dict[int, dict[str, int]] | None:
    """The bookkeeping a commit's user metadata holds, None if it holds none (another writer's commit,
    or an older format)."""
    try:
        found = json.loads(user_metadata)[METADATA_KEY]
    except (TypeError, ValueError, KeyError):
        return None
    if not isinstance(found, dict) or found.get("format") != METADATA_FORMAT:
        return None
    return {int(i): {src: int(v) for src, v in p.items()} for i, p in found["bookkeeping"].items()}


def union_sql(parts: list[str], tasks: int) -> str:
    """UNION ALL of the parts, read in at most `tasks` tasks.

    Each task of a stage deserializes the whole stage, all branches of the union included, and a union
    has a task per partition of every branch: a refresh's union of a hundred statements would otherwise
    deserialize its hundred branches a hundred times and more. Coalescing keeps the branches' own shuffles
    and joins parallel; only the union's last, narrow part runs in fewer tasks."""
    union = " UNION ALL ".join(parts)
    return union if len(parts) < 2 else f"SELECT /*+ COALESCE({tasks}) */ * FROM ({union}) AS u"


def staged_sql(increments: list[str], progress: list[str], store: StoreColumns, tasks: int) -> str:
    """Increments summed to one row per map and key (keys whose increments cancel left out; a value that
    sums to 0 NULL, where maps share rows: no row of that map), followed by the progress rows. `tasks`: see
    union_sql."""
    keys = ["map_id"] + store.keys
    values = {c for c, _ in store.values}
    # In the store's column order: UNION ALL and INSERT match columns by position.
    select = [c if c in keys else f"NULLIF(SUM({c}), 0) AS {c}" if c in values else f"CAST(NULL AS {t}) AS {c}"
              for c, t in store.columns]
    live = " OR ".join(f"COALESCE(SUM({c}), 0) <> 0" for c in values)
    parts = list(progress)
    if increments:
        parts.insert(0, f"SELECT {', '.join(select)} FROM ({union_sql(increments, tasks)}) AS i "
                        f"GROUP BY {', '.join(keys)} HAVING {live}")
    return " UNION ALL ".join(parts)


def append_sql(table: str, staged: str) -> str:
    """Append staged rows (in the store's column order) to the store."""
    return f"INSERT INTO {table} SELECT * FROM {staged}"


def compact_rows_sql(table: str, staged: str, store: StoreColumns, partitions: int | None = None) -> str:
    """The compacted rows (compacted_sql) in key order (see key_order), in `partitions` ranges of keys if
    given."""
    return ordered_rows_sql(compacted_sql(table, staged, store), store, partitions)


def compacted_sql(table: str, staged: str, store: StoreColumns) -> str:
    """The store's rows (of `table`, a table expression of them) plus the staged ones, one row per map and
    key: values summed (NULL where 0: see staged_sql), keys whose values all sum to 0 dropped, bookkeeping
    rows reduced to their latest value.

    Keys group NULL-safely (GROUP BY treats NULL as a value), so NULL group keys stay keys."""
    keys = ["map_id"] + store.keys + ["src"]
    values = dict(store.values)
    select = [c if c in keys
              else f"CAST(NULLIF(SUM({c}), 0) AS {t}) AS {c}" if c in values
              else f"MAX({c}) AS {c}"
              for c, t in store.columns]
    live = " OR ".join(f"COALESCE(SUM({c}), 0) <> 0" for c in values) or "FALSE"
    return (f"SELECT {', '.join(select)} FROM (SELECT * FROM {table} UNION ALL SELECT * FROM {staged}) AS rows "
            f"GROUP BY {', '.join(keys)} HAVING map_id < 0 OR {live}")


def key_order(store: StoreColumns) -> str:
    """The clause ordering a store's rows when it is built or compacted: by map, then by key, within each
    task that writes them (no shuffle: a global ORDER BY would add a sampling job and an exchange).

    Written in files of bounded size (STORE_FILE_ROWS), each file then holds a narrow range of one map's
    keys, and Delta's per-file minimum and maximum let a refresh that reads only the keys its batches
    touch (`WHERE k BETWEEN …`) skip the other files: it reads about one file per writing task."""
    return f"SORT BY {', '.join(['map_id'] + store.keys)}"


def ordered_rows_sql(rows: str, store: StoreColumns, partitions: int | None = None) -> str:
    """The store rows of the query `rows`, in key order (see key_order). With `partitions`, written by that
    many tasks, each a range of maps and keys (a sampling job and a shuffle more): a large store written
    by many tasks, each sorting its own part of every range, would leave every range in every task's
    files (see heuristics.store_write_partitions)."""
    ranged = f"/*+ REPARTITION_BY_RANGE({partitions}, {', '.join(['map_id'] + store.keys)}) */ " if partitions else ""
    return f"SELECT {ranged}* FROM ({rows}) AS r {key_order(store)}"


def live_rows_sql(table: str, store: StoreColumns) -> str:
    """map_id, key columns and values (NULL where 0) of every live map row (a key whose value is not 0)."""
    keys = ["map_id"] + store.keys
    values = [f"NULLIF(SUM({c}), 0) AS {c}" for c, _ in store.values]
    live = " OR ".join(f"COALESCE(SUM({c}), 0) <> 0" for c, _ in store.values) or "FALSE"
    return (f"SELECT {', '.join(keys + values)} FROM {table} WHERE map_id >= 0 GROUP BY {', '.join(keys)} "
            f"HAVING {live}")
