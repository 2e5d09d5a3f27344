"""The maps of a new view computed into its map store, and the user's view written over them: the part of
CREATE (and of a rebuild) after the view is compiled."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import replace

from spark_ivm import heuristics
from spark_ivm.compiler.plan import Plan, Statement
from spark_ivm.errors import IVMError
from spark_ivm.runtime.catalog_format import ViewEntry
from spark_ivm.runtime.fused import Fused, fuse, fused_sql
from spark_ivm.runtime.mapstore import (
    ENTRY_TOKEN, SEQUENCE, SEQUENCE_ID, StoreColumns, StoredMap, StoreLayout, bookkeeping_metadata, key_column,
    ordered_rows_sql, sequence_sql, shared_value_column,
)
from spark_ivm.runtime.refresh import INTEGRAL_TYPES, STORE_WRITE_SETTINGS, crash_point, sources
from spark_ivm.runtime.run import RefreshRun
from spark_ivm.runtime.session_scope import parallel, session_settings, store_write_parallelism
from spark_ivm.runtime.sqlgen import VALUE, statement_sql


def write_maps(engine, name, sql, options, store, plan: Plan, relation_tables, source_columns, output_types,
               versions, run: RefreshRun, members: list[ViewEntry], source_bytes: int | None = None) -> ViewEntry:
    """Compute the maps from the sources as of `versions` into the store, beside those of the store's other
    views (`members`), and write the user's view; the view's entry. source_bytes: the sources' size on
    disk, which sets the write's parallelism (heuristics.store_write_partitions)."""
    spark = engine.spark
    maps_from = replace(sources(run, relation_tables, source_columns, versions, None), whole=True)
    # Maps that sum different values over the same product per the same keys (a view's SUMs and
    # COUNTs) are computed by one aggregation, as a trigger's statements are: one scan of their
    # sources instead of one per map. Each query: (its maps, its SQL).
    queries = [(item.targets, fused_sql(item, maps_from)) if isinstance(item, Fused)
               else ((item.target,), statement_sql(item.expr, item.keys, maps_from))
               for item in fuse([Statement(m.name, m.keys, "+=", m.definition) for m in plan.maps])]
    # The SQL is made here, in this thread (it registers the pinned source views); only Spark's
    # analysis of each query, for its types, runs in parallel.
    schemas = parallel(spark, lambda query: spark.sql(query[1]).schema.fields, queries)
    key_types: dict[str, str] = {}
    value_types = {}
    for (maps, _), schema in zip(queries, schemas):
        fields = {f.name: f.dataType.simpleString() for f in schema}
        for i, map_name in enumerate(maps):
            for k in plan.map(map_name).keys:
                key_types.setdefault(k, fields[k])
            value_types[map_name] = _value_type(fields[VALUE if len(maps) == 1 else f"{VALUE}{i}"])
    layout = _allocate(spark, store, name, plan, [maps for maps, _ in queries], key_types, value_types, members)
    new_store = not spark.catalog.tableExists(store)
    store_columns = layout.columns if new_store else _extend_store(engine, store, layout)
    token = uuid.uuid4().int >> 66  # 62 bits: a positive BIGINT
    progress = {**versions, ENTRY_TOKEN: token}
    rows = " UNION ALL ".join(
        [layout.rows_sql(maps[0], sql, store_columns) if len(maps) == 1
         else layout.fused_rows_sql(maps, sql, store_columns, live=True) for maps, sql in queries]
        + [layout.progress_sql(progress, store_columns)]
        + ([sequence_sql(0, store_columns)] if new_store else []))
    partitions, parallelism = store_write_parallelism(spark, source_bytes)
    rows = ordered_rows_sql(rows, store_columns, partitions)
    # A new store's bookkeeping is all in this commit, so its user metadata can say what it is (a shared
    # store's first refresh reads the other views' bookkeeping from its rows).
    settings = {**STORE_WRITE_SETTINGS, **parallelism}
    if new_store:
        settings["spark.databricks.delta.commitInfo.userMetadata"] = bookkeeping_metadata(
            {layout.progress_id: progress, SEQUENCE_ID: {SEQUENCE: 0}})
    with session_settings(spark, settings):
        if new_store:
            spark.sql(
                f"CREATE TABLE {store} USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
                f"'delta.enableChangeDataFeed' = 'false', "
                f"'delta.checkpointInterval' = '{heuristics.STORE_CHECKPOINT_INTERVAL}') "
                f"AS {rows}")
        else:
            spark.sql(f"INSERT INTO {store} {rows}")
    crash_point("build_after_store")
    entry = ViewEntry(name, sql, options, plan, layout, relation_tables, source_columns, output_types,
                      time.time(), spark.catalog.currentDatabase(), token)
    # The view's maps read from the files the new version's checksum lists: reading the store by name would
    # make Delta rebuild the state of its new version first.
    snapshot = engine.logs.snapshot(store) if engine.logs.available else None
    version = snapshot.version if snapshot is not None else engine.store_version(store)
    run.pin_store(store, version, snapshot)
    ids = [m.map_id for m in layout.maps]
    maps_at = f"SELECT * FROM {run.store_rows(store, ids)} WHERE map_id IN ({', '.join(map(str, ids))})"
    engine.forms.publish(entry, version, maps_at, current={}, retry=True,
                         store_bytes=snapshot.size_bytes if snapshot is not None else None)
    crash_point("build_after_view")
    return entry


