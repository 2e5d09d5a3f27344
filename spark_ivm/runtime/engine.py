"""Creating, refreshing, dropping and describing incremental views on a Spark session.

A view has three parts, all in the warehouse: a row in the catalog table (its SQL, options, plan and
sources), its map store (a Delta table: maps + progress, see mapstore.py) and a Spark view over the
store that returns exactly what the defining query returns.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import pickle
import re
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.functions import broadcast

from spark_ivm import udfs
from spark_ivm.compiler import compile_query
from spark_ivm.errors import (
    InvalidQueryError, IVMError, ParseError, RefreshError, UnknownTableError, UnknownViewError, UnsupportedQueryError, ViewExistsError,
)
from spark_ivm.analysis import map_key_bindings, map_names, relations
from spark_ivm.calculus import Rel
from spark_ivm.heuristics import (
    LISTED_KEY_VALUES_MAX, STORE_FILE_ROWS, checkpoint_partitions, default_depth_plan, lists_batch_values,
    reads_source_once, reads_store_once, runs_interpreted,
)
from spark_ivm.plan import Plan
from spark_ivm.printer import to_text
from spark_ivm.runtime import sources as source_tables
from spark_ivm.runtime.mapstore import (
    COMPACT_EVERY, ENTRY_TOKEN, SEQUENCE, SEQUENCE_ID, StoreColumns, StoredMap, StoreLayout, append_sql, bookkeeping_sql,
    compact_sql, key_column, key_range_sql, key_set_sql, live_rows_sql, map_conditions, ordered_rows_sql, sequence_sql,
    staged_sql, union_sql,
)
from spark_ivm.runtime.sqlgen import VALUE, Sources, literal_sql, quote, shared_products, statement_sql, with_shared
from spark_ivm.runtime.statements import (
    CreateView, DropView, ExplainView, RefreshAll, RefreshView, ShowViews,
)
from spark_ivm.sql import translate

log = logging.getLogger("spark_ivm")

CATALOG_CONF = "spark.ivm.catalog"
DEFAULT_CATALOG = "default.spark_ivm_views"
COMPACT_CONF = "spark.ivm.compactEvery"
BROADCAST_BATCH_ROWS = 200_000  # a consolidated batch up to this size is broadcast to the joins that read it
LOOKUP_THREADS = 4  # catalog and Delta log look-ups in flight at once (each mostly waits on the driver)
# Session settings for the refresh's own Spark work. Adaptive execution turns every broadcast and shuffle
# of the triggers' small joins into a job of its own: with it off a refresh of a two-table join view ran
# 31 jobs in 9.5 s instead of 50 in 12–15 s (2 cores, 20,000 rows, a 5-row batch).
REFRESH_SETTINGS = {"spark.sql.adaptive.enabled": "false"}
# Session settings for a refresh that runs its plans interpreted (see heuristics.runs_interpreted): no
# whole-stage code, and expressions evaluated without generating code for them either.
INTERPRETED_SETTINGS = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
CODEGEN_CONF = "spark.ivm.codegen"  # on (always compiled), off (always interpreted) or auto (by size)
# Compiled unless chosen otherwise: auto made a refresh of CI's 72 differential views (one store, all
# interpreted) fill the driver's 4 GB heap and stall in full garbage collections; why is not known yet.
CODEGEN_DEFAULT = "on"
# Session settings for writing a map store: files of bounded size, so that a store written in key order
# has files that each hold a narrow range of keys (see mapstore.key_order).
STORE_WRITE_SETTINGS = {"spark.sql.files.maxRecordsPerFile": str(STORE_FILE_ROWS)}
# Batch columns whose range bounds the map keys a refresh reads (see _RefreshRun._consolidate): their
# values come back to Python and go into SQL as literals of the same value.
_RANGED_TYPE = re.compile(r"tinyint|smallint|int|bigint|decimal\(\d+,\d+\)|date|string")
CRASH_ENV = "SPARK_IVM_CRASH_AT"  # test hook: exit the process abruptly at a named refresh step


def _crash_point(step: str) -> None:
    if os.environ.get(CRASH_ENV) == step:
        os._exit(17)


@dataclass
class ViewEntry:
    name: str  # qualified db.view
    sql: str
    options: dict
    plan: Plan
    layout: StoreLayout
    sources: dict[str, str]  # relation name in the plan -> qualified table
    source_columns: dict[str, list[list[str]]]  # qualified table -> [[column, type], …]
    output_types: list[list[str]]  # [[column, type], …] of the defining query
    created_at: float
    database: str = ""  # the current database at CREATE: unqualified names in `sql` resolve there
    # Written with the view's progress in its store at CREATE; a cached entry whose token the store no
    # longer holds is stale (the view was dropped, re-created or rebuilt by another process).
    token: int = 0

    @property
    def store(self) -> str:
        return self.layout.table


class _StaleEntry(Exception):
    """A cached catalog entry no longer describes the view in its store."""


class Engine:
    def __init__(self, spark):
        self.spark = spark
        # Catalog entries by qualified name. A refresh checks an entry against the token in its store,
        # which it reads anyway, so a refresh by name costs no read of the catalog.
        self._cache: dict[str, ViewEntry] = {}
        # Per map store, this engine's last commit to it: its tag, the version it must have, and the
        # bookkeeping it left. While that commit is the store's latest, a refresh takes its progress from
        # here: one look at the store's history instead of an aggregate over its rows.
        self._written: dict[str, tuple[str, int, dict[int, dict[str, int]]]] = {}
        # Every catalog entry, in creation order, as of the catalog's commit (table, version, user metadata)
        # they were read at, or the commit this engine's own append of an entry must have made. While that
        # commit is the catalog's latest, listing the views costs one look at its history instead of a
        # read of every entry (creating 8 views in one store spent 32 of its 91 s reading the catalog).
        self._listed: tuple[tuple[str, int, str | None], list[ViewEntry]] | None = None

    # -- dispatch ------------------------------------------------------------------------------------
    def execute(self, statement):
        if isinstance(statement, CreateView):
            self.create(statement)
            return self._message(f"created incremental view {self.qualify(statement.name)}")
        if isinstance(statement, RefreshView):
            return self._stats_frame([self.refresh(statement.name, full=statement.full)])
        if isinstance(statement, RefreshAll):
            return self._stats_frame(self.refresh_all())
        if isinstance(statement, DropView):
            self.drop(statement.name, statement.if_exists)
            return self._message(f"dropped incremental view {self.qualify(statement.name)}")
        if isinstance(statement, ShowViews):
            return self.show()
        if isinstance(statement, ExplainView):
            return _local_frame(self.spark, [(self.explain(statement.name),)], "plan STRING")
        raise TypeError(statement)

    def _message(self, text: str):
        return _local_frame(self.spark, [(text,)], "result STRING")

    def _stats_frame(self, stats: list[dict]):
        rows = [(s["view"], s["status"], json.dumps(s["versions"]), s["rows_written"], float(s["seconds"]),
                 json.dumps(s.get("steps", {})), s.get("execution"))
                for s in stats]
        return _local_frame(
            self.spark, rows,
            "view STRING, status STRING, source_versions STRING, rows_written BIGINT, seconds DOUBLE, steps STRING, "
            "execution STRING")

    # -- names ---------------------------------------------------------------------------------------
    def qualify(self, name: str) -> str:
        parts = name.split(".")
        if len(parts) == 1:
            return f"{self.spark.catalog.currentDatabase()}.{parts[0]}".lower()
        return name.lower()

    @property
    def catalog_table(self) -> str:
        return self.spark.conf.get(CATALOG_CONF, DEFAULT_CATALOG)

    # -- catalog -------------------------------------------------------------------------------------
    def _ensure_catalog(self) -> None:
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.catalog_table} (name STRING, sql STRING, entry STRING, "
            f"created_at DOUBLE) USING delta "
            f"TBLPROPERTIES ('delta.enableChangeDataFeed' = 'false')")

    def _entries(self) -> list[ViewEntry]:
        if not self.spark.catalog.tableExists(self.catalog_table):
            self._listed = None
            return []
        latest = source_tables.latest_commit(self.spark, self.catalog_table)
        commit = (self.catalog_table, int(latest["version"]), latest["userMetadata"])
        if self._listed and self._listed[0] == commit:
            entries = self._listed[1]
        else:
            rows = self.spark.sql(
                f"SELECT entry FROM {self.catalog_table} VERSION AS OF {commit[1]} ORDER BY created_at").collect()
            entries = [pickle.loads(base64.b64decode(r["entry"])) for r in rows]
        self._listed = (commit, entries)
        self._cache = {e.name: e for e in entries}
        return list(entries)

    def entry(self, name: str, cached: bool = True) -> ViewEntry:
        qualified = self.qualify(name)
        if cached and qualified in self._cache:
            return self._cache[qualified]
        self._cache.pop(qualified, None)
        if self.spark.catalog.tableExists(self.catalog_table):
            rows = self.spark.sql(
                f"SELECT entry FROM {self.catalog_table} WHERE name = '{qualified}'").collect()
            if rows:
                self._cache[qualified] = pickle.loads(base64.b64decode(rows[0]["entry"]))
                return self._cache[qualified]
        raise UnknownViewError(f"no incremental view named {qualified}")

    def _save_entry(self, e: ViewEntry, new: bool = False) -> None:
        self._ensure_catalog()
        self._cache[e.name] = e
        blob = base64.b64encode(pickle.dumps(e)).decode()
        row = self.spark.createDataFrame([(e.name, e.sql, blob, e.created_at)],
                                         "name STRING, sql STRING, entry STRING, created_at DOUBLE")
        if new:  # an append is a cheaper commit than a MERGE
            tag = f"spark_ivm entry {uuid.uuid4().hex}"
            listed = self._listed
            row.write.format("delta").mode("append").option("userMetadata", tag).saveAsTable(self.catalog_table)
            # The append is the listing's next commit unless another process wrote in between: then the
            # next listing finds another version or tag there and reads the catalog.
            self._listed = ((self.catalog_table, listed[0][1] + 1, tag), listed[1] + [e]) if listed else None
            return
        self._listed = None
        row.createOrReplaceTempView("__ivm_entry")
        self.spark.sql(
            f"MERGE INTO {self.catalog_table} t USING __ivm_entry s ON t.name = s.name "
            f"WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")

    def _delete_entry(self, name: str) -> None:
        self._cache.pop(name, None)
        self._listed = None
        if self.spark.catalog.tableExists(self.catalog_table):
            self.spark.sql(f"DELETE FROM {self.catalog_table} WHERE name = '{name}'")

    def _ordered_entries(self) -> list[ViewEntry]:
        """Views in dependency order: a view reading another incremental view comes after it."""
        entries = self._entries()
        by_store = {e.name: e for e in entries}
        ordered, seen = [], set()

        def visit(e: ViewEntry):
            if e.name in seen:
                return
            seen.add(e.name)
            for table in e.sources.values():
                if table in by_store:
                    visit(by_store[table])
            ordered.append(e)

        for e in entries:
            visit(e)
        return ordered

    # -- CREATE --------------------------------------------------------------------------------------
    def create(self, stmt: CreateView) -> None:
        name = self.qualify(stmt.name)
        entries = self._entries()
        if any(e.name == name for e in entries):
            if stmt.if_not_exists:
                return
            raise ViewExistsError(f"incremental view {name} already exists")
        if self.spark.catalog.tableExists(name):
            raise ViewExistsError(f"a table or view named {name} already exists")
        store = self._store_name(name, stmt.options)
        new_store = not self.spark.catalog.tableExists(store)
        if not new_store:
            columns = {f.name for f in self.spark.table(store).schema.fields}
            if not {"map_id", "src", "src_version"} <= columns:
                raise IVMError(f"{store} exists and is not a map store; choose another store name")
        try:
            entry = self._build(name, stmt.query, stmt.options, store, stmt.positioned_query or stmt.query,
                                entries)
            self._save_entry(entry, new=True)
        except BaseException:
            self._remove_objects(name, store, keep_store=not new_store)
            raise

    def _store_name(self, name: str, options: dict) -> str:
        shared = options.get("store")
        return self.qualify(shared) if shared else f"{name}__ivm_maps"

    def _store_members(self, store: str, entries=None) -> list[ViewEntry]:
        return [e for e in (self._entries() if entries is None else entries) if e.store == store]

    def _build(self, name: str, sql: str, options: dict, store: str, positioned_sql: str | None = None,
               entries: list[ViewEntry] | None = None) -> ViewEntry:
        positioned_sql = positioned_sql or sql
        tables = source_tables.referenced_tables(positioned_sql)

        def table_fields(t: str):
            q = self.qualify(t)
            if q == name or not self.spark.catalog.tableExists(q):
                return None
            return q, [[f.name, f.dataType.simpleString()] for f in self.spark.table(q).schema.fields]

        found = {t: f for t, f in zip(tables, _parallel(self.spark, table_fields, tables)) if f}
        qualified = {t: q for t, (q, _) in found.items()}
        fields = {q: columns for q, columns in found.values()}
        query = translate(positioned_sql, {t: [c for c, _ in fields[q]] for t, q in qualified.items()})  # raises UnknownTableError for the missing ones
        view = name.split(".")[-1]
        if "depth" in options:  # `depth = unlimited` is None too, but chosen
            plan = compile_query(query, name=view, depth=options["depth"])
        else:
            plan = default_depth_plan(lambda depth: compile_query(query, name=view, depth=depth))
        udfs.require(self.spark, udfs.plan_functions(plan), view=name)
        relation_tables = {r: qualified[_schema_key(r, qualified)] for r in query.relations}
        source_list = sorted(set(relation_tables.values()))

        def checked_version(table: str) -> tuple[int, int]:
            size = source_tables.check_delta_source(self.spark, table)  # may turn the feed on: a new version
            return source_tables.current_version(self.spark, table), size

        looked_up = dict(zip(source_list, _parallel(self.spark, checked_version, source_list)))
        versions = {t: version for t, (version, _) in looked_up.items()}
        output_types = [[f.name, f.dataType.simpleString()] for f in _query_schema(self.spark, positioned_sql)]
        names = [n.lower() for n, _ in output_types]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            # A Spark view cannot have two columns of one name; the query alone could.
            raise UnsupportedQueryError(f"two output columns named {repeated[0]}",
                                        detail="give the columns distinct aliases")
        source_columns = {t: fields[t] for t in source_list}

        with _RefreshRun(self.spark) as run:
            references = Counter(relation_tables[a.name] for m in plan.maps for a in m.definition.walk()
                                 if isinstance(a, Rel))
            for table, (version, size) in looked_up.items():
                if reads_source_once(references[table], size):
                    run.read_source_once(table, version)
            return self._build_store(name, sql, options, store, plan, relation_tables, source_columns,
                                     output_types, versions, run, entries)

    def _build_store(self, name, sql, options, store, plan, relation_tables, source_columns, output_types,
                     versions, run: "_RefreshRun", entries=None) -> ViewEntry:
        """Compute the maps from the sources as of `versions` into the store; the view's entry."""
        sources = self._sources(relation_tables, source_columns, versions, None, run)
        # The SQL is made here, in this thread (it registers the pinned source views); only Spark's
        # analysis of each map's query, for its types, runs in parallel.
        definitions = [statement_sql(m.definition, m.keys, sources) for m in plan.maps]
        schemas = _parallel(self.spark, lambda sql: self.spark.sql(sql).schema.fields, definitions)
        key_types: dict[str, str] = {}
        value_types = {}
        for m, schema in zip(plan.maps, schemas):
            fields = {f.name: f.dataType.simpleString() for f in schema}
            for k in m.keys:
                key_types.setdefault(k, fields[k])
            value_types[m.name] = _value_type(fields[VALUE])
        layout = self._allocate(store, name, plan, key_types, value_types, entries)
        new_store = not self.spark.catalog.tableExists(store)
        store_columns = layout.columns if new_store else self._extend_store(store, layout)
        token = uuid.uuid4().int >> 66  # 62 bits: a positive BIGINT
        rows = " UNION ALL ".join(
            [layout.rows_sql(m.name, sql, store_columns) for m, sql in zip(plan.maps, definitions)]
            + [layout.progress_sql({**versions, ENTRY_TOKEN: token}, store_columns)]
            + ([sequence_sql(0, store_columns)] if new_store else []))
        rows = ordered_rows_sql(rows, store_columns)
        with _session_settings(self.spark, STORE_WRITE_SETTINGS):
            if new_store:
                self.spark.sql(
                    f"CREATE TABLE {store} USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
                    f"'delta.enableChangeDataFeed' = 'false') AS {rows}")
            else:
                self.spark.sql(f"INSERT INTO {store} {rows}")
        entry = ViewEntry(name, sql, options, plan, layout, relation_tables, source_columns, output_types,
                          time.time(), self.spark.catalog.currentDatabase(), token)
        self.spark.sql(f"CREATE VIEW {name} AS {read_view_sql(entry)}")
        return entry

    def _allocate(self, store: str, name: str, plan: Plan, key_types: dict[str, str],
                  value_types: dict[str, str], entries: list[ViewEntry] | None = None) -> StoreLayout:
        """The view's place in its store: map ids and a progress id no other view of the store uses, and
        a store column per key variable (`k_<var>`, or `k_<var>_<type>` if another view has `k_<var>`
        with another type)."""
        members = [e for e in self._store_members(store, entries) if e.name != name]
        taken = {}
        if self.spark.catalog.tableExists(store):
            taken = {f.name: f.dataType.simpleString() for f in self.spark.table(store).schema.fields}
        first_id = max([i for e in members for i in e.layout.map_ids] + [-1]) + 1
        progress_id = min([i for e in members for i in e.layout.map_ids] + [0]) - 1
        names = []
        for var, type_sql in key_types.items():
            column = key_column(var)
            if taken.get(column, type_sql) != type_sql:
                column = key_column(var, type_sql)
            names.append((var, column))
        maps = tuple(StoredMap(first_id + i, m.name, m.keys, value_types[m.name]) for i, m in enumerate(plan.maps))
        layout = StoreLayout(store, maps, tuple(key_types.items()), tuple(names), progress_id)
        for column, type_sql in layout.columns.columns:
            if taken.get(column, type_sql) != type_sql:
                raise IVMError(f"map store {store} has a column {column} of type {taken[column]}, "
                               f"view {name} needs {type_sql}")
        return layout

    def _extend_store(self, store: str, layout: StoreLayout) -> StoreColumns:
        """Add the columns the view needs to a shared store; the store's columns after that."""
        have = {f.name for f in self.spark.table(store).schema.fields}
        missing = [(c, t) for c, t in layout.columns.columns if c not in have]
        if missing:
            self.spark.sql(f"ALTER TABLE {store} ADD COLUMNS ({', '.join(f'{c} {t}' for c, t in missing)})")
        return self._store_columns(store)

    def _store_columns(self, store: str) -> StoreColumns:
        return StoreColumns(tuple((f.name, f.dataType.simpleString()) for f in self.spark.table(store).schema.fields))

    def _remove_objects(self, name: str, store: str, keep_store: bool = False) -> None:
        """Drop the view and its maps: the whole store when no other view uses it (unless keep_store),
        else every row that belongs to no other view (also what a CREATE that failed half-way wrote)."""
        statements = [f"DROP VIEW IF EXISTS {name}"]
        others = [i for e in self._store_members(store) if e.name != name for i in e.layout.map_ids]
        if others:
            # The sequence number stays with the store: Delta skips writes tagged with a number it has seen.
            others.append(SEQUENCE_ID)
        if others or keep_store:
            kept = f"map_id NOT IN ({', '.join(map(str, others))})" if others else "TRUE"
            statements.append(f"DELETE FROM {store} WHERE {kept}")
        else:
            statements.append(f"DROP TABLE IF EXISTS {store}")
        for statement in statements:
            try:
                self.spark.sql(statement)
            except Exception as exc:  # cleanup must not hide the original error
                log.warning("cleanup of %s failed: %s", name, exc)

    # -- sources ---------------------------------------------------------------------------------------
    def _sources(self, relation_tables, source_columns, versions, layout, run: "_RefreshRun",
                 deltas=None, pending=None, bounds=None) -> Sources:
        deltas = deltas or {}
        pending = pending or {}  # map -> its increments from sources applied earlier in this refresh
        bounds = bounds or {}  # map -> the condition its rows that statements can join hold for

        def relation(rel: str) -> str:
            table = relation_tables[rel]
            return run.pinned(table, versions[table])

        def delta(rel: str) -> str:
            return deltas[rel]

        def map_sql(map_name: str) -> str:
            base = layout.read_map_sql(map_name, run.store(layout.table), bounds.get(map_name))
            extra = pending.get(map_name)
            if not extra:
                return base
            # Rows of a map sum per key (see read_map_sql): the earlier increments are more rows.
            return "(" + " UNION ALL ".join(f"SELECT * FROM {x} AS p{i}" for i, x in enumerate([base] + extra)) + ")"

        return Sources(
            relation=relation,
            delta=delta,
            map=map_sql,
            columns=lambda rel: [c for c, _ in source_columns[relation_tables[rel]]],
            map_keys=lambda map_name: layout.map(map_name).keys,
            stage=run.stage,
            drives=lambda rel: 0 < run.batch_rows.get(deltas.get(rel), 0) <= BROADCAST_BATCH_ROWS,
        )

    # -- REFRESH -------------------------------------------------------------------------------------
    def refresh(self, name: str, full: bool = False) -> dict:
        if full:
            return self._rebuild(self.entry(name, cached=False), time.perf_counter())
        cached = self.qualify(name) in self._cache
        with _session_settings(self.spark, REFRESH_SETTINGS), _RefreshRun(self.spark) as run:
            try:
                return self._refresh_store([self.entry(name)], run, check_tokens=cached)[0]
            except _StaleEntry:
                return self._refresh_store([self.entry(name, cached=False)], run)[0]

    def refresh_all(self) -> list[dict]:
        """Every view, one commit per map store: views that share a store are refreshed atomically."""
        by_store: dict[str, list[ViewEntry]] = {}
        for e in self._ordered_entries():
            by_store.setdefault(e.store, []).append(e)
        stats = []
        with _session_settings(self.spark, REFRESH_SETTINGS), _RefreshRun(self.spark) as run:
            for entries in by_store.values():
                stats += self._refresh_store(entries, run)
        return stats

    def _refresh_store(self, entries: list[ViewEntry], run: "_RefreshRun", check_tokens: bool = False) -> list[dict]:
        """Refresh views of one map store with one commit; their statistics, in order.

        check_tokens: the entries come from the cache; raise _StaleEntry if the store disagrees."""
        started = time.perf_counter()
        run.steps = {}
        for entry in entries:
            udfs.require(self.spark, udfs.plan_functions(entry.plan), view=entry.name)
        store = entries[0].store
        try:
            with run.timed("progress"):
                progress, store_version = self._latest_progress(store)
        except Exception:
            if check_tokens:  # e.g. the store was dropped by another process
                raise _StaleEntry() from None
            raise
        if check_tokens and any(progress.get(e.layout.progress_id, {}).get(ENTRY_TOKEN) != e.token for e in entries):
            raise _StaleEntry()
        sequence = progress.get(SEQUENCE_ID, {}).get(SEQUENCE, 0)
        run.pin_store(store, store_version)  # the maps are read as of the progress read
        _crash_point("after_progress")
        with run.timed("look-ups"):
            store_columns = self._store_columns(store)
            run.look_up({t for entry in entries for t in entry.sources.values()})
        stats: dict[str, dict] = {}
        work: list[_ViewRefresh] = []
        for entry in entries:
            applied = self._applied(entry, progress)
            targets = {t: run.version(t) for t in set(entry.sources.values())}
            for table in targets:
                self._check_source_schema(entry, table, run.columns(table))
            changed = [t for t in _ordered_tables(entry) if targets[t] > applied[t]]
            if changed:
                work.append(_ViewRefresh(entry, applied, targets, changed))
            else:
                stats[entry.name] = self._stats(entry, "up to date", applied, 0, started)
        execution = self._execution(run, store, work) if work else None
        with _session_settings(self.spark, INTERPRETED_SETTINGS if execution == "interpreted" else {}):
            staged = self._staged(work, sequence + 1, store_columns, run) if work else None
            _crash_point("after_deltas")
            if staged:
                _crash_point("before_write")
                try:
                    tag = f"spark_ivm refresh {sequence + 1} {uuid.uuid4().hex}"
                    with run.timed("write"):
                        written = self._write(store, store_columns, staged, sequence + 1, tag)
                except Exception as exc:
                    raise _refresh_failure(work[0].entry, exc) from exc
                self._written[store] = (tag, store_version + 1, _progress_after(progress, work, sequence + 1))
                _crash_point("after_write")
                for w in work:
                    stats[w.entry.name] = {**self._stats(w.entry, "refreshed", w.targets, written, started),
                                           "execution": execution}
        steps = run.step_seconds(time.perf_counter() - started)
        for s in stats.values():
            s["steps"] = steps
        return [stats[e.name] for e in entries]

    def _execution(self, run: "_RefreshRun", store: str, work: list["_ViewRefresh"]) -> str:
        """How the refresh's Spark plans run, as the session setting spark.ivm.codegen says: "compiled" (on,
        the default), "interpreted" (off), or by the size of what the refresh may scan (auto, see
        heuristics.runs_interpreted)."""
        chosen = self.spark.conf.get(CODEGEN_CONF, CODEGEN_DEFAULT).strip().lower()
        if chosen not in ("auto", "on", "off"):
            raise IVMError(f"{CODEGEN_CONF} must be auto, on or off, not {chosen!r}")
        if chosen == "auto":
            # The store as pinned, and the source tables statements read whole (first-order maintenance,
            # re-evaluation): what a refresh may scan beyond its batches.
            tables = {(store, run.store_versions.get(store))} | {
                (w.entry.sources[r], w.targets[w.entry.sources[r]])
                for w in work for s in _statements_of(w) for r in relations(s.expr)}
            sizes = [run.size_bytes(t, v) for t, v in sorted(tables, key=repr)]
            chosen = "off" if runs_interpreted(None if None in sizes else sum(sizes)) else "on"
        return "interpreted" if chosen == "off" else "compiled"

    def _staged(self, work: list["_ViewRefresh"], sequence: int, store_columns: StoreColumns,
                run: "_RefreshRun") -> str:
        """A temporary view of the rows to write: every view's map increments, summed to one row per
        map and key, its new progress, and the store's new sequence number.

        Each view applies its changed sources one after the other (the product rule): the triggers of
        a later source read the base tables and maps as updated by the batches of the earlier ones.
        The views advance together, one source at a time, so that each step is one Spark action for
        all views rather than one per view.
        """
        # Every batch first: the keys they hold bound the map rows the statements can join.
        wanted: dict[tuple, tuple[list, set[str]]] = {}  # batch -> (its columns, those that fix keys of maps)
        references = [{table: _map_references(w, table) for table in w.changed} for w in work]
        for w, refs in zip(work, references):
            for table in w.changed:
                _, ranged = wanted.setdefault(w.batch_key(table), (w.entry.source_columns[table], set()))
                ranged.update(c for _, fixed in refs[table] for _, c in fixed)
        try:
            run.consolidate(wanted)
        except Exception:
            for w in work:  # again one view at a time, so that the error names the view whose batch failed
                self._attributed(w.entry, lambda: run.consolidate({k: wanted[k] for k in map(w.batch_key, w.changed)}))
            raise
        for w, refs in zip(work, references):
            w.bounds = self._map_bounds(w, run, refs)
        read = [(i, name) for i, w in enumerate(work) for s in _statements_of(w) for name in _maps_read(s)]
        if reads_store_once(len(read)):
            rows = dict.fromkeys(work[i].entry.layout.rows_of(name, work[i].bounds.get(name)) for i, name in read)
            # Of those, the copy keeps only the rows at the batches' own values, written once per condition
            # however many maps it bounds: a value list can have thousands of literals.
            members = [self._map_bounds(w, run, refs, listed=True) for w, refs in zip(work, references)]
            maps_kept: dict[str | None, dict[int, None]] = {}  # condition -> the maps it keeps rows of
            for i, name in read:
                maps_kept.setdefault(members[i].get(name), {})[work[i].entry.layout.map(name).map_id] = None
            kept = None if members == [w.bounds for w in work] else " OR ".join(
                f"map_id IN ({', '.join(map(str, ids))})" + (f" AND {condition}" if condition else "")
                for condition, ids in maps_kept.items())
            run.read_store_once(work[0].entry.store, " OR ".join(rows), kept)
        for step in range(max(len(w.changed) for w in work)):
            read_later = []  # (view, its increments of this step) for views with sources still to apply
            for w in work:
                if step < len(w.changed):
                    rows = self._attributed(w.entry, lambda: self._source_increments(w, step, store_columns, run))
                    if step + 1 < len(w.changed) and rows:
                        read_later.append((w, rows))
                    else:
                        w.increments += rows.values()
            if read_later:
                # _materialize coalesces the union of all views' increments: no union of its own per view.
                view = self._materialize(run, [(w.entry, " UNION ALL ".join(rows.values())) for w, rows in read_later])
                for w, rows in read_later:
                    layout = w.entry.layout
                    for target in dict.fromkeys(target for target, _ in rows):
                        w.pending.setdefault(target, []).append(layout.read_map_sql(target, view))
                    ids = ", ".join(str(i) for i in layout.map_ids)
                    w.increments.append(f"SELECT * FROM {view} WHERE map_id IN ({ids})")
        # Materialized once: the write must not evaluate the triggers' joins again, and its row count
        # is then cheap to take.
        parts = [(w.entry, staged_sql(w.increments, [w.entry.layout.progress_sql(w.targets, store_columns)],
                                      store_columns, run.tasks)) for w in work]
        parts.append((work[0].entry, sequence_sql(sequence, store_columns)))
        return self._materialize(run, parts)

    def _source_increments(self, w: "_ViewRefresh", step: int, store_columns: StoreColumns,
                           run: "_RefreshRun") -> dict[tuple[str, int], str]:
        """The view's map increments from its step-th changed source, in the map store's row shape:
        (target map, statement number) -> SQL."""
        entry, table = w.entry, w.changed[step]
        # The consolidated batch is read by every statement of the trigger (and by other views).
        batch_view = run.batch(*w.batch_key(table), entry.source_columns[table])
        if not run.batch_rows[batch_view]:
            # The changes cancel out (a row inserted and deleted again): no statement has anything to add.
            w.versions[table] = w.targets[table]
            return {}
        deltas = {r: batch_view for r in _relations_of(entry, table)}
        sources = self._sources(entry.sources, entry.source_columns, w.versions, entry.layout, run, deltas,
                                w.pending, w.bounds)
        # A re-evaluation (:=) computes the map's new contents, so it reads this source after its batch.
        after = self._sources(entry.sources, entry.source_columns, {**w.versions, table: w.targets[table]},
                              entry.layout, run, deltas, w.pending, w.bounds)
        # Statements that sum different values over the same joins compute the joins once (see sqlgen).
        shared, statements = self._shared_products(entry, _statements_of(w, table))
        sources = with_shared(sources, shared)
        increments = {(s.target, i): entry.layout.rows_sql(
                          s.target, self._statement_increments(entry, s, after if s.op == ":=" else sources),
                          store_columns)
                      for i, s in enumerate(statements)}
        # Only now: `sources` reads the versions when the statements' SQL is made.
        w.versions[table] = w.targets[table]
        return increments

    @staticmethod
    def _shared_products(entry: ViewEntry, statements):
        """shared_products of a trigger's statements, sharing the products whose maps hold integers."""
        return shared_products(statements, exact=lambda m: entry.layout.map(m).value_type in _INTEGRAL_TYPES)

    @staticmethod
    def _map_bounds(w: "_ViewRefresh", run: "_RefreshRun", references: dict[str, list],
                    listed: bool = False) -> dict[str, str | None]:
        """Per map the refresh of a view reads: a condition on the store's columns that every row a
        statement can join holds for, or None where the whole map is needed.

        Where a statement joins a map with a batch on a key (see map_key_bindings), only keys in the
        range of the batch's values in that column can join. A map read by several statements needs the
        rows any of them can join; one read whole by any of them is read whole. With the store written
        in key order, Delta skips the files of other keys: a batch of new orders reads the orders-keyed
        maps' rows of new keys, not all of them. `references`: per changed source, _map_references.

        listed: only keys among the batch's values (run.batch_values), where the batch's are listed.
        Delta skips no more files by them, but they leave fewer rows to copy."""
        def bounded():
            for table in w.changed:
                batch = run.batch(*w.batch_key(table), w.entry.source_columns[table])
                if not run.batch_rows[batch]:
                    continue  # no statement of this source runs
                ranges, values = run.batch_ranges[batch], run.batch_values(batch) if listed else {}
                for name, fixed in references[table]:
                    yield name, [key_set_sql(key, values[column]) if column in values
                                 else key_range_sql(key, *ranges[column]) for key, column in fixed if column in ranges]

        return map_conditions(bounded())

    @staticmethod
    def _attributed(entry: ViewEntry, compute):
        """compute(), with a failure reported as a failure to refresh `entry`."""
        try:
            return compute()
        except IVMError:
            raise
        except Exception as exc:
            raise _refresh_failure(entry, exc) from exc

    def _materialize(self, run: "_RefreshRun", parts: list[tuple[ViewEntry, str]]) -> str:
        """One checkpointed temporary view of the UNION ALL of the views' parts. If Spark fails, each
        part is tried alone, so that the error names the view that caused it."""
        try:
            return run.checkpoint(union_sql([sql for _, sql in parts], run.tasks), step="triggers")
        except Exception as exc:
            if len(parts) > 1:
                for entry, sql in parts:
                    self._attributed(entry, lambda: run.checkpoint(sql, step="triggers"))
            raise _refresh_failure(parts[0][0], exc) from exc

    def _statement_increments(self, entry: ViewEntry, s, sources: Sources) -> str:
        if s.op == ":=":
            # Re-evaluation (depth 0): new contents minus old, as an increment.
            keys = ", ".join(quote(k) for k in s.keys)
            new = statement_sql(s.expr, s.keys, sources)
            old = sources.map(s.target)
            sel = f"{keys + ', ' if keys else ''}"
            union = f"SELECT {sel}{VALUE} FROM ({new}) n UNION ALL SELECT {sel}-{VALUE} AS {VALUE} FROM {old} o"
            group = f" GROUP BY {keys}" if keys else ""
            return f"SELECT {sel}SUM({VALUE}) AS {VALUE} FROM ({union}) d{group} HAVING SUM({VALUE}) <> 0"
        # A statement's rows are summed per map and key with all others when staged. Decimal values are
        # summed per statement first, so that each increment is rounded to the map's type once, after
        # summing, as computing the map from scratch does.
        exact_sum = not entry.layout.map(s.target).value_type.startswith("decimal")
        return statement_sql(s.expr, s.keys, sources, consolidated=not exact_sum)

    def _write(self, store: str, store_columns: StoreColumns, staged_view: str, sequence: int, tag: str) -> int:
        """One commit of all map increments, the new progress and sequence number: an append, or every
        `spark.ivm.compactEvery`-th refresh an overwrite with the compacted store. The commit carries
        `tag` as its user metadata. Returns the staged rows."""
        settings = {
            # Idempotent write: a second write computed from the same sequence number is skipped by
            # Delta, so a retried or concurrent refresh can never apply the same changes twice.
            "spark.databricks.delta.write.txnAppId": f"spark_ivm:{store}",
            "spark.databricks.delta.write.txnVersion": str(sequence),
            "spark.databricks.delta.commitInfo.userMetadata": tag,
            **STORE_WRITE_SETTINGS,
        }
        compact_every = int(self.spark.conf.get(COMPACT_CONF, str(COMPACT_EVERY)))
        statement = (compact_sql(store, staged_view, store_columns) if compact_every > 0 and sequence % compact_every == 0
                     else append_sql(store, staged_view))
        with _session_settings(self.spark, settings):
            self.spark.sql(statement)
        return self.spark.table(staged_view).count()

    def _latest_progress(self, store: str) -> tuple[dict[int, dict[str, int]], int]:
        """The store's bookkeeping (see _progress) and the store version it is of: from this engine's last
        commit when that is the store's latest and directly follows the version its refresh read (the
        tag is unique, so a commit skipped as a repeat or made by another process does not match)."""
        latest = source_tables.latest_commit(self.spark, store)
        version = int(latest["version"])
        written = self._written.get(store)
        if written and (latest["userMetadata"], version) == written[:2]:
            return {i: dict(p) for i, p in written[2].items()}, version
        self._written.pop(store, None)
        return self._progress(f"{store} VERSION AS OF {version}"), version

    def _progress(self, store: str) -> dict[int, dict[str, int]]:
        """Bookkeeping id -> {src: latest value}: per view (progress id), the last version applied of each
        source table and its entry token; the store's sequence number under SEQUENCE_ID. `store` may be
        any table expression of the store's rows."""
        progress: dict[int, dict[str, int]] = {}
        for r in self.spark.sql(bookkeeping_sql(store)).collect():
            progress.setdefault(r["map_id"], {})[r["src"]] = r["src_version"]
        return progress

    @staticmethod
    def _applied(entry: ViewEntry, progress: dict[int, dict[str, int]]) -> dict[str, int]:
        applied = {t: v for t, v in progress.get(entry.layout.progress_id, {}).items() if t != ENTRY_TOKEN}
        missing = [t for t in entry.sources.values() if t not in applied]
        if missing:
            raise RefreshError(f"view {entry.name} has no recorded progress for {missing[0]}; "
                               f"run REFRESH INCREMENTAL VIEW {entry.name} FULL")
        return applied

    @staticmethod
    def _check_source_schema(entry: ViewEntry, table: str, now: list[list[str]] | None) -> None:
        """`now`: the table's [[column, type], …] at this refresh, None when it no longer exists."""
        if now is None:
            raise RefreshError(f"source table {table} of view {entry.name} no longer exists")
        if now != entry.source_columns[table]:
            raise RefreshError(
                f"the columns of source table {table} changed since view {entry.name} was built "
                f"(was {entry.source_columns[table]}, now {now}); "
                f"run REFRESH INCREMENTAL VIEW {entry.name} FULL to rebuild it")

    def _stats(self, entry, status, versions, rows, started) -> dict:
        return {"view": entry.name, "status": status, "versions": versions, "rows_written": rows,
                "seconds": time.perf_counter() - started}

    def _rebuild(self, entry: ViewEntry, started: float) -> dict:
        """FULL refresh: compile again against the current schemas and recompute every map."""
        # Before anything is removed: a rebuild that cannot run must leave the view as it was.
        udfs.require(self.spark, udfs.plan_functions(entry.plan), view=entry.name)
        store = entry.store
        self._remove_objects(entry.name, store)
        # The definition's unqualified names mean what they meant at CREATE, whatever is current now.
        current = self.spark.catalog.currentDatabase()
        self.spark.catalog.setCurrentDatabase(getattr(entry, "database", "") or entry.name.split(".")[0])
        try:
            fresh = self._build(entry.name, entry.sql, entry.options, store)
        finally:
            self.spark.catalog.setCurrentDatabase(current)
        fresh.created_at = entry.created_at
        self._save_entry(fresh)
        versions = {t: source_tables.current_version(self.spark, t) for t in set(fresh.sources.values())}
        return self._stats(fresh, "rebuilt", versions, 0, started)

    # -- DROP / SHOW / EXPLAIN -------------------------------------------------------------------------
    def drop(self, name: str, if_exists: bool = False) -> None:
        try:
            entry = self.entry(name, cached=False)
        except UnknownViewError:
            if if_exists:
                return
            raise
        self._remove_objects(entry.name, entry.store)
        self._delete_entry(entry.name)

    def show(self):
        rows, progress = [], {}
        for e in self._entries():
            try:
                if e.store not in progress:  # one read per store, shared by its views
                    progress[e.store] = self._progress(e.store)
                applied = self._applied(e, progress[e.store])
                state = "ok"
            except Exception as exc:  # a broken view is listed, not hidden
                applied, state = {}, f"error: {exc}"
            rows.append((e.name, sorted(set(e.sources.values())), json.dumps(applied),
                         [m.name for m in e.plan.maps], state))
        return _local_frame(
            self.spark, rows, "name STRING, sources ARRAY<STRING>, source_versions STRING, maps ARRAY<STRING>, state STRING")

    def explain(self, name: str) -> str:
        e = self.entry(name, cached=False)
        counts = {r["map_id"]: r["n"] for r in self.spark.sql(
            f"SELECT map_id, COUNT(*) AS n FROM ({live_rows_sql(e.store, self._store_columns(e.store))}) "
            f"GROUP BY map_id").collect()}
        lines = [f"-- incremental view {e.name} (map store {e.store})"]
        for m in e.layout.maps:
            lines.append(f"-- map {m.name}[{', '.join(m.keys)}]: {counts.get(m.map_id, 0)} rows, value {m.value_type}")
        shared = []
        for t in e.plan.triggers:
            products, made = self._shared_products(e, t.statements)
            for product, (keys, definition) in products.items():
                readers = ", ".join(s.target for s in made if product in _maps_read(s))
                shared.append(f"ON BATCH OF {t.relation}: {product}[{', '.join(keys)}] := {to_text(definition)};"
                              f"  -- read by {readers}")
        if shared:
            shared.insert(0, "\n-- products the statements of a trigger share, computed once per refresh")
        return "\n".join(lines) + "\n" + e.plan.explain() + "\n".join(shared)


