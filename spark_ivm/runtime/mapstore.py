"""The map store: the maps of one or more views, and each view's progress record, in one Delta table.

    map_id INT | k_<var> … (typed key columns, NULL where a map has no such key) |
    v_<type> … (one value column per value type; a map uses one) | src STRING | src_version BIGINT

Rows with a negative map_id are a view's progress: per source table, the last Delta version applied.
Because maps and progress share one table, a refresh is one MERGE: one commit, atomic across maps,
exactly once. Views created `WITH (store = 'name')` share a store, so REFRESH INCREMENTAL VIEWS
refreshes all of them in that one MERGE too.

A view knows only its own maps (`StoreLayout`); the store's columns are the union over its views and
are read from the table when rows are written (`StoreColumns`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spark_ivm.runtime.sqlgen import VALUE, quote

PROGRESS = -1  # the progress id of a view with a store of its own


def value_column(type_sql: str) -> str:
    return "v_" + re.sub(r"[^a-z0-9]+", "_", type_sql.lower()).strip("_")


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

    @property
    def value_column(self) -> str:
        return value_column(self.value_type)


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
        return [m.map_id for m in self.maps] + [self.progress_id]

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

    def read_map_sql(self, name: str, store: str | None = None) -> str:
        """A map as `key columns (named by the map's keys), __v`, from the store (or from `store`, a
        table expression of the store's rows, e.g. a pinned version)."""
        m = self.map(name)
        cols = [f"{self.key_column(k)} AS {quote(k)}" for k in m.keys] + [f"{m.value_column} AS {VALUE}"]
        return f"(SELECT {', '.join(cols)} FROM {store or self.table} WHERE map_id = {m.map_id})"

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

    def progress_sql(self, versions: dict[str, int], store: StoreColumns | None = None) -> str:
        rows = []
        for source, version in versions.items():
            cols = []
            for col, type_sql in (store or self.columns).columns:
                if col == "map_id":
                    cols.append(f"{self.progress_id} AS map_id")
                elif col == "src":
                    cols.append(f"'{source}' AS src")
                elif col == "src_version":
                    cols.append(f"CAST({version} AS BIGINT) AS src_version")
                else:
                    cols.append(f"CAST(NULL AS {type_sql}) AS {col}")
            rows.append(f"SELECT {', '.join(cols)}")
        return " UNION ALL ".join(rows)


def staged_sql(increments: list[str], progress: list[str], store: StoreColumns) -> str:
    """Increments summed to one row per map and key, followed by the progress rows."""
    keys = ["map_id"] + store.keys
    values = {c for c, _ in store.values}
    # In the store's column order: UNION ALL and MERGE's INSERT * match columns by position.
    select = [c if c in keys else f"SUM({c}) AS {c}" if c in values else f"CAST(NULL AS {t}) AS {c}"
              for c, t in store.columns]
    parts = list(progress)
    if increments:
        parts.insert(0, f"SELECT {', '.join(select)} FROM ({' UNION ALL '.join(increments)}) AS i "
                        f"GROUP BY {', '.join(keys)}")
    return " UNION ALL ".join(parts)


def merge_sql(table: str, staged: str, store: StoreColumns) -> str:
    """MERGE staged rows (pre-aggregated: one per map and key) into the store.

    Values add up; a row whose value reaches 0 is deleted; progress rows take the new version.
    Keys match NULL-safely, so NULL group keys are keys like any other.
    """
    keys = ["t.map_id = s.map_id", "t.src <=> s.src"] + [f"t.{k} <=> s.{k}" for k in store.keys]
    sums = {c: f"COALESCE(t.{c}, 0) + COALESCE(s.{c}, 0)" for c, _ in store.values}
    zero = " AND ".join(f"{s} = 0" for s in sums.values()) or "TRUE"
    updates = ", ".join(
        f"t.{c} = CASE WHEN t.{c} IS NULL AND s.{c} IS NULL THEN NULL ELSE {s} END" for c, s in sums.items())
    return (
        f"MERGE INTO {table} AS t USING {staged} AS s ON {' AND '.join(keys)} "
        f"WHEN MATCHED AND s.map_id < 0 THEN UPDATE SET t.src_version = s.src_version "
        f"WHEN MATCHED AND {zero} THEN DELETE "
        + (f"WHEN MATCHED THEN UPDATE SET {updates} " if updates else "")
        + "WHEN NOT MATCHED THEN INSERT *"
    )