def _allocate(spark, store: str, name: str, plan: Plan, computed_together: list[tuple[str, ...]],
              key_types: dict[str, str], value_types: dict[str, str], members: list[ViewEntry]) -> StoreLayout:
    """The view's place in its store: map ids and a progress id no other view of the store uses (one id
    for the maps of each of `computed_together`, which sum values over one product per the same keys, and
    share their rows: see mapstore), and a store column per key variable (`k_<var>`, or `k_<var>_<type>`
    if another view has `k_<var>` with another type)."""
    taken = {}
    if spark.catalog.tableExists(store):
        taken = {f.name: f.dataType.simpleString() for f in spark.table(store).schema.fields}
    first_id = max([i for e in members for i in e.layout.map_ids] + [-1]) + 1
    progress_id = min([i for e in members for i in e.layout.map_ids] + [0]) - 1
    names = []
    for var, type_sql in key_types.items():
        column = key_column(var)
        if taken.get(column, type_sql) != type_sql:
            column = key_column(var, type_sql)
        names.append((var, column))
    families = computed_together if heuristics.MAPS_SHARE_ROWS else [(m,) for f in computed_together for m in f]
    stored = {}
    for number, family in enumerate(families):
        of_type: Counter = Counter()
        for map_name in family:
            type_sql = value_types[map_name]
            of_type[type_sql] += 1
            column = None if of_type[type_sql] == 1 else shared_value_column(type_sql, of_type[type_sql])
            stored[map_name] = StoredMap(first_id + number, map_name, plan.map(map_name).keys, type_sql, column)
    maps = tuple(stored[m.name] for m in plan.maps)
    layout = StoreLayout(store, maps, tuple(key_types.items()), tuple(names), progress_id)
    for column, type_sql in layout.columns.columns:
        if taken.get(column, type_sql) != type_sql:
            raise IVMError(f"map store {store} has a column {column} of type {taken[column]}, "
                           f"view {name} needs {type_sql}")
    return layout


def _extend_store(engine, store: str, layout: StoreLayout) -> StoreColumns:
    """Add the columns the view needs to a shared store; the store's columns after that."""
    have = {f.name for f in engine.spark.table(store).schema.fields}
    missing = [(c, t) for c, t in layout.columns.columns if c not in have]
    if missing:
        engine.spark.sql(f"ALTER TABLE {store} ADD COLUMNS ({', '.join(f'{c} {t}' for c, t in missing)})")
    return engine.store_columns(store)


def _value_type(type_sql: str) -> str:
    # Integral sums are BIGINT already; keep the exact type Spark gave otherwise.
    return "bigint" if type_sql in INTEGRAL_TYPES else type_sql