@dataclass
class _ViewRefresh:
    """One view's part of a refresh: the source versions it starts from and goes to, the sources that
    changed (in trigger order), and what its steps have produced so far."""
    entry: ViewEntry
    applied: dict[str, int]
    targets: dict[str, int]
    changed: list[str]
    versions: dict[str, int] = field(default_factory=dict)  # the version of each source the next step sees
    pending: dict[str, list[str]] = field(default_factory=dict)  # map -> increments of earlier steps
    increments: list[str] = field(default_factory=list)  # store-shaped rows to write
    bounds: dict[str, str | None] = field(default_factory=dict)  # map -> the rows its reads need (_map_bounds)

    def __post_init__(self):
        self.versions = dict(self.applied)

    def batch_key(self, table: str) -> tuple[str, int, int]:
        """The changed source's batch: (table, first version, last version) to apply."""
        return table, self.applied[table] + 1, self.targets[table]


class _RefreshRun:
    """What the views of one REFRESH (or CREATE) statement share: each source's version and columns,
    looked up once; each source's consolidated batch and each pinned table version, resolved once;
    and the temporary views, dropped at the end."""

    def __init__(self, spark):
        self.spark = spark
        self.run_id = uuid.uuid4().hex[:8]
        self.versions: dict[str, int] = {}
        self.batches: dict[tuple, str] = {}
        self.batch_rows: dict[str, int] = {}  # batch view -> its rows
        # batch view -> {column: (lowest, highest) as SQL literals, None if only NULLs}, for the columns
        # whose values order and print exactly as literals (see _consolidate)
        self.batch_ranges: dict[str, dict[str, tuple[str | None, str | None]]] = {}
        self._batch_values: dict[str, dict[str, list[str]]] = {}  # see batch_values
        self._listed_columns: dict[str, list[str]] = {}  # batch view -> its columns batch_values may list
        self.pins: dict[tuple, str] = {}
        self.stores: dict[str, str] = {}  # map store -> checkpoint of the rows its maps are read from
        self.stages: dict[str, str] = {}  # a statement's stage (its SELECT) -> its checkpoint
        self.store_versions: dict[str, int] = {}
        self.schemas: dict[str, list[list[str]] | None] = {}
        self.temporary: list[str] = []
        self.steps: dict[str, float] = {}  # seconds spent in each step of the refresh of a store

    @contextlib.contextmanager
    def timed(self, step: str):
        """Add the block's wall-clock seconds to `step`."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.steps[step] = self.steps.get(step, 0.0) + time.perf_counter() - started

    def step_seconds(self, total: float) -> dict[str, float]:
        """Seconds per step, rounded to milliseconds; "other" is the rest of `total` (making the statements'
        SQL, Spark's analysis outside the timed steps, the commit's bookkeeping)."""
        steps = {step: round(s, 3) for step, s in self.steps.items()}
        steps["other"] = round(max(0.0, total - sum(self.steps.values())), 3)
        return steps

    def __enter__(self) -> "_RefreshRun":
        return self

    def __exit__(self, *exc) -> None:
        for view in self.temporary:
            self.spark.catalog.dropTempView(view)

    def look_up(self, tables) -> None:
        """Look up the versions and columns of tables not looked up yet, in parallel."""
        missing = sorted(t for t in tables if t not in self.versions or t not in self.schemas)

        def both(table: str):
            columns = self.columns_now(table)
            return columns, source_tables.current_version(self.spark, table) if columns is not None else None

        for table, (columns, version) in zip(missing, _parallel(self.spark, both, missing)):
            self.schemas[table] = columns
            if version is not None:
                self.versions[table] = version

    def columns_now(self, table: str) -> list[list[str]] | None:
        return ([[f.name, f.dataType.simpleString()] for f in self.spark.table(table).schema.fields]
                if self.spark.catalog.tableExists(table) else None)

    def version(self, table: str) -> int:
        if table not in self.versions:
            self.versions[table] = source_tables.current_version(self.spark, table)
        return self.versions[table]

    def columns(self, table: str) -> list[list[str]] | None:
        """The table's [[column, type], …] now, or None when it does not exist."""
        if table not in self.schemas:
            self.schemas[table] = self.columns_now(table)
        return self.schemas[table]

    def size_bytes(self, table: str, version: int | None) -> int | None:
        """The table's size in bytes at the version, from its Delta snapshot (nothing is scanned); None where
        Spark does not tell (Spark Connect)."""
        jdf = getattr(self.spark.table(self.pinned(table, version)), "_jdf", None)
        return None if jdf is None else int(jdf.queryExecution().optimizedPlan().stats().sizeInBytes())

    def _register(self, df) -> str:
        name = f"__ivm_{self.run_id}_{len(self.temporary)}"
        df.createOrReplaceTempView(name)
        self.temporary.append(name)
        return name

    def checkpoint(self, sql: str, step: str) -> str:
        """A temporary view of the query's rows, computed once now (its time counted to `step`)."""
        # Checkpointed, not cached: cached blocks can be evicted and recomputed, a checkpoint is the rows
        # as computed once.
        with self.timed(step):
            return self._register(self._local_checkpoint(sql))

    def stage(self, sql: str) -> str:
        """A stage of the statements' SQL (see sqlgen), computed once however many statements share it: the
        statements of one view often re-evaluate the same nested aggregates for the same keys."""
        if sql not in self.stages:
            self.stages[sql] = self.checkpoint(sql, step="stages")
        return self.stages[sql]

    def _local_checkpoint(self, sql: str):
        """The query's rows computed once now, read in at most checkpoint_partitions partitions.

        A UNION ALL has every input's partitions (and a Delta read one per file), so a checkpoint of the
        many small statements of a refresh has hundreds of tiny ones: each later read would run a task
        per partition, and the store's append write a file per partition. Coalescing after the
        checkpoint keeps its computation parallel (a coalesce to more partitions changes nothing)."""
        checkpointed = _without_inflated_size_estimate(self.spark, self.spark.sql(sql).localCheckpoint())
        return checkpointed.coalesce(self.tasks)

    @property
    def tasks(self) -> int:
        """How many tasks read a checkpoint or a union of a refresh's statements (checkpoint_partitions)."""
        return checkpoint_partitions(self.spark.conf.get("spark.sql.shuffle.partitions", None))

    def read_store_once(self, table: str, rows: str, kept: str | None = None) -> None:
        """From now on, read the maps of the store from one checkpoint of the rows the condition `rows`
        holds for (see heuristics), of those only the rows `kept` holds for: Delta skips files by the
        key ranges of `rows`, `kept` leaves out the rows between the batches' values."""
        where = rows if kept is None else f"({rows}) AND ({kept})"
        self.stores[table] = self.checkpoint(
            f"SELECT * FROM {self.pinned(table, self.store_versions.get(table))} WHERE {where}", step="store read")

    def read_source_once(self, table: str, version: int) -> None:
        """From now on, read this table's version from one checkpoint of its rows (see heuristics)."""
        rows = self.checkpoint(f"SELECT * FROM {self.pinned(table, version)}", step="source reads")
        self.pins[(table, version)] = rows

    def pin_store(self, table: str, version: int) -> None:
        """Read the maps of this store as of this version."""
        self.store_versions[table] = version

    def store(self, table: str) -> str:
        """Where the maps of a store are read from: its checkpointed rows, or the store at its pinned
        version (as it is, when none is pinned)."""
        return self.stores.get(table) or self.pinned(table, self.store_versions.get(table))

    def pinned(self, table: str, version: int | None = None) -> str:
        """A temporary view of the table as of a version (None: as it is). Every statement that reads the
        table reads the view, so Delta resolves that version's snapshot once, not once per reference."""
        key = (table, version)
        if key not in self.pins:
            reader = self.spark.read.format("delta")
            if version is not None:
                reader = reader.option("versionAsOf", version)
            self.pins[key] = self._register(reader.table(table))
        return self.pins[key]

    def batch(self, table: str, start: int, end: int, columns) -> str:
        """A temporary view of the consolidated changes of the table's versions start..end."""
        key = (table, start, end)
        if key not in self.batches:
            self.consolidate({key: (columns, ())})
        return self.batches[key]

    def batch_values(self, view: str) -> dict[str, list[str]]:
        """The distinct non-NULL values of a batch's ranged columns as SQL literals, of the columns worth
        listing (heuristics.lists_batch_values) with at most LISTED_KEY_VALUES_MAX of them."""
        if view not in self._batch_values:
            columns = self._listed_columns[view]
            found: dict[str, list] = {}
            if columns:
                with self.timed("batches"):
                    sets = self.spark.table(view).agg(*(F.collect_set(F.col(quote(c))) for c in columns)).first()
                found = {c: sorted(map(literal_sql, values)) for c, values in zip(columns, sets)
                         if len(values) <= LISTED_KEY_VALUES_MAX}
            self._batch_values[view] = found
        return self._batch_values[view]

    def consolidate(self, wanted: dict[tuple, tuple]) -> None:
        """Consolidate the batches {(table, start, end): (columns, ranged columns)} not consolidated yet,
        with the range of values of each ranged column (batch_ranges)."""
        with self.timed("batches"):
            for key in wanted:
                if key not in self.batches:
                    self._consolidate(key, *wanted[key])

    def _consolidate(self, key: tuple, columns, ranged) -> None:
        table, start, end = key
        rows = self._local_checkpoint(source_tables.change_rows_sql(table, start, end, columns))
        # The ranges of the `ranged` columns come with the count, in the same job. Only of types whose
        # values come back to Python and go into SQL as the same literal (no float NaN, no time zones).
        ranged = [c for c, t in columns if c in ranged and _RANGED_TYPE.fullmatch(t)]
        found = rows.agg(F.count(F.lit(1)), *(f(F.col(quote(c))) for c in ranged for f in (F.min, F.max))).first()
        size = found[0]
        if 0 < size <= BROADCAST_BATCH_ROWS:
            # A batch is small next to the maps it joins: copy it to every task instead of shuffling the
            # maps to meet it.
            rows = broadcast(rows)
        view = self.batches[key] = self._register(rows)
        self.batch_rows[view] = size
        self.batch_ranges[view] = {
            c: (None, None) if found[1 + 2 * i] is None else (literal_sql(found[1 + 2 * i]), literal_sql(found[2 + 2 * i]))
            for i, c in enumerate(ranged)}
        self._listed_columns[view] = [
            c for i, c in enumerate(ranged) if found[1 + 2 * i] is not None
            and lists_batch_values(size, _span(found[1 + 2 * i], found[2 + 2 * i]))]


