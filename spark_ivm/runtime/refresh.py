"""REFRESH: bring the views of one map store up to date with their sources, in one commit.

The steps, as REFRESH reports their seconds:
- progress: the store's bookkeeping (each view's applied source versions, its catalog entry's token, the
  store's sequence number), from the user metadata of the store's latest commit in its Delta log;
- look-ups: each source table's latest version, columns and Delta table id, from its Delta log. A source
  whose commits since the applied version changed no data (a compaction, a property) needs no work;
- batches, store read, stages, triggers: each changed source's consolidated change data feed, and the
  trigger statements' increments of the maps (see run.py for the two ways they are computed);
- write: one commit of the increments and the new bookkeeping, carrying the bookkeeping in its user
  metadata too; a transaction that read the store as of the version the refresh started from, so that
  of two refreshes computed from one version only one lands (exactly once);
- view: the user's view written for the new version (see publish.py).
A refresh with nothing to apply reads two Delta logs and the view's definition: no Spark job.

A view's refresh policy (its `refresh` option, or REFRESH … INCREMENTAL | FULL) may have its maps recomputed
instead (Engine.rebuild): always (full), or under auto when a batch is a large share of its source
(heuristics.refresh_fully), a source was replaced by another table, or its change data feed is gone.

Longer than most modules: the steps share one StoreRefresh's state (the run, the pinned store, the staged
rows) and are kept in the order they run; a view's own part of the work is in view_work.py.
"""

from __future__ import annotations

import logging
import os
import time

from pyspark.sql import DataFrame

from spark_ivm import config, heuristics, udfs
from spark_ivm.calculus.analysis import has_delta, joins, relations
from spark_ivm.errors import IVMError, RefreshError
from spark_ivm.runtime.compaction import compact_on_driver, compacted_files, compacts_early
from spark_ivm.runtime.deltalog import ConcurrentCommitError, TableSnapshot
from spark_ivm.runtime.fused import Fused, fused_sql, trigger_items, with_families, with_shared
from spark_ivm.runtime.mapstore import (
    ENTRY_TOKEN, SEQUENCE, SEQUENCE_ID, StoreColumns, append_sql, bookkeeping_metadata, bookkeeping_of,
    compact_rows_sql, sequence_sql, staged_sql, union_sql,
)
from spark_ivm.runtime.key_conditions import Condition, MapIs, all_of, any_of, key_values
from spark_ivm.runtime.run import RefreshRun
from spark_ivm.runtime.session_scope import COLLECT_SETTINGS, session_settings, store_write_parallelism
from spark_ivm.runtime.top_rows import Driver
from spark_ivm.runtime.sqlgen import VALUE, Sources, quote, statement_sql
from spark_ivm.runtime.view_work import (
    FullRefreshNeeded, ViewRefresh, applied_versions, check_source, map_bounds, map_references, maps_read,
    ordered_tables, progress_rows, refresh_failure, relations_of, statements_of, written_key_columns,
)
from spark_ivm.runtime.publish import increment_rows
from spark_ivm.runtime.viewsql import PROPERTY_MAPS, view_map_ids

log = logging.getLogger("spark_ivm")

# Session settings for the refresh's own Spark work. Adaptive execution turns every broadcast and shuffle
# of the triggers' small joins into a job of its own, and re-plans after each.
REFRESH_SETTINGS = {"spark.sql.adaptive.enabled": "false"}
# Session settings for a refresh that runs its plans interpreted (see heuristics.runs_interpreted): no
# whole-stage code, and expressions evaluated without generating code for them either.
INTERPRETED_SETTINGS = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
# Session settings for writing a map store: files of bounded size, so that a store written in key order
# has files that each hold a narrow range of keys (see mapstore.key_order).
STORE_WRITE_SETTINGS = {
    "spark.sql.files.maxRecordsPerFile": str(heuristics.STORE_FILE_ROWS),
    # Each commit's checksum lists all the store's files, so that the next refresh reads the store from them
    # without Delta rebuilding its state of the new version (see DeltaLogs.read_files); on a machine whose
    # time zone is not UTC, Delta would otherwise check that list against a rebuilt state at every commit.
    "spark.databricks.delta.allFilesInCrc.thresholdNumFiles": str(heuristics.STORE_LISTED_FILES_MAX),
    "spark.databricks.delta.allFilesInCrc.verificationMode.forceOnNonUTC.enabled": "false",
}
CRASH_ENV = "SPARK_IVM_CRASH_AT"  # test hook: exit the process abruptly at a named refresh step


