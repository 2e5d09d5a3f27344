"""The map store: every map of one view, and the view's progress record, in one Delta table.

    map_id INT | k_<var> … (typed key columns, NULL where a map has no such key) |
    v_<type> … (one value column per value type; a map uses one) | src STRING | src_version BIGINT

Rows with map_id = PROGRESS hold, per source table, the last Delta version applied. Because maps and
progress share one table, a refresh is one MERGE: one commit, atomic across maps, exactly once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spark_ivm.runtime.sqlgen import VALUE, quote

PROGRESS = -1


def value_column(type_sql: str) -> str:
    return "v_" + re.sub(r"[^a-z0-9]+", "_", type_sql.lower()).strip("_")


def key_column(var_name: str) -> str:
    return f"k_{var_name}"


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
class StoreLayout:
    table: str
    maps: tuple[StoredMap, ...]
    key_types: tuple[tuple[str, str], ...]  # (variable, Spark SQL type), one column each

    def map(self, name: str) -> StoredMap:
        for m in self.maps:
            if m.name == name:
                return m
        raise KeyError(name)

    @property
    def value_columns(self) -> tuple[tuple[str, str], ...]:
        seen: dict[str, str] = {}
        for m in self.maps:
            seen.setdefault(m.value_column, m.value_type)
        return tuple(seen.items())

    @property
    def columns(self) -> list[tuple[str, str]]:
        return ([("map_id", "INT")]
                + [(key_column(v), t) for v, t in self.key_types]
                + list(self.value_columns)
                + [("src", "STRING"), ("src_version", "BIGINT")])

    def read_map_sql(self, name: str, version: int | None = None) -> str:
        """A map as `key columns (named by the map's keys), __v`, from the store (at a version)."""
        m = self.map(name)
        at = f" VERSION AS OF {version}" if version is not None else ""
        cols = [f"{key_column(k)} AS {quote(k)}" for k in m.keys] + [f"{m.value_column} AS {VALUE}"]
        return f"(SELECT {', '.join(cols)} FROM {self.table}{at} WHERE map_id = {m.map_id})"

    def rows_sql(self, name: str, increments_sql: str) -> str:
        """Rows of the store's shape from `increments_sql` (key columns named by the map's keys, __v)."""
        m = self.map(name)
        cols = [f"{m.map_id} AS map_id"]
        for var_name, type_sql in self.key_types:
            src = quote(var_name) if var_name in m.keys else "NULL"
            cols.append(f"CAST({src} AS {type_sql}) AS {key_column(var_name)}")
        for col, type_sql in self.value_columns:
            src = VALUE if col == m.value_column else "NULL"
            cols.append(f"CAST({src} AS {type_sql}) AS {col}")
        cols += ["CAST(NULL AS STRING) AS src", "CAST(NULL AS BIGINT) AS src_version"]
        return f"SELECT {', '.join(cols)} FROM ({increments_sql}) AS inc"

    def progress_sql(self, versions: dict[str, int]) -> str:
        rows = []
        for source, version in versions.items():
            cols = [f"{PROGRESS} AS map_id"]
            cols += [f"CAST(NULL AS {t}) AS {key_column(v)}" for v, t in self.key_types]
            cols += [f"CAST(NULL AS {t}) AS {c}" for c, t in self.value_columns]
            cols += [f"'{source}' AS src", f"CAST({version} AS BIGINT) AS src_version"]
            rows.append(f"SELECT {', '.join(cols)}")
        return " UNION ALL ".join(rows)

    def merge_sql(self, staged: str) -> str:
        """MERGE staged rows (pre-aggregated: one per map and key) into the store.

        Values add up; a row whose value reaches 0 is deleted; progress rows take the new version.
        Keys match NULL-safely, so NULL group keys are keys like any other.
        """
        keys = ["t.map_id = s.map_id", "t.src <=> s.src"] + [
            f"t.{key_column(v)} <=> s.{key_column(v)}" for v, _ in self.key_types]
        sums = {c: f"COALESCE(t.{c}, 0) + COALESCE(s.{c}, 0)" for c, _ in self.value_columns}
        zero = " AND ".join(f"{s} = 0" for s in sums.values()) or "TRUE"
        updates = ", ".join(
            f"t.{c} = CASE WHEN t.{c} IS NULL AND s.{c} IS NULL THEN NULL ELSE {s} END" for c, s in sums.items())
        return (
            f"MERGE INTO {self.table} AS t USING {staged} AS s ON {' AND '.join(keys)} "
            f"WHEN MATCHED AND s.map_id = {PROGRESS} THEN UPDATE SET t.src_version = s.src_version "
            f"WHEN MATCHED AND {zero} THEN DELETE "
            + (f"WHEN MATCHED THEN UPDATE SET {updates} " if updates else "")
            + "WHEN NOT MATCHED THEN INSERT *"
        )