def _span(low, high) -> int | None:
    """How many values lie from low to high, for integers (None for other types)."""
    return high - low + 1 if isinstance(low, int) and isinstance(high, int) else None


def _without_inflated_size_estimate(spark, checkpointed):
    """The checkpoint, forgetting its query's size estimate when that is beyond Spark's own "unknown"
    (spark.sql.defaultSizeInBytes, 2^63 - 1 bytes).

    A checkpoint keeps the size Spark estimated for the query it computed, and without statistics Spark
    estimates a join as the product of its inputs' sizes. A stage that joins stages that join stages
    multiplies those products again: q18's stages reached estimates of 8,400 bits, and a refresh of all
    22 TPC-H views after five changes filled the driver's 4 GB heap with such numbers. An estimate that
    large decides nothing (it is far above the broadcast threshold either way), so the checkpoint is
    read instead as rows of unknown size."""
    jdf = getattr(checkpointed, "_jdf", None)
    if jdf is None:  # Spark Connect: the server plans, and its checkpoints are its own
        return checkpointed
    rows = jdf.logicalPlan()  # the checkpoint's leaf: its estimate is read without planning anything
    if int(rows.stats().sizeInBytes()).bit_length() < 64:
        return checkpointed
    plain = spark._jsparkSession.internalCreateDataFrame(rows.rdd(), jdf.schema(), False)
    return DataFrame(plain, spark)