def crash_point(step: str) -> None:
    if os.environ.get(CRASH_ENV) == step:
        os._exit(17)


class StaleEntry(Exception):
    """A cached catalog entry no longer describes the view in its store."""


def _batch_alone(e) -> bool:
    """Whether e reads a batch and nothing else to join it with (no table, map or shared product)."""
    return has_delta(e) and not joins(e)


def sources(run: RefreshRun, relation_tables, source_columns, versions, layout, deltas=None, pending=None,
            bounds=None) -> Sources:
    """Where a run's statements read relations, batches and maps (see sqlgen.Sources)."""
    deltas = deltas or {}
    pending = pending or {}  # map -> its increments from sources applied earlier in this refresh
    bounds = bounds or {}  # map -> the condition its rows that statements can join hold for

    def relation(rel: str) -> str:
        table = relation_tables[rel]
        return run.pinned(table, versions[table])

    def map_sql(map_name: str) -> str:
        base = layout.read_map_sql(map_name, run.store(layout.table), bounds.get(map_name))
        extra = pending.get(map_name)
        if not extra:
            return base
        # Rows of a map sum per key (see read_map_sql): the earlier increments are more rows.
        return "(" + " UNION ALL ".join(f"SELECT * FROM {x} AS p{i}" for i, x in enumerate([base] + extra)) + ")"

    return Sources(
        relation=relation,
        delta=lambda rel: deltas[rel],
        map=map_sql,
        columns=lambda rel: [c for c, _ in source_columns[relation_tables[rel]]],
        map_keys=lambda map_name: layout.map(map_name).keys,
        stage=run.stage,
        drives=lambda rel: 0 < run.batch_rows.get(deltas.get(rel), 0) <= heuristics.BROADCAST_BATCH_ROWS,
    )


