"""What the views of one REFRESH (or CREATE) statement share while it runs: each table's snapshot, looked up
once in its Delta log; each source's consolidated batch and each pinned table version, made once; the
intermediate rows computed once; the temporary views, dropped at the end.

A run computes intermediate rows in one of two ways (`materialize`, chosen per refresh by
heuristics.plans_at_once):
- materialized: every batch, copy of the store, stage and union of increments is computed once, as it is
  made, into a local checkpoint that later SQL reads by name. A batch's size and the ranges of its
  values then come from its rows (one more job per batch);
- at once: they are temporary views of their SQL, computed only by the one query that writes the store,
  in which Spark computes each shared part once where it can (an exchange reused). A batch's size and
  ranges then come from its Delta log (no job), as an upper bound and ranges that hold its rows.
Either way a small batch is read by the driver instead (no job, exact size and ranges) where it can be.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import re
import time
import uuid
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.functions import broadcast

from spark_ivm import config, heuristics
from spark_ivm.heuristics import BROADCAST_BATCH_ROWS, LISTED_KEY_VALUES_MAX, checkpoint_partitions, lists_batch_values
from spark_ivm.runtime import division, driver_files
from spark_ivm.runtime import sources as source_tables
from spark_ivm.runtime.deltalog import DeltaLogs, NotDeltaError, TableSnapshot
from spark_ivm.runtime.key_conditions import Condition, MapIs, all_of
from spark_ivm.runtime.local_sql import DriverStatements
from spark_ivm.runtime.session_scope import parallel
from spark_ivm.runtime.sqlgen import MULTIPLICITY, quote

log = logging.getLogger("spark_ivm")

# Batch columns whose range bounds the map keys a refresh reads (see RefreshRun._consolidate): their
# values come back to Python and go into SQL as literals of the same value.
_RANGED_TYPE = re.compile(r"tinyint|smallint|int|bigint|decimal\(\d+,\d+\)|date|string")
# Of those, the types whose range a file's statistics in the Delta log give exactly (strings are cut to
# a prefix there).
_LOGGED_RANGE_TYPE = re.compile(r"tinyint|smallint|int|bigint|decimal\(\d+,\d+\)|date")


class RefreshRun:
    def __init__(self, spark, logs: DeltaLogs | None = None, materialize: bool = True):
        self.spark = spark
        self.logs = logs or DeltaLogs(spark)
        self.materialize = materialize
        self.run_id = uuid.uuid4().hex[:8]
        self.snapshots: dict[str, TableSnapshot | None] = {}  # table -> its snapshot (None: no such table)
        self.versions: dict[str, int] = {}
        self.catalog: dict[str, object] = {}  # table -> its catalog metadata (None: no such table)
        self.batches: dict[tuple, str] = {}
        self.batch_rows: dict[str, int] = {}  # batch view -> its rows (at most, when not materialized)
        # batch view -> {column: (lowest, highest) value, (None, None) if only NULLs}, for the columns whose
        # values order and print exactly as literals (see _consolidate)
        self.batch_ranges: dict[str, dict[str, tuple]] = {}
        self._batch_values: dict[str, dict[str, tuple]] = {}  # see batch_values
        self._key_values: dict[tuple, tuple | None] = {}  # see key_values
        self._candidate_bytes: dict[tuple, int | None] = {}  # see candidate_bytes
        self._listed_columns: dict[str, list[str]] = {}  # batch view -> its columns batch_values may list
        # the rows the driver holds (batches, store copies, results) and the statements it computes on them
        self.driver = DriverStatements(f"__ivm_{self.run_id}_", config.DRIVER_STATEMENTS.get(spark) == "on",
                                       divides=lambda: division.rules_hold(spark))
        self._broadcast_batches: set[str] = set()  # batch views small enough to broadcast
        self._hinted: dict[str, str] = {}  # batch view -> a view of its rows hinted for broadcast
        self.pins: dict[tuple, str] = {}
        self.stores: dict[str, str] = {}  # map store -> the view of the rows its maps are read from
        # view of rows only the driver holds -> (what makes Spark's DataFrame of them, the step it counts to)
        self._not_handed_over: dict[str, tuple[Callable[[], DataFrame], str]] = {}
        self._held_schemas: dict[str, object] = {}  # view of rows the driver holds -> their schema
        self.stages: dict[str, str] = {}  # a statement's stage (its SELECT) -> its view
        self.store_versions: dict[str, int] = {}
        self.store_snapshots: dict[str, TableSnapshot] = {}
        self.schemas: dict[str, list[list[str]] | None] = {}
        self.temporary: list[str] = []
        self.steps: dict[str, float] = {}  # seconds spent in each step of the refresh of a store
        self._timing: set[str] = set()  # the steps being timed now
        self._persisted: list = []

    @contextlib.contextmanager
    def timed(self, step: str):
        """Add the block's wall-clock seconds to `step`, once where the block runs inside one of the same step
        (a broadcast batch handed to Spark hands over the batch itself)."""
        if step in self._timing:
            yield
            return
        self._timing.add(step)
        started = time.perf_counter()
        try:
            yield
        finally:
            self._timing.discard(step)
            self.steps[step] = self.steps.get(step, 0.0) + time.perf_counter() - started

    def step_seconds(self, total: float) -> dict[str, float]:
        """Seconds per step, rounded to milliseconds; "other" is the rest of `total` (making the statements'
        SQL, Spark's analysis outside the timed steps, the commit's bookkeeping)."""
        steps = {step: round(s, 3) for step, s in self.steps.items()}
        steps["other"] = round(max(0.0, total - sum(self.steps.values())), 3)
        return steps

    def __enter__(self) -> "RefreshRun":
        return self

    def __exit__(self, *exc) -> None:
        for view in self.temporary:
            if view not in self._not_handed_over:  # else Spark never had it
                self.spark.catalog.dropTempView(view)
        for df in self._persisted:
            df.unpersist()
        self.driver.close()

    # -- tables ----------------------------------------------------------------------------------------------
    def look_up(self, tables) -> None:
        """Look up the snapshots (versions, columns, ids) of tables not looked up yet, in parallel."""
        missing = sorted(t for t in tables if t not in self.schemas)
        metas = self.catalog_tables(missing)
        for table, found in zip(missing, parallel(self.spark, lambda t: self._look_up(t, metas.get(t)), missing)):
            snapshot, columns, version = found
            self.snapshots[table] = snapshot
            self.schemas[table] = columns
            if version is not None:
                self.versions[table] = version

    def catalog_tables(self, tables) -> dict[str, object]:
        """The catalog metadata of the tables (see DeltaLogs.catalog_tables), each asked of the metastore once
        per run and all at once: those of a refresh's store and sources before its progress is read."""
        if not self.logs.available:
            return {}
        unknown = [t for t in tables if t not in self.catalog]
        if unknown:
            self.catalog.update(self.logs.catalog_tables(unknown))
        return {t: self.catalog[t] for t in tables}

    def _look_up(self, table: str, meta=None):
        """(snapshot or None, [[column, type], …] or None, version or None) of a table now (of its catalog
        metadata `meta`, when the Delta log is read: None, no such table)."""
        if self.logs.available:
            try:
                snapshot = self.logs.snapshot(table, meta) if meta is not None else None
            except NotDeltaError:
                snapshot = None  # as good as gone for a source: its changes cannot be read
            if snapshot is None:
                return None, None, None
            return snapshot, [list(c) for c in snapshot.columns], snapshot.version
        columns = self.columns_now(table)
        return None, columns, source_tables.current_version(self.spark, table) if columns is not None else None

    def snapshot(self, table: str) -> TableSnapshot | None:
        self.look_up([table])
        return self.snapshots.get(table)

    def columns_now(self, table: str) -> list[list[str]] | None:
        return ([[f.name, f.dataType.simpleString()] for f in self.spark.table(table).schema.fields]
                if self.spark.catalog.tableExists(table) else None)

    def not_null_columns(self, table: str) -> frozenset[str]:
        """The table's columns declared NOT NULL now."""
        snapshot = self.snapshot(table)
        if snapshot is not None:
            return snapshot.not_null
        return frozenset(f.name for f in self.spark.table(table).schema.fields if not f.nullable)

    def version(self, table: str) -> int:
        if table not in self.versions:
            self.look_up([table])
        return self.versions[table]

    def columns(self, table: str) -> list[list[str]] | None:
        """The table's [[column, type], …] now, or None when it does not exist."""
        self.look_up([table])
        return self.schemas[table]

    def size_bytes(self, table: str, version: int | None) -> int | None:
        """The table's size in bytes at the version, from its Delta snapshot (nothing is scanned); None where
        Spark does not tell (Spark Connect)."""
        jdf = getattr(self.spark.table(self.pinned(table, version)), "_jdf", None)
        return None if jdf is None else int(jdf.queryExecution().optimizedPlan().stats().sizeInBytes())

    # -- intermediate rows -----------------------------------------------------------------------------------
    def register(self, df) -> str:
        """A temporary view of the DataFrame, dropped when the run ends."""
        name = self._view_name()
        df.createOrReplaceTempView(name)
        return name

    def _view_name(self) -> str:
        name = f"__ivm_{self.run_id}_{len(self.temporary)}"
        self.temporary.append(name)
        return name

    def persisted(self, df):
        """The DataFrame, kept in memory by the first query that computes it until the run ends."""
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(df)
        return df

    def checkpoint(self, sql: str, step: str, always: bool = False) -> str:
        """A temporary view of the query's rows: computed once now (its time counted to `step`) in a
        materialized run or if `always`, else the query itself. Rows DuckDB computed on the driver are
        Spark's only once a statement Spark computes reads them: read them as a DataFrame through `frame`."""
        computed = self._computed_on_driver(sql, step)
        if computed is not None:
            return computed
        for view in [v for v in self._not_handed_over if re.search(rf"\b{v}\b", sql)]:
            self.hand_over(view)
        if not (self.materialize or always):
            return self.register(self.spark.sql(sql))
        # Checkpointed, not cached: cached blocks can be evicted and recomputed, a checkpoint is the rows
        # as computed once.
        with self.timed(step):
            return self.register(self._local_checkpoint(sql))

    def _computed_on_driver(self, sql: str, step: str) -> str | None:
        """A view of the query's rows computed by DuckDB on the driver, where the driver holds every row it
        reads (see local_sql); None where it does not."""
        with self.timed(step):
            computed = self.driver.compute(sql)
            if computed is None:
                return None
            return self._held(*computed, step)

    def _held(self, rows, schema, step: str, local: bool = False) -> str:
        """A view of rows the driver holds (a pyarrow table of the schema, a StructType or DDL): DuckDB reads
        them there; Spark gets them (hand_over, its time counted to `step`) when it first reads them, as a
        checkpoint (handed_over), or with `local` as a local relation (arrow_frame, no job)."""
        view = self._view_name()
        self.driver.hold(view, rows)
        self._held_schemas[view] = schema
        self._not_handed_over[view] = ((lambda: arrow_frame(self.spark, rows, schema)) if local
                                       else (lambda: self.handed_over(rows, schema)), step)
        return view

    def hand_over(self, view: str) -> None:
        """Give Spark the rows of a view the driver holds, if it does not have them yet."""
        if view in self._not_handed_over:
            make, step = self._not_handed_over.pop(view)
            with self.timed(step):
                make().createOrReplaceTempView(view)

    def frame(self, view: str) -> DataFrame:
        """A view's rows as a Spark DataFrame: what reads a view outside the SQL of a checkpoint reads it here."""
        self.hand_over(view)
        return self.spark.table(view)

    def local_rows(self, view: str) -> DataFrame:
        """The rows of a view the driver holds as Spark's local relation (collecting it runs no job), now the
        view's rows in Spark too."""
        if self._not_handed_over.pop(view, None) is not None:
            arrow_frame(self.spark, self.driver.held[view], self._held_schemas[view]).createOrReplaceTempView(view)
        return self.spark.table(view)

    def stage(self, sql: str) -> str:
        """A stage of the statements' SQL (see sqlgen), made once however many statements share it: the
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
        checkpointed = without_inflated_size_estimate(self.spark, self.spark.sql(sql).localCheckpoint())
        return checkpointed.coalesce(self.tasks)

    @property
    def tasks(self) -> int:
        """How many tasks read a checkpoint or a union of a refresh's statements (checkpoint_partitions)."""
        return checkpoint_partitions(self.spark.conf.get("spark.sql.shuffle.partitions", None))

    def read_store_once(self, table: str, rows: Condition, kept: Condition | None = None, map_ids=None) -> None:
        """From now on, read the maps of the store from one copy of the rows the condition `rows` holds
        for (see heuristics), of those only the rows `kept` holds for: Delta skips files by the key ranges
        of `rows`, `kept` leaves out the rows between the batches' values. map_ids: the maps the condition
        reads, if known: only files that hold rows of them are read.

        The copy is read by the driver where the store's files that can hold such rows are few
        (heuristics.DRIVER_STORE_BYTES): no job. Statements DuckDB computes read it there; it is handed to
        Spark, as rows whose size Spark knows, when Spark first reads it.
        Otherwise Spark computes it once, as a checkpoint: every scan of a Delta table with a filter runs
        a job of its own to choose the files to read."""
        where = all_of(rows, kept)
        held = self.store_on_driver(table, where, "store read")
        if held is not None:
            self.stores[table] = held
            return
        self.stores[table] = self.checkpoint(
            f"SELECT * FROM {self.store_rows(table, map_ids)} WHERE {where}", step="store read", always=True)

    def handed_over(self, rows, schema):
        """Rows the driver holds (a pyarrow table) as a checkpoint of the schema: one small Spark job.

        Not the relation of rows that createDataFrame gives: Spark's analyzer copies such a relation's rows
        at every rule it applies, once per reference, so that planning grows with the rows times the
        statements that read them. A checkpoint is a leaf it does not look into, and it keeps the size of
        the rows, so that Spark broadcasts a small one."""
        return arrow_frame(self.spark, rows, schema).localCheckpoint(eager=True)

    def store_on_driver(self, table: str, where: Condition, step: str) -> str | None:
        """A view of the store's rows as of its pinned version that the condition holds for, read and held by
        the driver (DeltaLogs.rows_on_driver; its time counted to `step`): DuckDB reads them there, Spark when
        it first reads them (see _held). None where the driver does not read them."""
        with self.timed(step):
            held = self._store_on_driver(table, where)
            if held is None:
                return None
            schema = ", ".join(f"{quote(c)} {t}" for c, t in self.store_snapshots[table].columns)
            return self._held(held, schema, step)

    def _store_on_driver(self, table: str, where: Condition, columns: list[str] | None = None):
        """The store's rows (their `columns`, all when None) as of its pinned version that the condition
        holds for, read by the driver (DeltaLogs.rows_on_driver); None where the driver does not read them."""
        snapshot = self.store_snapshots.get(table)
        if snapshot is None:
            return None
        return self.logs.rows_on_driver(snapshot, where, columns or [c for c, _ in snapshot.columns],
                                        heuristics.DRIVER_STORE_ROWS)

    def store_rows(self, table: str, map_ids=None) -> str:
        """A temporary view of the store's rows as of its pinned version: from the files its Delta checksum
        lists that hold rows of the maps map_ids (all when None), or else the store read by name."""
        snapshot = self.store_snapshots.get(table)
        key = (table, snapshot and snapshot.version, tuple(sorted(map_ids)) if map_ids is not None else None)
        if key not in self.pins:
            holds_maps = None if map_ids is None else MapIs(tuple(sorted(map_ids))).could_hold
            found = self.logs.read_files(snapshot, holds_maps) if snapshot else None
            self.pins[key] = self.register(found) if found is not None else self.pinned(table, snapshot and snapshot.version)
        return self.pins[key]

    def read_source_once(self, table: str, version: int) -> None:
        """From now on, read this table's version from one checkpoint of its rows (see heuristics)."""
        rows = self.checkpoint(f"SELECT * FROM {self.pinned(table, version)}", step="source reads")
        self.pins[(table, version)] = rows

    def pin_store(self, table: str, version: int, snapshot: TableSnapshot | None = None) -> None:
        """Read the maps of this store as of this version (the snapshot of it, when looked up)."""
        self.store_versions[table] = version
        if snapshot is not None and snapshot.handle is not None:
            self.store_snapshots[table] = snapshot

    def store(self, table: str) -> str:
        """Where the maps of a store are read from: its copied rows, or the store at its pinned version (as
        it is, when none is pinned)."""
        return self.stores.get(table) or self.store_rows(table)

    def pinned(self, table: str, version: int | None = None) -> str:
        """A temporary view of the table as of a version (None: as it is). Every statement that reads the
        table reads the view, so Delta resolves that version's snapshot once, not once per reference, and
        where that version's checksum lists its files, reads them as listed."""
        key = (table, version)
        if key not in self.pins:
            # The files the version's checksum lists, where the run has the table's snapshot: Delta would
            # otherwise choose them anew, a Spark job for each query that reads the table.
            snapshot = self.snapshots.get(table) or self.store_snapshots.get(table)
            frame = (self.logs.version_frame(snapshot, version)
                     if snapshot is not None and snapshot.handle is not None and version is not None
                     and version <= snapshot.version else None)
            if frame is None:
                reader = self.spark.read.format("delta")
                if version is not None:
                    reader = reader.option("versionAsOf", version)
                frame = reader.table(table)
            self.pins[key] = self.register(frame)
        return self.pins[key]

    # -- batches ---------------------------------------------------------------------------------------------
    def batch(self, table: str, start: int, end: int, columns) -> str:
        """A temporary view of the consolidated changes of the table's versions start..end."""
        key = (table, start, end)
        if key not in self.batches:
            self.consolidate({key: (columns, (), [1])})
        return self.batches[key]

    def batch_values(self, view: str) -> dict[str, tuple]:
        """The distinct non-NULL values of a batch's ranged columns, sorted, of the columns worth
        listing (heuristics.lists_batch_values) with at most LISTED_KEY_VALUES_MAX of them."""
        if view not in self._batch_values:
            columns = self._listed_columns.get(view, [])
            found: dict[str, list] = {}
            if columns:
                with self.timed("batches"):
                    sets = self._values_from_files(view, columns)
                    if sets is None:
                        sets = self.spark.table(view).agg(*(F.collect_set(F.col(quote(c))) for c in columns)).first()
                found = {c: tuple(sorted(v for v in values if v is not None)) for c, values in zip(columns, sets)
                         if len(values) <= LISTED_KEY_VALUES_MAX}
            self._batch_values[view] = found
        return self._batch_values[view]

    def candidate_bytes(self, table: str, where: Condition) -> int | None:
        """The bytes of the store's files (as of its pinned version) whose statistics allow rows the condition
        holds for, from its Delta checksum (no Spark job); None where the checksum does not list them."""
        key = (table, where)
        if key not in self._candidate_bytes:
            snapshot = self.store_snapshots.get(table)
            files = None if snapshot is None else self.logs.listed_files(snapshot, where.could_hold)
            self._candidate_bytes[key] = None if files is None else sum(int(f.get("size", 0)) for f in files)
        return self._candidate_bytes[key]

    def key_values(self, table: str, map_id: int, column: str, where: Condition,
                   on_driver_only: bool = False) -> tuple | None:
        """The distinct non-NULL values of a store column in the rows of the map that the condition holds
        for, sorted (read by the driver where it reads them, else one Spark job; once per run); None where
        there are more than LISTED_KEY_VALUES_MAX, or on_driver_only and the driver does not read them."""
        key = (table, column, where, on_driver_only)
        if key not in self._key_values:
            with self.timed("store read"):
                held = self._store_on_driver(table, where, [column])
                if held is not None:
                    found = [v for v in held.column(column).unique().to_pylist() if v is not None]
                elif on_driver_only:
                    found = None
                else:
                    found = [r[0] for r in self.spark.sql(
                        f"SELECT DISTINCT {column} FROM {self.store_rows(table, {map_id})} WHERE {where} "
                        f"LIMIT {LISTED_KEY_VALUES_MAX + 2}").collect() if r[0] is not None]
            self._key_values[key] = (None if found is None or len(found) > LISTED_KEY_VALUES_MAX
                                     else tuple(sorted(found)))
        return self._key_values[key]

    def _values_from_files(self, view: str, columns: list[str]) -> list[set] | None:
        """The values of the batch's columns read by the driver from the files that hold its changes (a
        superset of them where those files hold other rows too, which bounds the store copy as well); None
        where its files are not read here (see driver_files)."""
        held = self.driver.held.get(view)
        if held is not None:
            return [set(held.column(c).drop_null().unique().to_pylist()) for c in columns]
        commits = [key for key, batch in self.batches.items() if batch == view]
        if not commits:
            return None
        table, start, end = commits[0]
        snapshot = self.snapshot(table)
        files = self.logs.change_files(snapshot, start, end) if driver_files.readable(snapshot) else None
        found = None if files is None else driver_files.column_values(snapshot, files, columns)
        return None if found is None else [found[c] for c in columns]

    def consolidate(self, wanted: dict[tuple, tuple]) -> None:
        """Consolidate the batches {(table, start, end): (columns, ranged columns, [readers])} not consolidated
        yet, with the range of values of each ranged column (batch_ranges); readers: how many of the
        statements' queries read the batch."""
        with self.timed("batches"):
            for key in wanted:
                if key not in self.batches and not self._consolidate_on_driver(key, *wanted[key][:2]):
                    if self.materialize:
                        self._consolidate(key, *wanted[key])
                    else:
                        self._consolidate_from_log(key, *wanted[key])

    def _consolidate_on_driver(self, key: tuple, columns, ranged) -> bool:
        """Consolidate a small batch on the driver: its change files read with pyarrow and netted there, handed
        to Spark as a local relation when a statement Spark computes reads it. Its size, ranges and values are
        then exact, and no query plans or scans the change data feed: planning a read of it makes Delta list
        the commits' files, once per scan or once for a cached batch, and each scan is a Spark job. False where
        the driver does not read the batch (see driver_files.change_rows) or its files pass
        heuristics.DRIVER_BATCH_BYTES."""
        table, start, end = key
        snapshot = self.snapshot(table)
        if snapshot is None or not driver_files.readable(snapshot):
            return False
        files = self.logs.change_files(snapshot, start, end)
        if files is None or sum(f.size for f in files) > heuristics.DRIVER_BATCH_BYTES:
            return False
        held = driver_files.change_rows(snapshot, files, list(columns), MULTIPLICITY)
        if held is None:
            return False
        schema = ", ".join(f"{quote(c)} {t}" for c, t in columns) + f", {MULTIPLICITY} BIGINT"
        ranges = {c: tuple(value.as_py() for value in pc.min_max(held.column(c)).values())
                  for c in _ranged_columns(columns, ranged)}
        # Spark gets the rows only where a statement it computes reads them: most run in DuckDB.
        self._register_batch(key, self._held(held, schema, "batches", local=True), held.num_rows, ranges, held=True)
        return True

    def _consolidate(self, key: tuple, columns, ranged, readers=(1,)) -> None:
        table, start, end = key
        rows = self._local_checkpoint(source_tables.change_rows_sql(table, start, end, columns))
        self._register_batch(key, self.register(rows), *_count_and_ranges(rows, _ranged_columns(columns, ranged)))

    def _register_batch(self, key: tuple, view: str, size: int, ranges: dict[str, tuple], held: bool = False) -> None:
        """Register the view of a consolidated batch of `size` rows with each ranged column's (lowest, highest)
        value ((None, None) where only NULLs). held: the driver holds its rows."""
        self.batches[key] = view
        self.batch_rows[view] = size
        self._hint(view, size)
        self.batch_ranges[view] = dict(ranges)
        self._listed_columns[view] = [c for c, (low, high) in ranges.items()
                                      if low is not None and lists_batch_values(size, _span(low, high), held)]

    def _hint(self, view: str, size: int) -> None:
        """Where the batch is small next to the maps it joins, its rows to be hinted for broadcast when a query
        joins it (joined_batch): copied to every task instead of shuffling the maps to meet it (change data
        have no size estimate, so Spark would never broadcast them by itself). Not the plain view's rows:
        Spark warns of a hint in a query that does not join the batch."""
        if 0 < size <= BROADCAST_BATCH_ROWS:
            self._broadcast_batches.add(view)

    def joined_batch(self, view: str) -> str:
        """The batch's view for a query that joins it: hinted for broadcast where it is small."""
        if view not in self._broadcast_batches:
            return view
        if view not in self._hinted:
            if view in self.driver.held:  # Spark's view of it made, as the batch's, when Spark reads it
                hinted = self._view_name()
                self.driver.hold(hinted, self.driver.held[view])
                self._not_handed_over[hinted] = (lambda: broadcast(self.frame(view)), "batches")
            else:
                hinted = self.register(broadcast(self.spark.table(view)))
            self._hinted[view] = hinted
            self.batch_rows[hinted] = self.batch_rows[view]  # read by sqlgen.Sources.drives
        return self._hinted[view]

    def _consolidate_from_log(self, key: tuple, columns, ranged, readers=(1,)) -> None:
        """The batch as a view of its changes, not consolidated (see sources.change_rows_sql), its size and
        ranges from the Delta log (no job): as many rows as the commits changed at most, each value within
        the statistics of the files they touched."""
        table, start, end = key
        types = dict(columns)
        changes = self.logs.changes(self.snapshot(table), start, end,
                                    [c for c in ranged if _LOGGED_RANGE_TYPE.fullmatch(types.get(c, ""))])
        rows = self.spark.sql(source_tables.change_rows_sql(table, start, end, columns, consolidated=False))
        size = changes.rows
        ranges = {c: _logged_range(types[c], *bounds) for c, bounds in changes.ranges.items()}
        ranged = [c for c in ranged if _RANGED_TYPE.fullmatch(types.get(c, ""))]
        if ranged and not changes.tight:
            # Rows deleted from larger files lie anywhere in those files' ranges: the rows' own (one job).
            size, found = _count_and_ranges(rows, ranged)
            ranges = dict(found)
        else:
            found = {c: changes.ranges[c] for c in ranged if c in changes.ranges}
        # Read by several queries of the statements, kept in memory by the first scan of the query computing
        # them all: each scan of a change data feed in a plan costs planning of its own (Delta reads the
        # commits to list the files of each), keeping it costs planning once.
        rows = self.persisted(rows) if readers[0] > 1 else rows
        view = self.batches[key] = self.register(rows)
        # Unknown counts as large: the batch then drives no join (see sqlgen.Sources.drives).
        self.batch_rows[view] = BROADCAST_BATCH_ROWS + 1 if size is None else size
        self._hint(view, self.batch_rows[view])
        self.batch_ranges[view] = ranges
        # Values are listed only for integer columns, where the ranges leave many keys out (see
        # heuristics.lists_batch_values): for others a job would list a few values that the range holds anyway.
        self._listed_columns[view] = [c for c, (low, high) in found.items() if _span(low, high) is not None
                                      and size is not None and lists_batch_values(size, _span(low, high))]