def _parallel(spark, lookup, items) -> list:
    """[lookup(item) for item in items], run in a few threads: a Delta version, a table's details or a
    query's schema costs a driver round trip of 0.1–1 s each, and a view reads several tables. The
    calling thread's job group and description carry over to the threads."""
    items = list(items)
    if len(items) < 2:
        return [lookup(item) for item in items]
    keys = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel", "spark.scheduler.pool")
    try:
        sc = spark.sparkContext
        local = {k: sc.getLocalProperty(k) for k in keys}
    except Exception:  # Spark Connect has no SparkContext (and no job groups to carry over)
        sc, local = None, {}

    def run(item):
        for k, v in local.items():
            if v is not None:
                sc.setLocalProperty(k, v)
        return lookup(item)

    with ThreadPoolExecutor(max_workers=min(LOOKUP_THREADS, len(items))) as pool:
        return list(pool.map(run, items))


@contextlib.contextmanager
def _session_settings(spark, settings: dict[str, str]):
    """Set Spark session settings for the duration of a block, then restore what was there."""
    conf = spark.conf
    previous = {k: conf.get(k, None) for k in settings}
    for k, v in settings.items():
        conf.set(k, v)
    try:
        yield
    finally:
        for k, v in previous.items():
            if v is None:
                conf.unset(k)
            else:
                conf.set(k, v)


