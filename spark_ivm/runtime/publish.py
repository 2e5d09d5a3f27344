"""Writing the user's view after its store changed: in the form that reads fastest (see viewsql).

After a refresh, the view's maps as of the new store version are its maps as of the version the refresh
read plus the refresh's increments. When the view carries its maps and they are of that version, adding
the increments on the driver gives the new maps without reading the store, and one small query over those
literals the view's rows; otherwise one query over the store (and the increments) computes them.

A refresh that commits version w replaces the view's definition with literals of w. Two refreshes that
race can replace it in either order, so each checks afterwards that w is still the store's latest
version, and if not leaves the view reading the store: never rows older than the store's. If the store is
gone by then (a DROP in another session removes the store before the definition), the definition just
written is dropped again: a DROP is never undone by a refresh that wrote the definition back.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from py4j.java_gateway import JavaObject
from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException

from spark_ivm import config, heuristics
from spark_ivm.errors import RefreshError
from spark_ivm.runtime import top_rows
from spark_ivm.runtime.deltalog import DeltaLogs
from spark_ivm.runtime.session_scope import COLLECT_SETTINGS, session_settings
from spark_ivm.runtime.sqlgen import quote
from spark_ivm.runtime.viewsql import (
    PROPERTY_FORM, PROPERTY_MAPS, PROPERTY_VERSION, ROWS, STORE, TOP, held_maps_sql, inlinable, literal_rows_sql,
    map_columns, maps_sql, merged_maps, output_columns, read_view_sql, rows_view_sql, sorted_rows, view_map_ids,
)

log = logging.getLogger("spark_ivm")

PROPERTY_ROWS = "spark_ivm.row_count"  # how many rows the view's inline form needed when last computed


class ViewForms:
    """The views' definitions in the catalog of one Spark session."""

    def __init__(self, spark, logs: DeltaLogs):
        self.spark = spark
        self.logs = logs
        # Refreshes running at once in threads of one session write definitions one at a time: the
        # metastore's replacement of a view is not atomic against another replacement or a look-up.
        self._writing = threading.RLock()

    def current(self, name: str) -> dict:
        """The view's properties and text ("text") as the catalog has them (no Spark job); {} if there is
        none or the catalog is out of reach."""
        if not self.logs.available:
            return {}
        with self._writing:
            return self.of_catalog(self.logs.catalog_tables([name])[name])

    def looking_up(self):
        """Held while a caller looks up views' catalog metadata to read with `of_catalog`: a look-up must not
        run beside a replacement by this session (see _writing)."""
        return self._writing

    def of_catalog(self, meta) -> dict:
        """The view's properties and text, as `current` gives them, from its catalog metadata (see
        DeltaLogs.catalog_tables, looked up under `looking_up`); {} for None."""
        if meta is None:
            return {}
        found = self.logs.as_python(meta.properties())
        text = meta.viewText()
        found["text"] = text.get() if text.isDefined() else ""
        return found

    def publish(self, entry, version: int, maps_at: str | Callable[[], str], current: dict | None = None, base_version: int | None = None,
                increments: list[tuple] | None = None, retry: bool = False, increments_at: str | None = None,
                store_bytes: int | None = None, driver: top_rows.Driver | None = None) -> str:
        """Write the view's definition for the store version `version`; the form written.

        maps_at: a table expression of the store's rows of the view's maps as of `version`, or a function
            that makes it, called only if the definition is written from the store.
        current: the view as `current` gave it before the refresh (None: look it up).
        base_version, increments: the version the refresh computed from and its increments of the view's
        maps (raw rows in map_columns order), when it has them on the driver; increments_at, a table
        expression of its increments (store rows) otherwise.
        store_bytes: the map store's size where the caller has it (None: read from its Delta log if needed).
        driver: where the refresh holds its increments on the driver, the maps it reads there (top_rows.Driver).
        retry: try the inline form even if it did not fit last time."""
        current = self.current(entry.name) if current is None else current
        form, shown = current.get(PROPERTY_FORM), _int(current.get(PROPERTY_VERSION))
        inline_rows = config.INLINE_ROWS.get(self.spark)
        if form == ROWS and shown == version:
            return ROWS
        first = form is None
        if callable(maps_at):
            maps_at = maps_at()
        if not (inline_rows and self.logs.available and all(inlinable(c.type_sql) for c in output_columns(entry))):
            return self._store_form(entry, form, version)
        if top_rows.applies(entry, inline_rows) and heuristics.keeps_leading_groups(
                store_bytes if store_bytes is not None else self._store_bytes(entry)):
            written = self._top_form(entry, version, maps_at, current, base_version, increments, increments_at,
                                     driver)
            if written is not None:
                return written
        maps = None
        if all(inlinable(c.type_sql) for c in map_columns(entry)):
            held = held_maps_sql(current.get("text", "")) if form == ROWS else None
            if held is not None and shown == base_version and increments is not None:
                # The literals are of the version the increments were computed from: add them, no job.
                old = [tuple(r) for r in self.spark.sql(held).collect()] if held else []
                maps = merged_maps(old, increments, map_columns(entry))
            elif held is not None or first or retry:
                maps = self._collect(_compact_maps_sql(entry, maps_at), inline_rows)
            if maps is not None and len(maps) > inline_rows:
                maps = None
        limited = entry.plan.query.limit is not None and entry.plan.query.limit <= inline_rows
        fitted = _int(current.get(PROPERTY_ROWS), inline_rows + 1) <= inline_rows
        if maps is None and not (limited or fitted or first or retry):
            return self._store_form(entry, form, version)
        rows = self._rows_over_literals(entry, maps) if maps is not None else None
        if rows is None:
            view = maps_sql(entry, maps) if maps is not None else read_view_sql(entry, f"({maps_at}) AS maps")
            columns = output_columns(entry)
            raw = ", ".join(f"{c.raw(quote(c.name))} AS {quote(c.name)}" for c in columns)
            # Over literals, one partition: a sort then samples nothing (a job less) and a shuffle has one task.
            with session_settings(self.spark, {"spark.sql.shuffle.partitions": "1"} if maps is not None else {}):
                rows = self._collect(f"SELECT {raw} FROM ({view}) AS v", inline_rows)
        if len(rows) <= inline_rows:
            for carried in ([maps, None] if maps is not None else [None]):
                text = rows_view_sql(entry, rows, carried)
                if len(text) <= heuristics.INLINE_SQL_CHARS_MAX:
                    latest = self._replace(entry, ROWS, version, len(rows), "no" if carried is None else "yes", text)
                    return self._checked(entry, version, latest)
        return self._store_form(entry, form, version, len(rows))

    def _store_form(self, entry, form: str | None, version: int, row_count: int = 0) -> str:
        if form != STORE:
            self._replace(entry, STORE, version, row_count, "no", read_view_sql(entry))
        return STORE

    def _top_form(self, entry, version: int, maps_at: str, current: dict, base_version: int | None,
                  increments: list[tuple] | None, increments_at: str | None,
                  driver: top_rows.Driver | None = None) -> str | None:
        """The "rows" form of a view of an ordering's first rows with the buffer of its leading groups (see
        top_rows.py), from the buffer of the version the refresh computed from where the view has it;
        None where the view's rows or buffer cannot be kept so."""
        top = None
        buffer = top_rows.held(self.spark, current.get("text", "")) if current.get(PROPERTY_FORM) == ROWS else None
        if buffer is not None and base_version is not None and _int(current.get(PROPERTY_VERSION)) == base_version:
            if increments is None and increments_at is not None:
                increments = self._collected_increments(entry, increments_at)
            if increments is not None:
                top = top_rows.refreshed(self.spark, entry, buffer, increments, maps_at, driver)
        if top is None:
            top = top_rows.computed(self.spark, entry, maps_at)
        text = top_rows.view_text(entry, top) if top is not None else None
        if text is None:
            return None
        latest = self._replace(entry, ROWS, version, len(top.rows), TOP, text)
        return self._checked(entry, version, latest)

    def _store_bytes(self, entry) -> int | None:
        """The size of the view's map store's latest version, from its Delta log (no Spark job)."""
        snapshot = self.logs.snapshot(entry.store)
        return None if snapshot is None else snapshot.size_bytes

    def _collected_increments(self, entry, increments_at: str) -> list[tuple] | None:
        """The increments of the view's maps in `increments_at` (store rows), raw in map_columns order: one
        Spark job; None if more than COLLECTED_ROWS_MAX."""
        with session_settings(self.spark, COLLECT_SETTINGS):
            rows = increment_rows(self.spark.table(increments_at), entry, heuristics.COLLECTED_ROWS_MAX + 1)
        return rows if len(rows) <= heuristics.COLLECTED_ROWS_MAX else None

    def _rows_over_literals(self, entry, maps: list[tuple]) -> list[tuple] | None:
        """The view's rows over its maps' literals, computed while Spark plans (no job) and sorted here; None
        where the view needs a Spark job for them (see literal_rows_sql and sorted_rows)."""
        sql = literal_rows_sql(entry, maps)
        if sql is None:
            return None
        frame = self.spark.sql(sql)
        order_types = [f.dataType.simpleString() for f in frame.schema.fields[len(output_columns(entry)):]]
        return sorted_rows(entry, [tuple(r) for r in frame.collect()], order_types)

    def _collect(self, sql: str, inline_rows: int) -> list[tuple]:
        """The query's rows, at most one more than an inline form may hold (in one Spark job: the view's
        rows are usually fewer than the limit, and spread over the partitions)."""
        with session_settings(self.spark, COLLECT_SETTINGS):
            return [tuple(r) for r in self.spark.sql(f"{sql} LIMIT {inline_rows + 1}").collect()]

    def _replace(self, entry, form: str, version: int, row_count: int, maps: str, text: str):
        """Write the definition; the store's latest snapshot after that (None where logs are out of reach)."""
        with self._writing:
            self._write_definition(entry, form, version, row_count, maps, text)
            if not self.logs.available:
                return None
            latest = self.logs.snapshot(entry.store)
            if latest is None:
                self.spark.sql(f"DROP VIEW IF EXISTS {entry.name}")
                raise RefreshError(f"the map store {entry.store} of view {entry.name} was dropped while the "
                                   f"view's definition was written (by DROP INCREMENTAL VIEW {entry.name} in "
                                   f"another session?); the definition was removed again")
            return latest

    def _write_definition(self, entry, form: str, version: int, row_count: int, maps: str, text: str) -> None:
        properties = {PROPERTY_FORM: form, PROPERTY_VERSION: str(version), PROPERTY_ROWS: str(row_count),
                      PROPERTY_MAPS: maps}
        if self.logs.available and self._alter_definition(entry.name, properties, text):
            return
        listed = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
        self.spark.sql(f"CREATE OR REPLACE VIEW {entry.name} TBLPROPERTIES ({listed}) AS {text}")

    def _alter_definition(self, name: str, properties: dict, text: str) -> bool:
        """Replace the text, schema and given properties of the view's existing catalog entry in one
        metastore update, keeping what CREATE VIEW recorded with it (the output column names, the SQL
        settings): CREATE OR REPLACE VIEW would also drop and plan the view again. False, with nothing
        written, where the entry is not a view with the same column names or its fields are not where
        this expects them."""
        js = self.spark._jsparkSession
        catalog = js.sessionState().catalog()
        try:
            meta = catalog.getTableMetadata(js.sessionState().sqlParser().parseTableIdentifier(name))
        except (AnalysisException, Py4JJavaError):  # no such view
            return False
        schema = self.spark.sql(text)._jdf.schema()  # analysis only, no job
        if meta.tableType().name() != "VIEW" or list(schema.fieldNames()) != list(meta.schema().fieldNames()):
            return False
        # CatalogTable is a Scala case class: its copy method takes every field, whose current values are
        # its copy$default$N methods; the fields to replace are found by their current values.
        fields = [getattr(meta, f"copy$default${i}")() for i in range(1, meta.productArity() + 1)]
        updated = meta.properties()
        for key, value in properties.items():
            updated = updated.updated(key, value)
        replace = {"properties": (meta.properties(), updated), "viewText": (meta.viewText(), self.spark._jvm.scala.Some(text)),
                   "schema": (meta.schema(), schema)}
        for field, (current, new) in replace.items():
            at = [i for i, f in enumerate(fields) if isinstance(f, JavaObject) and f.equals(current)]
            if not at or (field != "viewText" and len(at) != 1):
                return False
            for i in at:  # viewText, and viewOriginalText where it holds the same text
                fields[i] = new
        try:
            catalog.alterTable(meta.copy(*fields))
        except (AnalysisException, Py4JJavaError):  # dropped meanwhile: CREATE OR REPLACE writes it, and _replace sees the store
            return False
        return True

    def _checked(self, entry, version: int, latest) -> str:
        """ROWS, unless a later commit to the store (`latest`, looked up after the replacement) raced the
        replacement: then the view reads the store."""
        if latest is not None and latest.version != version:
            self._replace(entry, STORE, latest.version, 0, "no", read_view_sql(entry))
            return STORE
        return ROWS