def _ranged_columns(columns, ranged) -> list[str]:
    """Of the ranged columns, those whose values order and print exactly as literals (_RANGED_TYPE)."""
    return [c for c, t in columns if c in ranged and _RANGED_TYPE.fullmatch(t)]


def _count_and_ranges(rows, columns: list[str]) -> tuple[int, dict[str, tuple]]:
    """The rows' count and each column's (lowest, highest) value, (None, None) where only NULLs: one job.
    Only for types whose values come back to Python and go into SQL as the same literal (no float NaN,
    no time zones)."""
    found = rows.agg(F.count(F.lit(1)), *(f(F.col(quote(c))) for c in columns for f in (F.min, F.max))).first()
    return found[0], {c: (found[1 + 2 * i], found[2 + 2 * i]) for i, c in enumerate(columns)}


def _logged_range(type_sql: str, low, high) -> tuple:
    """A range of a Delta file statistic's values (JSON numbers and date strings) as Python values."""
    if low is None:
        return None, None
    if type_sql == "date":
        return datetime.date.fromisoformat(low), datetime.date.fromisoformat(high)
    return low, high


def _span(low, high) -> int | None:
    """How many values lie from low to high, for integers (None for other types)."""
    return high - low + 1 if isinstance(low, int) and isinstance(high, int) else None


def without_inflated_size_estimate(spark, checkpointed):
    """The checkpoint, forgetting its query's size estimate when that is beyond Spark's own "unknown"
    (spark.sql.defaultSizeInBytes, 2^63 - 1 bytes).

    A checkpoint keeps the size Spark estimated for the query it computed, and without statistics Spark
    estimates a join as the product of its inputs' sizes. A stage that joins stages that join stages
    multiplies those products again: TPC-H q18's stages reached estimates thousands of bits long, and
    refreshes of many views filled the driver's heap with such numbers. An estimate that
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


def arrow_frame(spark, rows, schema) -> DataFrame:
    """A DataFrame of the schema (DDL or a StructType) of the rows of a pyarrow table the driver holds.

    Without the table's empty record batches: PySpark hands a table over as a stream of its batches, and
    that stream as read ends at the first empty one, so that every row after it would be lost without an
    error. Tables that a filter or a concatenation of files made often have such batches."""
    if any(batch.num_rows == 0 for batch in rows.to_batches()):
        rows = pa.Table.from_batches([b for b in rows.to_batches() if b.num_rows], rows.schema)
    return spark.createDataFrame(rows, schema=schema)