def _local_frame(spark, rows: list[tuple], schema: str):
    """A DataFrame of a few rows (a statement's result) with the schema `name TYPE, …`, as a SQL VALUES
    list: Spark holds it on the driver, where createDataFrame would start Python workers to read it."""
    columns = [c.strip().split(" ", 1) for c in schema.split(", ")]
    select = ", ".join(f"CAST(col{i + 1} AS {type_sql}) AS {quote(name)}" for i, (name, type_sql) in enumerate(columns))

    def literal(value) -> str:
        if isinstance(value, (list, tuple)):
            return f"array({', '.join(literal(v) for v in value)})"
        return literal_sql(value)

    if not rows:
        return spark.sql(f"SELECT {select} FROM VALUES ({', '.join(['NULL'] * len(columns))}) WHERE FALSE")
    values = ", ".join("(" + ", ".join(literal(v) for v in row) + ")" for row in rows)
    return spark.sql(f"SELECT {select} FROM VALUES {values}")


def _query_schema(spark, sql: str):
    """The output fields of the defining query, with Spark's own rejections as IVM errors."""
    from pyspark.errors import AnalysisException, ParseException

    try:
        return spark.sql(sql).schema.fields
    except ParseException as exc:
        # Spark's grammar is stricter than the front end's in places (e.g. `SELECT g,, x`).
        message = str(exc).strip().splitlines()[0]
        where = re.search(r"\(line (\d+), pos (\d+)\)", message)
        message = re.sub(r"\s*SQLSTATE: \w+|\s*\(line \d+, pos \d+\)", "", message)
        if where:
            raise ParseError(message, int(where[1]), int(where[2]) + 1) from None
        raise ParseError(message) from None
    except AnalysisException as exc:
        raise InvalidQueryError(f"Spark rejects the query: {str(exc).strip().splitlines()[0]}") from None