class StoreRefresh:
    """One refresh of views of one map store: one commit, the views' definitions, their statistics."""

    def __init__(self, engine, entries: list, check_tokens: bool = False, mode: str | None = None):
        self.engine = engine
        self.spark = engine.spark
        self.logs = engine.logs
        self.entries = entries
        self.store = entries[0].store
        self.check_tokens = check_tokens  # the entries come from a cache: StaleEntry if the store disagrees
        self.mode = mode  # REFRESH … INCREMENTAL: "incremental" for every view; None: each view's policy
        self.rebuilds: dict[str, str] = {}  # view -> why its maps are recomputed instead
        self.pinned = False  # whether the store existed when the refresh read its progress

    def policy(self, entry) -> str:
        return self.mode or entry.options.get("refresh", "auto")

    def run(self) -> list[dict]:
        """Refresh the views; their statistics, in order. A commit that loses a race with another refresh
        of the store is computed again from the store as that one left it. The views whose policy has them
        recomputed (`rebuilds`) are left to the caller, to rebuild after the others' commit."""
        self.started = time.perf_counter()
        attempts = 0
        while True:
            try:
                with session_settings(self.spark, REFRESH_SETTINGS):
                    stats = self._attempt()
                break
            except ConcurrentCommitError as exc:
                if self._store_dropped():
                    raise self.store_gone() from exc
                attempts += 1
                if attempts == heuristics.ATTEMPTS:
                    raise RefreshError(f"the map store {self.store} of {self.entries[0].name} was written by "
                                       f"{heuristics.ATTEMPTS} other refreshes while this one ran; "
                                       "try again") from None
                log.info("the map store %s was written while a refresh ran; refreshing again", self.store)
            except FullRefreshNeeded as exc:  # found while reading the batches: the others go on without it
                if self._store_dropped():
                    raise self.store_gone() from exc
                entry = next((e for e in self.entries if e.name == exc.view), None)
                if entry is None or entry.name in self.rebuilds or self.policy(entry) == "incremental":
                    raise
                self.rebuilds[entry.name] = f"full ({self.policy(entry)}: {exc.reason})"
            except StaleEntry:
                raise
            except Exception as exc:
                # Say so, rather than what Spark or Delta failed at for want of the store's files.
                if self._store_dropped():
                    raise self.store_gone() from exc
                raise
        return stats

    def _store_dropped(self) -> bool:
        """Whether a DROP or a rebuild of the view in another process removed the store under the refresh."""
        return self.pinned and self.logs.available and self.logs.snapshot(self.store) is None

    def store_gone(self) -> RefreshError:
        name = self.entries[0].name
        return RefreshError(f"the map store {self.store} of view {name} was dropped while the refresh ran, by DROP "
                            f"INCREMENTAL VIEW {name} or REFRESH INCREMENTAL VIEW {name} FULL in another session; "
                            f"this refresh has no store to apply its changes to")

    def _attempt(self) -> list[dict]:
        started = time.perf_counter()
        for entry in self.entries:
            udfs.require(self.spark, udfs.plan_functions(entry.plan), view=entry.name)
        with RefreshRun(self.spark, self.logs) as run:
            try:
                with run.timed("progress"):
                    progress, store = self._progress(run)
            except Exception:
                if self.check_tokens:  # e.g. the store was dropped by another process
                    raise StaleEntry() from None
                raise
            stale = [e for e in self.entries if progress.get(e.layout.progress_id, {}).get(ENTRY_TOKEN) != e.token]
            if stale and self.check_tokens:
                raise StaleEntry()
            if stale:  # read from the catalog just now: the maps are another CREATE's or rebuild's
                raise RefreshError(
                    f"the map store {self.store} does not hold the maps of the catalog entry of view "
                    f"{stale[0].name}: a CREATE or REFRESH … FULL of it did not finish; run REFRESH INCREMENTAL "
                    f"VIEW {stale[0].name} FULL")
            sequence = progress.get(SEQUENCE_ID, {}).get(SEQUENCE, 0)
            run.pin_store(self.store, store.version, store)  # the maps are read as of the progress read
            self.pinned = True
            crash_point("after_progress")
            with run.timed("look-ups"):
                store_columns = StoreColumns(store.columns) if store.handle else self.engine.store_columns(self.store)
                run.look_up({t for entry in self.entries for t in entry.sources.values()})
                work, stats = self._work(run, progress, started)
            if work:
                chosen = config.PLAN.get(self.spark)
                run.materialize = not self.logs.available or chosen == "materialized" or (
                    chosen == "auto" and not heuristics.plans_at_once([s for w in work for s in statements_of(w)]))
                plan = "materialized" if run.materialize else "at_once"
                execution = self._execution(run, work)
                with session_settings(self.spark, INTERPRETED_SETTINGS if execution == "interpreted" else {}):
                    staged = self._staged(work, sequence + 1, store_columns, run)
                    crash_point("after_deltas")
                    written, staged, increments = self._write(
                        run, store, store_columns, staged, work, _progress_after(progress, work, sequence + 1),
                        sequence + 1)
                crash_point("after_write")
                for w in work:
                    stats[w.entry.name] = {**_stats(w.entry, "refreshed", w.targets, written, started),
                                           "execution": execution, "plan": plan, "policy": w.policy}
                self._publish(run, work, store, staged, increments)
            else:
                # Nothing to apply: the views' definitions must still show the store as it is (a crash, or
                # a refresh that raced another, may have left one behind).
                with run.timed("view"):
                    for entry in (e for e in self.entries if e.name not in self.rebuilds):
                        self.engine.forms.publish(entry, store.version, lambda e=entry: self._store_rows(run, e),
                                                  stats[entry.name]["definition"])
            steps = run.step_seconds(time.perf_counter() - started)
        for s in stats.values():
            s["steps"] = steps
            s.pop("definition", None)
        return [stats[e.name] for e in self.entries]

    # -- what to do ------------------------------------------------------------------------------------------
    def _progress(self, run: RefreshRun) -> tuple[dict[int, dict[str, int]], TableSnapshot]:
        """The store's bookkeeping and the snapshot it is of: from the latest commit's user metadata when a
        refresh or CREATE made it, else aggregated from the store's rows as of that version."""
        if not self.logs.available:
            version = self.engine.store_version(self.store)
            return progress_rows(self.spark, f"{self.store} VERSION AS OF {version}"), \
                TableSnapshot(self.store, version, "", (), {}, None, "")
        sources = {t for entry in self.entries for t in entry.sources.values()}
        # The views' own metadata comes in the same call of the metastore (see _work).
        with self.engine.forms.looking_up():
            meta = run.catalog_tables(sorted({self.store} | sources | {e.name for e in self.entries}))[self.store]
        store = self.logs.snapshot(self.store, meta) if meta is not None else None
        if store is None:
            raise RefreshError(f"the map store {self.store} of view {self.entries[0].name} no longer exists; "
                               f"run REFRESH INCREMENTAL VIEW {self.entries[0].name} FULL")
        found = bookkeeping_of(self.logs.user_metadata(store))
        if found is None:
            found = progress_rows(self.spark, run.pinned(self.store, store.version))
        return found, store

    def _work(self, run: RefreshRun, progress, started) -> tuple[list[ViewRefresh], dict[str, dict]]:
        """The views with changes to apply, and the statistics of those without."""
        stats: dict[str, dict] = {}
        work: list[ViewRefresh] = []
        for entry in self.entries:
            if entry.name in self.rebuilds:
                stats[entry.name] = {}
                continue
            applied = applied_versions(entry, progress)
            targets = {t: run.version(t) for t in set(entry.sources.values()) if run.columns(t) is not None}
            policy = self.policy(entry)
            try:
                for table in set(entry.sources.values()):
                    check_source(entry, table, run, applied)
            except FullRefreshNeeded as exc:
                if policy == "incremental":
                    raise
                self.rebuilds[entry.name], stats[entry.name] = f"full ({policy}: {exc.reason})", {}
                continue
            # A source's commits that only rewrote files or changed a property changed none of its rows.
            changes = {t: self._changes(run, t, applied[t]) for t in ordered_tables(entry) if targets[t] > applied[t]}
            changed = [t for t, c in changes.items() if c is None or c.data_changed]
            view = self.engine.forms.of_catalog(run.catalog[entry.name]) if self.logs.available else {}
            if not changed:
                stats[entry.name] = {**_stats(entry, "up to date", applied, 0, started), "definition": view}
                continue
            full, why = self._choice(run, policy, [(t, changes[t]) for t in changed])
            if full:
                self.rebuilds[entry.name], stats[entry.name] = f"full ({why})", {}
            else:
                work.append(ViewRefresh(entry, applied, targets, changed, view=view, policy=f"incremental ({why})"))
        return work, stats

    def _changes(self, run: RefreshRun, table: str, applied: int):
        """What the source's commits after `applied` changed, as its Delta log says; None where the log
        cannot tell."""
        snapshot = run.snapshots.get(table)
        if snapshot is None:
            return None
        try:
            return self.logs.changes(snapshot, applied + 1, snapshot.version)
        except Exception as exc:  # a commit file cleaned up: the change data feed will say what is gone
            log.debug("the log of %s does not tell what changed: %s", table, exc)
            return None

    def _choice(self, run: RefreshRun, policy: str, changed) -> tuple[bool, str]:
        """Whether a view with these changed sources is recomputed, and why."""
        if policy != "auto":
            why = "REFRESH … INCREMENTAL" if self.mode else "the view's refresh policy"
            return policy == "full", f"{policy}: {why}"
        batches = [heuristics.Batch(t, c.bytes if c else None, getattr(run.snapshots.get(t), "size_bytes", None))
                   for t, c in changed]
        return heuristics.refresh_fully(batches, config.FULL_REFRESH_PERCENT.get(self.spark))

    def _execution(self, run: RefreshRun, work: list[ViewRefresh]) -> str:
        """How the refresh's Spark plans run, as the session setting spark.ivm.codegen says: "compiled" (on,
        the default), "interpreted" (off), or by the size of what the refresh may scan (auto, see
        heuristics.runs_interpreted)."""
        chosen = config.CODEGEN.get(self.spark)
        if chosen == "auto":
            # The store as pinned, and the source tables statements read whole (first-order maintenance,
            # re-evaluation): what a refresh may scan beyond its batches.
            tables = {(self.store, run.store_versions.get(self.store))} | {
                (w.entry.sources[r], w.targets[w.entry.sources[r]])
                for w in work for s in statements_of(w) for r in relations(s.expr)}
            sizes = [run.size_bytes(t, v) for t, v in sorted(tables, key=repr)]
            chosen = "off" if heuristics.runs_interpreted(None if None in sizes else sum(sizes)) else "on"
        return "interpreted" if chosen == "off" else "compiled"

    # -- the increments --------------------------------------------------------------------------------------
    def _staged(self, work: list[ViewRefresh], sequence: int, store_columns: StoreColumns, run: RefreshRun) -> str:
        """A temporary view of the rows to write: every view's map increments, summed to one row per
        map and key, its new progress, and the store's new sequence number.

        Each view applies its changed sources one after the other (the product rule): the triggers of
        a later source read the base tables and maps as updated by the batches of the earlier ones.
        The views advance together, one source at a time, so that each step is one Spark action for
        all views rather than one per view.
        """
        # Every batch first: the keys they hold bound the map rows the statements can join.
        # batch -> (its columns, those that fix keys of maps, how many queries of the statements read it)
        wanted: dict[tuple, tuple[list, set[str], list[int]]] = {}
        references = [{table: map_references(w, table) for table in w.changed} for w in work]
        for w, refs in zip(work, references):
            for table in w.changed:
                _, ranged, readers = wanted.setdefault(w.batch_key(table), (w.entry.source_columns[table], set(), [0]))
                ranged.update(c for _, fixed, _ in refs[table] for _, c in fixed)
                readers[0] += len(trigger_items_of(w.entry, statements_of(w, table))[1])
            # The batch columns that fix the keys the refresh adds to maps that fix other maps' keys (see
            # map_bounds), listed too.
            links = {(other, key) for table in w.changed for _, _, reached in refs[table] for _, other, key in reached}
            for other, other_key in links:
                for table, column in written_key_columns(w, other, other_key) or ():
                    wanted[w.batch_key(table)][1].add(column)
        try:
            run.consolidate(wanted)
        except Exception:
            for w in work:  # again one view at a time, so that the error names the view whose batch failed
                _attributed(w.entry, lambda: run.consolidate({k: wanted[k] for k in map(w.batch_key, w.changed)}))
            raise
        for w, refs in zip(work, references):
            w.bounds = map_bounds(w, run, refs)
        read = [(i, name) for i, w in enumerate(work) for s in statements_of(w) for name in maps_read(s)]
        if heuristics.reads_store_once(len(read)):
            rows = any_of(*(work[i].entry.layout.rows_of(name, work[i].bounds.get(name)) for i, name in read))
            # Of those, the copy keeps only the rows at the batches' own values, written once per condition
            # however many maps it bounds: a value list can have thousands of literals.
            members = [map_bounds(w, run, refs, listed=True) for w, refs in zip(work, references)]
            maps_kept: dict[Condition | None, dict[int, None]] = {}  # condition -> the maps it keeps rows of
            for i, name in read:
                maps_kept.setdefault(members[i].get(name), {})[work[i].entry.layout.map(name).map_id] = None
            kept = None if members == [w.bounds for w in work] else any_of(
                *(all_of(MapIs(tuple(ids)), condition) for condition, ids in maps_kept.items()))
            run.read_store_once(self.store, rows, kept,
                                {work[i].entry.layout.map(name).map_id for i, name in read})
        for step in range(max(len(w.changed) for w in work)):
            read_later = []  # (view, its increments of this step) for views with sources still to apply
            for w in work:
                if step < len(w.changed):
                    rows = _attributed(w.entry, lambda: self._source_increments(w, step, store_columns, run))
                    if step + 1 < len(w.changed) and rows:
                        read_later.append((w, rows))
                    else:
                        w.increments += [sql for _, sql in rows]
            if read_later:
                # _materialize unions all views' increments: no union of its own per view.
                # Computed first even at once: the next source's statements read these increments as maps
                # and write them, so one query would compute them once per reader.
                view = self._materialize(run, [(w.entry, " UNION ALL ".join(sql for _, sql in rows), len(rows))
                                               for w, rows in read_later], always=True)
                for w, rows in read_later:
                    layout = w.entry.layout
                    for target in dict.fromkeys(t for targets, _ in rows for t in targets):
                        w.pending.setdefault(target, []).append(layout.read_map_sql(target, view))
                    ids = ", ".join(str(i) for i in layout.map_ids)
                    w.increments.append(f"SELECT * FROM {view} WHERE map_id IN ({ids})")
        parts = [(w.entry, staged_sql(w.increments, [w.entry.layout.progress_sql(w.targets, store_columns)],
                                      store_columns, run.tasks), len(w.increments)) for w in work]
        parts.append((work[0].entry, sequence_sql(sequence, store_columns), 0))
        return self._materialize(run, parts)

    def _source_increments(self, w: ViewRefresh, step: int, store_columns: StoreColumns,
                           run: RefreshRun) -> list[tuple[tuple[str, ...], str]]:
        """The view's map increments from its step-th changed source, in the map store's row shape: (the
        maps a query adds to, the query)."""
        entry, table = w.entry, w.changed[step]
        # The consolidated batch is read by every statement of the trigger (and by other views).
        batch_view = run.batch(*w.batch_key(table), entry.source_columns[table])
        if not run.batch_rows[batch_view]:
            # The changes cancel out (a row inserted and deleted again): no statement has anything to add.
            w.versions[table] = w.targets[table]
            return []
        # Statements (or their terms) that differ only in what they sum over the same product sum it at once;
        # the others compute the joins they share once (see fused.py).
        shared, items = trigger_items_of(entry, statements_of(w, table))
        alone = [_batch_alone(item.product if isinstance(item, Fused) else item.expr) for item in items]
        # Statements that read the batch alone read it plain, the others hinted for broadcast (run.joined_batch).
        joined = batch_view if all(alone) else run.joined_batch(batch_view)

        def reading(view: str, versions, with_products=False) -> Sources:
            deltas = {r: view for r in relations_of(entry, table)}
            found = with_families(sources(run, entry.sources, entry.source_columns, versions, entry.layout, deltas,
                                          w.pending, w.bounds), entry.layout.families)
            return with_shared(found, shared) if with_products else found
        # A re-evaluation (:=) computes the map's new contents, so it reads this source after its batch.
        after_versions = {**w.versions, table: w.targets[table]}
        before, before_alone = reading(joined, w.versions, True), reading(batch_view, w.versions)
        after, after_alone = reading(joined, after_versions), reading(batch_view, after_versions)
        increments = []
        for item, read_alone in zip(items, alone):
            if isinstance(item, Fused):
                sql = fused_sql(item, before_alone if read_alone else before)
                increments.append((item.targets, entry.layout.fused_rows_sql(item.targets, sql, store_columns)))
            else:
                read = (after, after_alone) if item.op == ":=" else (before, before_alone)
                sql = _statement_increments(entry, item, read[1] if read_alone else read[0])
                increments.append(((item.target,), entry.layout.rows_sql(item.target, sql, store_columns)))
        # Only now: `sources` reads the versions when the statements' SQL is made.
        w.versions[table] = w.targets[table]
        return increments

    def _materialize(self, run: RefreshRun, parts: list[tuple], always: bool = False) -> str:
        """One temporary view of the UNION ALL of the views' parts, (entry, sql, its statements): computed now
        in a materialized run, or if `always`. Parts of more statements than one plan may hold are first
        computed in groups (see heuristics.plan_groups), each into a checkpoint."""
        groups = heuristics.plan_groups([n for *_, n in parts])
        if len(groups) > 1:
            parts = [(parts[g[0]][0], f"SELECT * FROM {self._union(run, [parts[i] for i in g], True)}", 0)
                     for g in groups]
        return self._union(run, parts, always)

    def _union(self, run: RefreshRun, parts: list[tuple], always: bool) -> str:
        """The UNION ALL of the parts as one temporary view. If Spark fails, each part is tried alone, so
        that the error names the view that caused it."""
        try:
            return run.checkpoint(union_sql([sql for _, sql, _ in parts], run.tasks), step="triggers", always=always)
        except Exception as exc:
            if len(parts) > 1:
                for entry, sql, _ in parts:
                    _attributed(entry, lambda: run.checkpoint(sql, step="triggers", always=always))
            raise refresh_failure(parts[0][0], exc) from exc

    # -- the commit and the views --------------------------------------------------------------------------
    def _write(self, run: RefreshRun, store: TableSnapshot, store_columns: StoreColumns, staged: str,
               work: list[ViewRefresh], bookkeeping: dict, sequence: int) -> tuple[int, str, dict | None]:
        """One commit of the staged rows: an append, or every `spark.ivm.compactEvery`-th refresh an
        overwrite with the compacted store, carrying the new bookkeeping as its user metadata. Returns the
        rows written, the view of the staged rows as written (computed) and, when they were collected to
        write them, the increments of each view's own maps (raw, see viewsql.map_columns) by view name."""
        metadata = bookkeeping_metadata(bookkeeping)
        compact_every = config.COMPACT_EVERY.get(self.spark)
        due = compact_every > 0 and sequence % compact_every == 0
        crash_point("before_write")
        try:
            # Rows the driver computed are written from there, as collected ones are.
            held, arrow = run.driver.held.get(staged), None
            # The files appended since the last compaction (looked for at most two intervals back), which a
            # compaction rewrites, and whose rows may make one come before its turn.
            appended = (self.logs.appended_files(store, 2 * compact_every)
                        if compact_every > 0 and self.logs.available and (due or held is not None) else set())
            early = not due and held is not None and compacts_early(self.logs, store, held.num_rows, appended)
            compact = due or early
            # The files a compaction rewrites (None: all of them), whether the driver or Spark rewrites them.
            compacting = self.logs.available and compact
            number = sequence // compact_every if due else None
            files = compacted_files(self.logs, store, number, appended) if compacting else None
            on_driver = compact_on_driver(self.logs, run, store, store_columns, staged, files) if compacting else None
            if early and on_driver is None:  # before its turn only where the driver compacts
                compact = False
            if on_driver is not None or (self.logs.available and not compact and held is not None
                                         and held.num_rows <= heuristics.DRIVER_WRITE_ROWS):
                rows = collected = run.local_rows(staged)
                arrow = held  # the same rows, written as they are where their types allow it
            else:
                rows, collected = run.frame(staged), None
            if not self.logs.available:
                with run.timed("write"):
                    return self._write_sql(staged, store_columns, sequence, metadata, compact), staged, None
            maps_inline = [w.view.get(PROPERTY_MAPS) == "yes" for w in work]
            if collected is None and not compact and heuristics.collects_increments(maps_inline):
                with run.timed("triggers"), session_settings(self.spark, COLLECT_SETTINGS):
                    found = rows._jdf.limit(heuristics.COLLECTED_ROWS_MAX + 1).collectAsList()
                if found.size() <= heuristics.COLLECTED_ROWS_MAX:
                    collected = DataFrame(self.spark._jsparkSession.createDataFrame(found, rows._jdf.schema()),
                                          self.spark)
                    rows = collected
                    staged = run.register(collected)
            # At once, the write computes the staged rows itself and the views read them back from the files
            # it added: no copy of them is kept first. A compaction reads them twice, so it reads a copy.
            if collected is None and not run.materialize and compact:
                run.materialize = True  # computed once now, for the write and for the views
                staged = run.checkpoint(f"SELECT * FROM {staged}", step="triggers")
                rows = run.frame(staged)
            direct = collected is None and not run.materialize
            with run.timed("write"), session_settings(self.spark, STORE_WRITE_SETTINGS):
                if on_driver is not None:
                    compacted_rows, files = on_driver
                    self.logs.overwrite_rows(store, compacted_rows, metadata, replacing=files)
                    written = held.num_rows
                elif compact:
                    rows_of = run.register(files.frame) if files else run.pinned(self.store, store.version)
                    partitions, parallelism = (None, {}) if files else store_write_parallelism(self.spark, store.size_bytes)
                    with session_settings(self.spark, parallelism):
                        compacted = self.spark.sql(compact_rows_sql(rows_of, staged, store_columns, partitions))
                        self.logs.overwrite(store, compacted, metadata, replacing=files)
                    written = run.frame(staged).count()  # the refresh's rows, not the store's
                else:
                    commit = self.logs.append(store, rows, metadata, held=collected is not None, arrow=arrow)
                    written = commit.rows
                    if direct:
                        staged = run.register(self.logs.written_rows(store, commit))
        except ConcurrentCommitError:
            raise
        except Exception as exc:
            raise refresh_failure(work[0].entry, exc) from exc
        if collected is None:
            return written, staged, None
        # Rows held by the driver: filtering and selecting them runs no job.
        return written, staged, {w.entry.name: increment_rows(collected, w.entry) for w in work}

    def _write_sql(self, staged: str, store_columns: StoreColumns, sequence: int, metadata: str, compact: bool) -> int:
        """The write where the JVM's Delta log is out of reach (Spark Connect): SQL, exactly once through
        Delta's idempotent writes (txnAppId: the store, txnVersion: the sequence number)."""
        settings = {
            "spark.databricks.delta.write.txnAppId": f"spark_ivm:{self.store}",
            "spark.databricks.delta.write.txnVersion": str(sequence),
            "spark.databricks.delta.commitInfo.userMetadata": metadata,
            **STORE_WRITE_SETTINGS,
        }
        statement = (f"INSERT OVERWRITE {self.store} {compact_rows_sql(self.store, staged, store_columns)}" if compact
                     else append_sql(self.store, staged))
        with session_settings(self.spark, settings):
            self.spark.sql(statement)
        return self.spark.table(staged).count()

    def _publish(self, run: RefreshRun, work: list[ViewRefresh], store: TableSnapshot, staged: str,
                 increments: dict | None) -> None:
        """Write each refreshed view's definition for the version just committed."""
        crash_point("before_view")
        version = store.version + 1
        with run.timed("view"):
            for w in work:
                maps_at = f"SELECT * FROM {self._store_rows(run, w.entry)} UNION ALL {_map_increments(staged)}"
                self.engine.forms.publish(w.entry, version, maps_at, w.view, store.version,
                                          None if increments is None else increments[w.entry.name],
                                          increments_at=staged, store_bytes=store.size_bytes,
                                          driver=self._driver_maps(run, w.entry, staged))

    def _store_rows(self, run: RefreshRun, entry) -> str:
        """The store's rows of the view's maps as of the pinned version."""
        ids = view_map_ids(entry)
        return f"(SELECT * FROM {run.store_rows(self.store, ids)} WHERE map_id IN ({', '.join(map(str, ids))}))"

    def _driver_maps(self, run: RefreshRun, entry, staged: str) -> Driver | None:
        """The view's maps as of the new version at given keys, where the driver holds the staged rows and
        reads those of the store (run.store_on_driver): for the view's rows computed in DuckDB (top_rows)."""
        if staged not in run.driver.held:
            return None
        ids = MapIs(tuple(view_map_ids(entry)))

        def rows_at(column: str, values: list) -> str | None:
            stored = run.store_on_driver(self.store, all_of(ids, key_values(column, values)), step="view")
            return None if stored is None else f"SELECT * FROM {stored} UNION ALL {_map_increments(staged)}"
        return Driver(rows_at, run.driver.compute)