def _int(value, default=None):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def increment_rows(frame, entry, limit: int | None = None) -> list[tuple]:
    """The rows of the view's maps among store rows (a DataFrame), raw in map_columns order; at most `limit`."""
    ids = ", ".join(map(str, view_map_ids(entry)))
    rows = frame.where(f"map_id IN ({ids})").selectExpr(*(c.raw(c.name) for c in map_columns(entry)))
    return [tuple(r) for r in (rows if limit is None else rows.limit(limit)).collect()]


def _compact_maps_sql(entry, maps_at: str) -> str:
    """The view's maps in `maps_at` (store rows) as one raw row per map and key, in map_columns order."""
    columns = map_columns(entry)
    keys = [c for c in columns if not c.name.startswith("v_")]
    values = [c for c in columns if c.name.startswith("v_")]
    ids = ", ".join(map(str, view_map_ids(entry)))
    select = [c.raw(c.name) for c in keys] + [f"SUM({c.name})" for c in values]
    live = " OR ".join(f"COALESCE(SUM({c.name}), 0) <> 0" for c in values) or "FALSE"
    return (f"SELECT {', '.join(select)} FROM ({maps_at}) AS m WHERE map_id IN ({ids}) "
            f"GROUP BY {', '.join(c.name for c in keys)} HAVING {live}")