def _refresh_failure(entry: ViewEntry, exc: Exception) -> Exception:
    text = str(exc)
    if any(k in text for k in ("DELTA_CHANGE_DATA_FEED", "ChangeDataFeed", "FileNotFound", "VersionNotFound",
                               "DELTA_MISSING_CHANGE_DATA", "change data")):
        return RefreshError(
            f"the change data feed of a source of {entry.name} no longer covers the versions to apply "
            f"({text.strip().splitlines()[0][:300]}); run REFRESH INCREMENTAL VIEW {entry.name} FULL")
    return exc


def _schema_key(relation: str, qualified: dict[str, str]) -> str:
    for k in qualified:
        if k.lower() == relation.lower() or k.split(".")[-1].lower() == relation.lower():
            return k
    raise UnknownTableError(f"table {relation} is not known")


def _progress_after(progress: dict[int, dict[str, int]], work: list["_ViewRefresh"], sequence: int):
    """The store's bookkeeping once a refresh of `work` with this sequence number is written."""
    after = {i: dict(p) for i, p in progress.items()}
    for w in work:
        after.setdefault(w.entry.layout.progress_id, {}).update(w.targets)
    after[SEQUENCE_ID] = {SEQUENCE: sequence}
    return after


def _relations_of(entry: ViewEntry, table: str) -> list[str]:
    """The plan's relations that are the source table (a self-join reads one table as several)."""
    return [r for r, t in entry.sources.items() if t == table]


