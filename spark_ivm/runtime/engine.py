"""Creating, refreshing, dropping and describing incremental views on a Spark session.

A view has three parts, all in the warehouse: a row in the catalog table (its SQL, options, plan and
sources), its map store (a Delta table: maps + progress, see mapstore.py) and a Spark view over the
store that returns exactly what the defining query returns.

Longer than most modules: the statements share the Engine's catalog cache and its locks, so they stay
methods of one class; what stands alone is elsewhere (build.py, view_work.py, locks.py, publish.py).
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections import Counter

from spark_ivm import config, udfs
from spark_ivm.calculus.analysis import map_names
from spark_ivm.calculus.expressions import Rel
from spark_ivm.calculus.printer import to_text
from spark_ivm.compiler.viewlet import compile_query
from spark_ivm.errors import (
    CatalogEntryError, InvalidQueryError, IVMError, ParseError, UnknownTableError, UnknownViewError, UnsupportedQueryError,
    ViewExistsError,
)
from spark_ivm.frontend.translate import translate
from spark_ivm.heuristics import default_depth_plan, reads_source_once
from spark_ivm.runtime import driver_files
from spark_ivm.runtime import sources as source_tables
from spark_ivm.runtime.catalog_format import ViewEntry, entry_from_json, entry_to_json
from spark_ivm.runtime.build import write_maps
from spark_ivm.runtime.deltalog import DeltaLogs, TableSnapshot
from spark_ivm.runtime.fused import Fused
from spark_ivm.runtime.key_conditions import OtherMaps
from spark_ivm.runtime.locks import StatementLocks
from spark_ivm.runtime.mapstore import SEQUENCE_ID, StoreColumns, live_rows_sql
from spark_ivm.runtime.publish import ViewForms
from spark_ivm.runtime.refresh import StaleEntry, StoreRefresh, crash_point, trigger_items_of
from spark_ivm.runtime.run import RefreshRun
from spark_ivm.runtime.session_scope import parallel, replies_without_delay
from spark_ivm.runtime.sqlgen import literal_sql, quote
from spark_ivm.runtime.statements import CreateView, DropView, ExplainView, RefreshAll, RefreshView, ShowViews
from spark_ivm.runtime.view_work import applied_versions, progress_rows
from spark_ivm.runtime.viewsql import PROPERTY_FORM, PROPERTY_VERSION, read_view_sql

log = logging.getLogger("spark_ivm")

__all__ = ["COMPACT_CONF", "Engine", "ViewEntry", "read_view_sql"]

COMPACT_CONF = config.COMPACT_EVERY.key
CATALOG_COLUMNS = ["name", "sql", "entry", "created_at"]  # the catalog table's, in order


class Engine:
    def __init__(self, spark):
        self.spark = spark
        # Catalog entries by qualified name. A refresh checks an entry against the token in its store,
        # which it reads anyway, so a refresh by name costs no read of the catalog.
        self._cache: dict[str, ViewEntry] = {}
        self.logs = DeltaLogs(spark)
        self.forms = ViewForms(spark, self.logs)
        # CREATE, DROP and REFRESH … FULL of a view wait for its refreshes in other threads, and they for them.
        self.locks = StatementLocks()
        # Every catalog entry, in creation order, as of the catalog's commit (table, version, user metadata)
        # they were read at, or the commit this engine's own append of an entry must have made. While that
        # commit is the catalog's latest, listing the views costs one look at its log instead of a read of
        # every entry.
        self._listed: tuple[tuple[str, int, str | None], list[ViewEntry]] | None = None
        # The views of that listing whose entries cannot be read (an older or newer format): each view's
        # error. They are left out of the listing, so that the other views keep working.
        self._unreadable: dict[str, CatalogEntryError] = {}

    # -- dispatch ------------------------------------------------------------------------------------
    def execute(self, statement):
        replies_without_delay(self.spark)
        if isinstance(statement, CreateView):
            self.create(statement)
            return self._message(f"created incremental view {self.qualify(statement.name)}")
        if isinstance(statement, RefreshView):
            return self._stats_frame([self.refresh(statement.name, statement.mode)])
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
                 json.dumps(s.get("steps", {})), s.get("execution"), s.get("plan"), s.get("policy"))
                for s in stats]
        return _local_frame(
            self.spark, rows,
            "view STRING, status STRING, source_versions STRING, rows_written BIGINT, seconds DOUBLE, steps STRING, "
            "execution STRING, plan STRING, policy STRING")

    # -- names ---------------------------------------------------------------------------------------
    def qualify(self, name: str) -> str:
        parts = name.split(".")
        if len(parts) == 1:
            return f"{self.spark.catalog.currentDatabase()}.{parts[0]}".lower()
        return name.lower()

    @property
    def catalog_table(self) -> str:
        return config.CATALOG.get(self.spark)

    # -- catalog -------------------------------------------------------------------------------------
    # A row per view (CATALOG_COLUMNS). `entry` holds the view's entry as JSON (catalog_format), `sql` its
    # query as written, for people. Entries were pickled before format 1: the column keeps its name and
    # STRING type, so an existing catalog needs no migration, and an old row is told from a new one by its
    # content.
    def _ensure_catalog(self) -> None:
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.catalog_table} (name STRING, sql STRING, entry STRING, "
            f"created_at DOUBLE) USING delta "
            f"TBLPROPERTIES ('delta.enableChangeDataFeed' = 'false')")

    def _entries(self) -> list[ViewEntry]:
        """The views whose entries can be read (see _unreadable for the others)."""
        if not self.spark.catalog.tableExists(self.catalog_table):
            self._listed = None
            self._unreadable = {}
            return []
        commit = (self.catalog_table, *self._latest_commit(self.catalog_table))
        if self._listed and self._listed[0] == commit:
            entries = self._listed[1]
        else:
            rows = self.spark.sql(
                f"SELECT name, entry FROM {self.catalog_table} VERSION AS OF {commit[1]} ORDER BY created_at"
            ).collect()
            entries, self._unreadable = [], {}
            for r in rows:
                try:
                    entries.append(self._decode(r["name"], r["entry"]))
                except CatalogEntryError as exc:
                    self._unreadable[r["name"]] = exc
        self._listed = (commit, entries)
        self._cache = {e.name: e for e in entries}
        return list(entries)

    def _decode(self, name: str, text: str) -> ViewEntry:
        return entry_from_json(text, name, self.catalog_table)

    def _latest_commit(self, table: str) -> tuple[int, str | None]:
        """The table's latest version and its commit's user metadata."""
        if self.logs.available:
            snapshot = self.logs.snapshot(table)
            return snapshot.version, self.logs.user_metadata(snapshot)
        latest = source_tables.latest_commit(self.spark, table)
        return int(latest["version"]), latest["userMetadata"]

    def store_version(self, table: str) -> int:
        return self._latest_commit(table)[0]

    def entry(self, name: str, cached: bool = True) -> ViewEntry:
        qualified = self.qualify(name)
        if cached and qualified in self._cache:
            return self._cache[qualified]
        self._cache.pop(qualified, None)
        if self.spark.catalog.tableExists(self.catalog_table):
            rows = self.spark.sql(
                f"SELECT entry FROM {self.catalog_table} WHERE name = '{qualified}'").collect()
            if rows:
                self._cache[qualified] = self._decode(qualified, rows[0]["entry"])
                return self._cache[qualified]
        raise UnknownViewError(f"no incremental view named {qualified}")

    def _save_entry(self, e: ViewEntry, new: bool = False) -> None:
        self._ensure_catalog()
        self._cache[e.name] = e
        values = (e.name, e.sql, entry_to_json(e), e.created_at)

        def row():
            return self.spark.createDataFrame([values], "name STRING, sql STRING, entry STRING, created_at DOUBLE")

        if new:  # an append is a cheaper commit than a MERGE
            tag = f"spark_ivm entry {uuid.uuid4().hex}"
            listed = self._listed
            snapshot = self.logs.snapshot(self.catalog_table) if self.logs.available else None
            if snapshot is not None and [c for c, _ in snapshot.columns] == CATALOG_COLUMNS \
                    and driver_files.writable(snapshot):
                self.logs.append_rows(snapshot, [values], tag)  # written by the driver: no Spark job
            else:
                row().write.format("delta").mode("append").option("userMetadata", tag).saveAsTable(self.catalog_table)
            # The append is the listing's next commit unless another process wrote in between: then the
            # next listing finds another version or tag there and reads the catalog.
            self._listed = ((self.catalog_table, listed[0][1] + 1, tag), listed[1] + [e]) if listed else None
            return
        self._listed = None
        row().createOrReplaceTempView("__ivm_entry")
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
        store = self._store_name(name, stmt.options)
        with self.locks.hold([name, store], exclusive=True):
            self._create(stmt, name, store)

    def _create(self, stmt: CreateView, name: str, store: str) -> None:
        entries = self._entries()
        if any(e.name == name for e in entries):
            if stmt.if_not_exists:
                return
            raise ViewExistsError(f"incremental view {name} already exists")
        for unreadable in self._unreadable.values():
            # The view exists, or its maps are in the store whose map ids the new view would be given:
            # the ids that view uses are unknown until it is dropped.
            if unreadable.view == name or unreadable.store == store:
                raise unreadable
        self._remove_leftovers(name, store, entries)
        if self.spark.catalog.tableExists(name):
            raise ViewExistsError(f"a table or view named {name} already exists")
        new_store = not self.spark.catalog.tableExists(store)
        if not new_store and not self._is_map_store(store):
            raise IVMError(f"{store} exists and is not a map store; choose another store name")
        try:
            entry = self._build(name, stmt.query, stmt.options, store, stmt.positioned_query or stmt.query,
                                entries)
            self._save_entry(entry, new=True)
        except BaseException:
            self._remove_objects(name, store, keep_store=not new_store)
            raise

    def _remove_leftovers(self, name: str, store: str, entries: list[ViewEntry]) -> None:
        """Remove what a CREATE (or REFRESH … FULL and DROP after it) of the view that did not finish left
        behind: a view definition of spark_ivm's without a catalog entry, a map store no catalog entry names,
        rows of a shared store that belong to no view of it. Left there, they would block the CREATE, or the
        maps computed now would be added to the dead one's."""
        found = []
        if self.spark.catalog.tableExists(name) and self.forms.current(name).get(PROPERTY_FORM):
            self.spark.sql(f"DROP VIEW IF EXISTS {name}")
            found.append(f"the view definition {name}")
        if self._is_map_store(store):
            members = self._store_members(store, entries)
            if not members:
                self.spark.sql(f"DROP TABLE IF EXISTS {store}")
                found.append(f"the map store {store}")
            else:
                others = OtherMaps(tuple(sorted({i for e in members for i in e.layout.map_ids} | {SEQUENCE_ID})))
                if self._may_hold(store, others) and \
                        self.spark.sql(f"SELECT 1 FROM {store} WHERE {others} LIMIT 1").collect():
                    self.spark.sql(f"DELETE FROM {store} WHERE {others}")
                    found.append(f"rows of the map store {store} that belong to none of its views")
        if found:
            message = (f"removing the leftovers of a CREATE of incremental view {name} that did not finish: "
                       f"{', '.join(found)}")
            log.warning(message)
            print(f"spark_ivm: {message}")

    def _may_hold(self, table: str, condition) -> bool:
        """False where the driver finds that no row of the table holds the condition (DeltaLogs.rows_on_driver:
        the Delta log's statistics rule every file out, or the driver reads the few that may and finds none).
        Asking Spark instead makes Delta rebuild the state of the table's latest version (a few jobs), which
        a store has anew after every commit."""
        snapshot = self.logs.snapshot(table) if self.logs.available else None
        # max_rows=0: None as soon as one row holds it, or where the driver does not read the files.
        return snapshot is None or self.logs.rows_on_driver(snapshot, condition, ["map_id"], max_rows=0) is None

    def _is_map_store(self, table: str) -> bool:
        if not self.spark.catalog.tableExists(table):
            return False
        return {"map_id", "src", "src_version"} <= {f.name for f in self.spark.table(table).schema.fields}

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
            schema = self.spark.table(q).schema
            return (q, [[f.name, f.dataType.simpleString()] for f in schema.fields],
                    [f.name for f in schema.fields if not f.nullable])

        found = {t: f for t, f in zip(tables, parallel(self.spark, table_fields, tables)) if f}
        qualified = {t: q for t, (q, _, _) in found.items()}
        fields = {q: columns for q, columns, _ in found.values()}
        not_null = {q: columns for q, _, columns in found.values()}
        # The compiler counts the non-NULL values of a NOT NULL column with the rows: the view relies on
        # the constraints, and a refresh checks that they still hold (view_work.check_source). Raises
        # UnknownTableError for the tables not found.
        query = translate(positioned_sql, {t: [(c, ty, c not in not_null[q]) for c, ty in fields[q]]
                                           for t, q in qualified.items()})
        view = name.split(".")[-1]
        if "depth" in options:  # `depth = unlimited` is None too, but chosen
            plan = compile_query(query, name=view, depth=options["depth"])
        else:
            plan = default_depth_plan(lambda depth: compile_query(query, name=view, depth=depth))
        udfs.require(self.spark, udfs.plan_functions(plan), view=name)
        relation_tables = {r: qualified[_schema_key(r, qualified)] for r in query.relations}
        source_list = sorted(set(relation_tables.values()))

        def checked_version(table: str) -> tuple[int, int, TableSnapshot | None]:
            size = source_tables.check_delta_source(self.spark, table)  # may turn the feed on: a new version
            if self.logs.available:
                snapshot = self.logs.snapshot(table)
                return snapshot.version, size, snapshot
            return source_tables.current_version(self.spark, table), size, None

        looked_up = dict(zip(source_list, parallel(self.spark, checked_version, source_list)))
        versions = {t: version for t, (version, _, _) in looked_up.items()}
        ids = {t: snapshot.table_id for t, (_, _, snapshot) in looked_up.items() if snapshot and snapshot.table_id}
        output_types = [[f.name, f.dataType.simpleString()] for f in _query_schema(self.spark, positioned_sql)]
        names = [n.lower() for n, _ in output_types]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            # A Spark view cannot have two columns of one name; the query alone could.
            raise UnsupportedQueryError(f"two output columns named {repeated[0]}",
                                        detail="give the columns distinct aliases")
        source_columns = {t: fields[t] for t in source_list}

        with RefreshRun(self.spark, self.logs) as run:
            references = Counter(relation_tables[a.name] for m in plan.maps for a in m.definition.walk()
                                 if isinstance(a, Rel))
            for table, (version, size, snapshot) in looked_up.items():
                if snapshot is not None:
                    # The maps read each source from the files its checksum lists (RefreshRun.pinned).
                    run.snapshots[table] = snapshot
                if reads_source_once(references[table], size):
                    run.read_source_once(table, version)
            members = [e for e in self._store_members(store, entries) if e.name != name]
            entry = write_maps(self, name, sql, options, store, plan, relation_tables, source_columns,
                               output_types, versions, run, members,
                               source_bytes=sum(size or 0 for _, size, _ in looked_up.values()))
            entry.source_ids = ids
            entry.not_null_columns = {t: not_null[t] for t in source_list if not_null[t]}
            return entry

    def _store_removal(self, name: str, store: str, keep_store: bool = False) -> str:
        """The statement that removes the view's maps: the store, or the rows no other view of it owns."""
        others = [i for e in self._store_members(store) if e.name != name for i in e.layout.map_ids]
        if others:
            # The sequence number stays with the store: it counts the store's refreshes, not the view's.
            others.append(SEQUENCE_ID)
        if others or keep_store:
            kept = f"map_id NOT IN ({', '.join(map(str, others))})" if others else "TRUE"
            return f"DELETE FROM {store} WHERE {kept}"
        return f"DROP TABLE IF EXISTS {store}"

    def store_columns(self, store: str) -> StoreColumns:
        return StoreColumns(tuple((f.name, f.dataType.simpleString()) for f in self.spark.table(store).schema.fields))

    def _remove_objects(self, name: str, store: str, keep_store: bool = False, keep_view: bool = False) -> None:
        """Drop the view and its maps: the whole store when no other view uses it (unless keep_store),
        else every row that belongs to no other view (also what a CREATE that failed half-way wrote).
        Failures are logged, not raised: this cleans up after another error."""
        statements = [] if keep_view else [f"DROP VIEW IF EXISTS {name}"]
        statements.append(self._store_removal(name, store, keep_store))
        for statement in statements:
            try:
                self.spark.sql(statement)
            except Exception as exc:  # cleanup must not hide the original error
                log.warning("cleanup of %s failed: %s", name, exc)

    # -- REFRESH -------------------------------------------------------------------------------------
    def refresh(self, name: str, mode: str | None = None) -> dict:
        """Bring the view up to date: as its refresh policy says, or (mode) "full" or "incremental" once."""
        qualified = self.qualify(name)
        # The entry as of before the wait is read again after it: a DROP or rebuild may have ended meanwhile.
        names = [qualified, self.entry(name, cached=mode != "full").store]
        if mode == "full":
            with self.locks.hold(names, exclusive=True):
                return self.rebuild(self.entry(name, cached=False), time.perf_counter(), "full (REFRESH … FULL)")
        cached = qualified in self._cache
        with self.locks.hold(names):
            try:
                refresh = StoreRefresh(self, [self.entry(name)], check_tokens=cached, mode=mode)
                stats = refresh.run()
            except StaleEntry:
                refresh = StoreRefresh(self, [self.entry(name, cached=False)], mode=mode)
                stats = refresh.run()
        return self._rebuild_chosen(refresh, stats)[0]

    def refresh_all(self) -> list[dict]:
        """Every view, one commit per map store: views that share a store are refreshed atomically.

        A view whose catalog entry cannot be read fails the statement, after the others are refreshed."""
        def names(entries):
            return {n for e in entries for n in (e.name, e.store)}

        wanted = names(self._ordered_entries())
        while True:
            with self.locks.hold(wanted):
                ordered = self._ordered_entries()  # a view may have been created or dropped while this waited
                if names(ordered) <= wanted:
                    refreshes = self._refresh_all(ordered)
                    break
            wanted |= names(ordered)
        unreadable = list(self._unreadable.values())
        stats = [s for refresh, done in refreshes for s in self._rebuild_chosen(refresh, done)]
        if unreadable:
            others = ", ".join(e.view for e in unreadable[1:])
            raise CatalogEntryError(
                f"{unreadable[0]}{f'; the entries of {others} cannot be read either' if others else ''} "
                f"(the other incremental views were refreshed)", unreadable[0].view, unreadable[0].store)
        return stats

    def _refresh_all(self, ordered: list[ViewEntry]) -> list[tuple[StoreRefresh, list[dict]]]:
        by_store: dict[str, list[ViewEntry]] = {}
        for e in ordered:
            by_store.setdefault(e.store, []).append(e)
        return [(refresh, refresh.run()) for refresh in (StoreRefresh(self, entries) for entries in by_store.values())]

    def _rebuild_chosen(self, refresh: StoreRefresh, stats: list[dict]) -> list[dict]:
        """Recompute the maps of the views for which the refresh chose that, after its commit, each alone as
        REFRESH … FULL runs (a refresh holds its names shared, which a rebuild cannot wait for)."""
        done = []
        for entry, s in zip(refresh.entries, stats):
            if entry.name in refresh.rebuilds:
                with self.locks.hold([entry.name, entry.store], exclusive=True):
                    s = self.rebuild(self.entry(entry.name, cached=False), refresh.started, refresh.rebuilds[entry.name])
            done.append(s)
        return done

    def rebuild(self, entry: ViewEntry, started: float, policy: str) -> dict:
        """FULL refresh: compile again against the current schemas and recompute every map. `policy` says
        why, for REFRESH to report."""
        # Before anything is removed: a rebuild that cannot run must leave the view as it was.
        udfs.require(self.spark, udfs.plan_functions(entry.plan), view=entry.name)
        store = entry.store
        # The user's view stays until the new one replaces it: in its rows form it shows its old rows meanwhile.
        self._remove_objects(entry.name, store, keep_view=True)
        crash_point("full_after_remove")
        # The definition's unqualified names mean what they meant at CREATE, whatever is current now.
        current = self.spark.catalog.currentDatabase()
        self.spark.catalog.setCurrentDatabase(getattr(entry, "database", "") or entry.name.split(".")[0])
        try:
            fresh = self._build(entry.name, entry.sql, entry.options, store)
        finally:
            self.spark.catalog.setCurrentDatabase(current)
        fresh.created_at = entry.created_at
        self._save_entry(fresh)
        versions = {t: self.store_version(t) for t in set(fresh.sources.values())}
        return {"view": fresh.name, "status": "rebuilt", "versions": versions, "rows_written": 0,
                "seconds": time.perf_counter() - started, "policy": policy}

    # -- DROP / SHOW / EXPLAIN -------------------------------------------------------------------------
    def drop(self, name: str, if_exists: bool = False) -> None:
        # The name first, so that a CREATE of it in another thread ends before this looks for the view; then
        # its store, which another view may share.
        with self.locks.hold([self.qualify(name)], exclusive=True):
            found = self._drop_target(name, if_exists)
            if found is not None:
                with self.locks.hold([n for n in found if n], exclusive=True):
                    self._drop(*found)

    def _drop_target(self, name: str, if_exists: bool) -> tuple[str, str | None] | None:
        """The view and its map store (None: no map store to drop); None if there is no view and if_exists."""
        try:
            entry = self.entry(name, cached=False)
            return entry.name, entry.store
        except UnknownViewError:
            if if_exists:
                return None
            raise
        except CatalogEntryError as exc:
            # An entry this version cannot read still names its store (catalog_format); failing that, the
            # view has the store a view gets without WITH (store = …). Only a map store is dropped.
            store = exc.store or self._store_name(exc.view, {})
            return exc.view, store if self._is_map_store(store) else None

    def _drop(self, view: str, store: str | None) -> None:
        """Remove the maps, then the view's definition, then its catalog entry. Every step finds its part
        gone if a DROP that died did it, and the entry goes last, so that DROP again finishes the job. The
        definition goes after the maps: a refresh in another process that writes it after checks that its
        store is still there (see publish.py)."""
        steps = ([(self._store_removal(view, store), "drop_after_store")] if store else []) + [
            (f"DROP VIEW IF EXISTS {view}", "drop_after_view")]
        for statement, step in steps:
            try:
                self.spark.sql(statement)
            except Exception as exc:
                raise IVMError(f"DROP INCREMENTAL VIEW {view} did not finish ({_first_line(exc)}); "
                               f"run it again") from exc
            crash_point(step)
        self._delete_entry(view)

    def show(self):
        rows, progress = [], {}
        for e in self._entries():
            try:
                if e.store not in progress:  # one read per store, shared by its views
                    progress[e.store] = progress_rows(self.spark, e.store)
                applied = applied_versions(e, progress[e.store])
                state = "ok"
            except Exception as exc:  # a broken view is listed, not hidden
                applied, state = {}, f"error: {exc}"
            rows.append((e.name, sorted(set(e.sources.values())), json.dumps(applied),
                         [m.name for m in e.plan.maps], state))
        rows += [(name, [], "{}", [], f"error: {exc}") for name, exc in self._unreadable.items()]
        return _local_frame(
            self.spark, rows, "name STRING, sources ARRAY<STRING>, source_versions STRING, maps ARRAY<STRING>, state STRING")

    def explain(self, name: str) -> str:
        e = self.entry(name, cached=False)
        columns = self.store_columns(e.store)
        # Per map_id and value column, the live rows with a value there: a map's own rows.
        counts = {r["map_id"]: r.asDict() for r in self.spark.sql(
            f"SELECT map_id, {', '.join(f'COUNT({c}) AS {c}' for c, _ in columns.values)} "
            f"FROM ({live_rows_sql(e.store, columns)}) GROUP BY map_id").collect()}
        lines = [f"-- incremental view {e.name} (map store {e.store})"]
        form = self.forms.current(e.name)
        if form.get(PROPERTY_FORM):
            lines.append(f"-- the view reads {_FORMS.get(form[PROPERTY_FORM], form[PROPERTY_FORM])} "
                         f"(as of map store version {form.get(PROPERTY_VERSION)})")
        for m in e.layout.maps:
            rows = counts.get(m.map_id, {}).get(m.value_column, 0)
            others = ", ".join(o.name for o in e.layout.maps if o.map_id == m.map_id and o is not m)
            lines.append(f"-- map {m.name}[{', '.join(m.keys)}]: {rows} rows, value {m.value_type}"
                         + (f" (in {m.value_column} of the rows it shares with {others})" if others else ""))
        shared, fused = [], []  # the lines that say how a refresh computes the statements of each trigger
        for t in e.plan.triggers:
            products, made = trigger_items_of(e, t.statements)
            for product, (keys, definition) in products.items():
                readers = ", ".join(s.target for s in made
                                    if not isinstance(s, Fused) and product in map_names(s.expr))
                shared.append(f"ON BATCH OF {t.relation}: {product}[{', '.join(keys)}] := {to_text(definition)};"
                              f"  -- read by {readers}")
            fused += [f"ON BATCH OF {t.relation}: {', '.join(item.targets)} over {to_text(item.product)}"
                      for item in made if isinstance(item, Fused)]
        if shared:
            shared.insert(0, "\n-- products the statements of a trigger share, computed once per refresh")
        if fused:
            fused.insert(0, "\n-- sums of statements (or of their terms) over one product, computed in one aggregation "
                            "(__rows_m[keys, __value_m, …]: the rows m shares, with each map's value)")
        return "\n".join(lines) + "\n" + e.plan.explain() + "\n".join(shared + fused)


_FORMS = {"rows": "its rows, kept in its definition", "store": "its maps from the map store"}


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


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def _schema_key(relation: str, qualified: dict[str, str]) -> str:
    for k in qualified:
        if k.lower() == relation.lower() or k.split(".")[-1].lower() == relation.lower():
            return k
    raise UnknownTableError(f"table {relation} is not known")