def _map_increments(staged: str) -> str:
    """The staged rows that are maps' increments (not the store's bookkeeping)."""
    return f"SELECT * FROM {staged} WHERE map_id >= 0"


def _statement_increments(entry, s, statement_sources: Sources) -> str:
    if s.op == ":=":
        # Re-evaluation (depth 0): new contents minus old, as an increment.
        keys = ", ".join(quote(k) for k in s.keys)
        new = statement_sql(s.expr, s.keys, statement_sources)
        old = statement_sources.map(s.target)
        sel = f"{keys + ', ' if keys else ''}"
        union = f"SELECT {sel}{VALUE} FROM ({new}) n UNION ALL SELECT {sel}-{VALUE} AS {VALUE} FROM {old} o"
        group = f" GROUP BY {keys}" if keys else ""
        return f"SELECT {sel}SUM({VALUE}) AS {VALUE} FROM ({union}) d{group} HAVING SUM({VALUE}) <> 0"
    # A statement's rows are summed per map and key with all others when staged. Decimal values are
    # summed per statement first, so that each increment is rounded to the map's type once, after
    # summing, as computing the map from scratch does.
    exact_sum = not entry.layout.map(s.target).value_type.startswith("decimal")
    return statement_sql(s.expr, s.keys, statement_sources, consolidated=not exact_sum)


def trigger_items_of(entry, statements):
    """trigger_items of a trigger's statements: maps hold integers and share rows as their layout says."""
    return trigger_items(statements, exact=lambda m: entry.layout.map(m).value_type in INTEGRAL_TYPES,
                         families=entry.layout.families)


def _attributed(entry, compute):
    """compute(), with a failure reported as a failure to refresh `entry`."""
    try:
        return compute()
    except IVMError:
        raise
    except Exception as exc:
        raise refresh_failure(entry, exc) from exc


def _stats(entry, status, versions, rows, started) -> dict:
    return {"view": entry.name, "status": status, "versions": versions, "rows_written": rows,
            "seconds": time.perf_counter() - started}


def _progress_after(progress: dict[int, dict[str, int]], work: list[ViewRefresh], sequence: int):
    """The store's bookkeeping once a refresh of `work` with this sequence number is written."""
    after = {i: dict(p) for i, p in progress.items()}
    for w in work:
        after.setdefault(w.entry.layout.progress_id, {}).update(w.targets)
    after[SEQUENCE_ID] = {SEQUENCE: sequence}
    return after


INTEGRAL_TYPES = ("bigint", "int", "smallint", "tinyint")