def _statements_of(w: "_ViewRefresh", table: str | None = None) -> list:
    """The trigger statements a refresh runs for one changed source of the view, or for all of them."""
    plan = w.entry.plan
    return [s for t in ([table] if table else w.changed) for rel in _relations_of(w.entry, t)
            if plan.trigger(rel) for s in plan.trigger(rel).statements]


def _map_references(w: "_ViewRefresh", table: str) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """The map references of the statements a refresh runs for one changed source of the view, each as
    (map, ((store key column, batch column), …)) for the keys the source's batch fixes (map_key_bindings).
    A re-evaluation (:=) also reads its map's old contents, all of them."""
    entry, layout = w.entry, w.entry.layout
    refs = []
    for s in _statements_of(w, table):
        for name, fixed in map_key_bindings(s.expr) + ([(s.target, ())] if s.op == ":=" else []):
            keys = layout.map(name).keys
            refs.append((name, tuple((layout.key_column(keys[k]), entry.source_columns[table][position][0])
                                     for k, _, position in fixed)))
    return refs


def _maps_read(statement) -> tuple[str, ...]:
    """The maps a statement reads: those its expression refers to, and a re-evaluated map's old contents."""
    return map_names(statement.expr) + ((statement.target,) if statement.op == ":=" else ())


def _ordered_tables(entry: ViewEntry) -> list[str]:
    return list(dict.fromkeys(entry.sources[t.relation] for t in entry.plan.triggers))


_INTEGRAL_TYPES = ("bigint", "int", "smallint", "tinyint")


def _value_type(type_sql: str) -> str:
    # Integral sums are BIGINT already; keep the exact type Spark gave otherwise.
    return "bigint" if type_sql in _INTEGRAL_TYPES else type_sql


def read_view_sql(entry: ViewEntry) -> str:
    """SQL of the user-facing view: the defining query's rows, names and types, from the map store."""
    query = entry.plan.query
    layout = entry.layout
    prefix = entry.name.split(".")[-1]
    stored = {a.name: layout.map(f"{prefix}_{a.name}") for a in query.aggregates}
    sums = [a for a in query.aggregates if a.reduce is None]
    keys = [f"{layout.key_column(k)} AS {quote(k)}" for k in query.keys]
    # A map's value is the sum of its rows at a key (see mapstore.py).
    columns = [f"COALESCE(SUM(CASE WHEN map_id = {stored[a.name].map_id} THEN {stored[a.name].value_column} END), 0)"
               f" AS {quote(a.name)}" for a in sums]
    ids = ", ".join(str(stored[a.name].map_id) for a in sums)
    group = f" GROUP BY {', '.join(layout.key_column(k) for k in query.keys)}" if query.keys else ""
    body = f"(SELECT {', '.join(keys + columns)} FROM {layout.table} WHERE map_id IN ({ids}){group}) AS g"
    for i, a in enumerate(a for a in query.aggregates if a.reduce is not None):
        m = stored[a.name]
        value_key = layout.key_column(a.value_keys[0])
        reduced = _REDUCERS[a.reduce].format(value_key)
        # The values present in each group: those whose count sums to more than 0.
        present = (f"SELECT {', '.join([layout.key_column(k) for k in query.keys] + [value_key])} FROM {layout.table} "
                   f"WHERE map_id = {m.map_id} GROUP BY {', '.join([layout.key_column(k) for k in query.keys] + [value_key])} "
                   f"HAVING SUM({m.value_column}) > 0")
        # The reduced side's keys get names of their own, so the outer SELECT's key names stay unambiguous.
        side_keys = [f"{layout.key_column(k)} AS {quote('__r_' + k)}" for k in query.keys]
        sub = f"SELECT {', '.join(side_keys + [f'{reduced} AS {quote(a.name)}'])} FROM ({present}) AS present{group}"
        on = " AND ".join(f"g.{quote(k)} <=> r{i}.{quote('__r_' + k)}" for k in query.keys)
        body += f" LEFT JOIN ({sub}) AS r{i} ON {on}" if on else f" CROSS JOIN ({sub}) AS r{i}"
    conditions = []
    if query.keys:
        conditions.append(f"({query.multiplicity}) > 0")
    if query.having:
        conditions.append(f"({query.having})")
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    cols = [f"CAST({c.sql} AS {t}) AS {quote(n)}" for c, (n, t) in zip(query.columns, entry.output_types)]
    select = f"SELECT {', '.join(cols)} FROM {body}"
    if query.bag and not query.distinct:
        select += f" LATERAL VIEW explode(sequence(1, CAST({query.multiplicity} AS BIGINT))) copies AS __copy"
    select += where
    if query.order_by:
        select = f"SELECT * FROM ({select}) AS o ORDER BY {', '.join(query.order_by)}"
    if query.limit is not None:
        select += f" LIMIT {query.limit}"
    return select


_REDUCERS = {
    "min": "MIN({})",
    "max": "MAX({})",
    "count_distinct": "COUNT({})",
    "sum_distinct": "SUM({})",
    "avg_distinct": "AVG({})",
}
