"""A view's part of a refresh: the source versions it has applied and goes to, whether its sources can still
feed it incrementally, and the trigger statements it runs for each changed source."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spark_ivm import heuristics
from spark_ivm.calculus.analysis import batch_columns, map_key_references, map_names
from spark_ivm.errors import RefreshError
from spark_ivm.runtime.key_conditions import Condition, KeyIn, KeyRange, key_values, map_conditions
from spark_ivm.runtime.mapstore import ENTRY_TOKEN, bookkeeping_sql

if TYPE_CHECKING:
    from spark_ivm.runtime.run import RefreshRun


class FullRefreshNeeded(RefreshError):
    """A view's changes cannot be applied, but recomputing its maps brings it up to date (`reason`)."""

    def __init__(self, message: str, view: str, reason: str):
        super().__init__(message)
        self.view = view
        self.reason = reason


@dataclass
class ViewRefresh:
    """One view's part of a refresh: the source versions it starts from and goes to, the sources that
    changed (in trigger order), and what its steps have produced so far."""
    entry: object  # engine.ViewEntry
    applied: dict[str, int]
    targets: dict[str, int]
    changed: list[str]
    versions: dict[str, int] = field(default_factory=dict)  # the version of each source the next step sees
    pending: dict[str, list[str]] = field(default_factory=dict)  # map -> increments of earlier steps
    increments: list[str] = field(default_factory=list)  # store-shaped rows to write
    bounds: dict[str, str | None] = field(default_factory=dict)  # map -> the rows its reads need (map_bounds)
    view: dict = field(default_factory=dict)  # the user's view as the catalog had it (ViewForms.current)
    policy: str = ""  # why the view is refreshed incrementally, for REFRESH to report

    def __post_init__(self):
        self.versions = dict(self.applied)

    def batch_key(self, table: str) -> tuple[str, int, int]:
        """The changed source's batch: (table, first version, last version) to apply."""
        return table, self.applied[table] + 1, self.targets[table]


def progress_rows(spark, store: str) -> dict[int, dict[str, int]]:
    """Bookkeeping id -> {src: latest value}: per view (progress id), the last version applied of each
    source table and its entry token; the store's sequence number under SEQUENCE_ID. `store` may be
    any table expression of the store's rows."""
    progress: dict[int, dict[str, int]] = {}
    for r in spark.sql(bookkeeping_sql(store)).collect():
        progress.setdefault(r["map_id"], {})[r["src"]] = r["src_version"]
    return progress


def applied_versions(entry, progress: dict[int, dict[str, int]]) -> dict[str, int]:
    applied = {t: v for t, v in progress.get(entry.layout.progress_id, {}).items() if t != ENTRY_TOKEN}
    missing = [t for t in entry.sources.values() if t not in applied]
    if missing:
        raise RefreshError(f"view {entry.name} has no recorded progress for {missing[0]}; "
                           f"run REFRESH INCREMENTAL VIEW {entry.name} FULL")
    return applied


def check_source(entry, table: str, run: RefreshRun, applied: dict[str, int]) -> None:
    """Raise RefreshError, naming the way out, if a source table can no longer feed the view incrementally:
    gone, replaced by another table of the same name, or with other columns."""
    now = run.columns(table)
    if now is None:
        raise RefreshError(f"source table {table} of view {entry.name} no longer exists")
    snapshot = run.snapshots.get(table)
    recorded = getattr(entry, "source_ids", {}).get(table)
    replaced = (snapshot is not None and recorded is not None and snapshot.table_id != recorded) \
        or run.version(table) < applied[table]
    if replaced:
        raise FullRefreshNeeded(
            f"source table {table} of view {entry.name} was dropped and created again since the view was "
            f"built (it is another Delta table now); its changes since then cannot be read: run REFRESH "
            f"INCREMENTAL VIEW {entry.name} FULL to rebuild the view from it", entry.name,
            f"source table {table} was dropped and created again")
    # Columns added after the view's are no concern of the view: its SQL names the columns it reads.
    was = entry.source_columns[table]
    if now[:len(was)] != was:
        now_types = dict(map(tuple, now))
        changed = next(((c, t) for c, t in was if now_types.get(c) != t), None)
        what = ("its columns are in another order" if changed is None
                else f"column {changed[0]} is now of type {now_types[changed[0]]}, was {changed[1]}"
                if changed[0] in now_types else f"column {changed[0]} ({changed[1]}) is gone or renamed")
        raise RefreshError(
            f"the columns of source table {table} changed since view {entry.name} was built: {what} "
            f"(was {was}, now {now}); run REFRESH INCREMENTAL VIEW {entry.name} FULL to rebuild it")
    relied = entry.not_null_columns.get(table, [])
    lost = [c for c in relied if c not in run.not_null_columns(table)] if relied else []
    if lost:
        raise FullRefreshNeeded(
            f"column {lost[0]} of source table {table} may hold NULL now: it was declared NOT NULL when view "
            f"{entry.name} was built, and the view relies on that; run REFRESH INCREMENTAL VIEW {entry.name} "
            f"FULL to rebuild it", entry.name, f"column {lost[0]} of {table} is no longer NOT NULL")


def refresh_failure(entry, exc: Exception) -> Exception:
    text = str(exc)
    if any(k in text for k in ("DELTA_CHANGE_DATA_FEED", "ChangeDataFeed", "FileNotFound", "VersionNotFound",
                               "DELTA_MISSING_CHANGE_DATA", "change data")):
        return FullRefreshNeeded(
            f"the change data feed of a source of {entry.name} no longer covers the versions to apply "
            f"({text.strip().splitlines()[0][:300]}); run REFRESH INCREMENTAL VIEW {entry.name} FULL", entry.name,
            "the change data feed no longer covers the versions to apply")
    return exc


def relations_of(entry, table: str) -> list[str]:
    """The plan's relations that are the source table (a self-join reads one table as several)."""
    return [r for r, t in entry.sources.items() if t == table]


def statements_of(w: ViewRefresh, table: str | None = None) -> list:
    """The trigger statements a refresh runs for one changed source of the view, or for all of them."""
    plan = w.entry.plan
    return [s for t in ([table] if table else w.changed) for rel in relations_of(w.entry, t)
            if plan.trigger(rel) for s in plan.trigger(rel).statements]


def map_references(w: ViewRefresh, table: str) -> list[tuple[str, tuple, tuple]]:
    """The map references of the statements a refresh runs for one changed source of the view, each as
    (map, ((store key column, batch column), …), ((store key column, other map, its store key column), …))
    for the keys the source's batch fixes and those another map fixes (map_key_references).
    A re-evaluation (:=) also reads its map's old contents, all of them."""
    entry, layout = w.entry, w.entry.layout

    def column(name: str, position: int) -> str:
        return layout.key_column(layout.map(name).keys[position])

    refs = []
    for s in statements_of(w, table):
        rereads = [(s.target, (), ())] if s.op == ":=" else []
        for name, fixed, links in map_key_references(s.expr):
            refs.append((name, tuple((column(name, k), entry.source_columns[table][position][0])
                                     for k, _, position in fixed),
                         tuple((column(name, k), other, column(other, j)) for k, other, j in links)))
        refs += rereads
    return refs


def written_key_columns(w: ViewRefresh, name: str, key_column: str) -> list[tuple[str, str]] | None:
    """Where the keys that the refresh's statements add to map `name` in a store key column come from: per
    statement that writes the map, (its changed source, the batch column that fixes the key:
    batch_columns). None where a statement writes keys from anything else (a re-evaluation, a key a map
    holds): then any key may be new."""
    layout = w.entry.layout
    position = [layout.key_column(k) for k in layout.map(name).keys].index(key_column)
    found = []
    for table in w.changed:
        for s in statements_of(w, table):
            if s.target != name:
                continue
            column = batch_columns(s.expr).get(s.keys[position]) if s.op == "+=" else None
            if column is None:
                return None
            found.append((table, w.entry.source_columns[table][column[1]][0]))
    return found


def written_keys(w: ViewRefresh, run: RefreshRun, name: str, key_column: str) -> set | None:
    """The non-NULL keys in a store key column that the refresh's statements can add to map `name`: the
    values of the batch columns that fix them (written_key_columns), as the batches list them
    (run.batch_values); none for a map the refresh does not write, None where they are not known."""
    columns = written_key_columns(w, name, key_column)
    if columns is None:
        return None
    found: set = set()
    for table, column in columns:
        batch = run.batch(*w.batch_key(table), w.entry.source_columns[table])
        if run.batch_rows[batch]:
            values = run.batch_values(batch).get(column)
            if values is None:
                return None
            found.update(values)
    return found


def maps_read(statement) -> tuple[str, ...]:
    """The maps a statement reads: those its expression refers to, and a re-evaluated map's old contents."""
    return map_names(statement.expr) + ((statement.target,) if statement.op == ":=" else ())


def ordered_tables(entry) -> list[str]:
    return list(dict.fromkeys(entry.sources[t.relation] for t in entry.plan.triggers))


def map_bounds(w: ViewRefresh, run: RefreshRun, references: dict[str, list], listed: bool = False
               ) -> dict[str, Condition | None]:
    """Per map the refresh of a view reads: a condition on the store's columns that every row a
    statement can join holds for, or None where the whole map is needed.

    Where a statement joins a map with a batch on a key (see map_key_bindings), only keys in the
    range of the batch's values in that column can join. A map read by several statements needs the
    rows any of them can join; one read whole by any of them is read whole. With the store written
    in key order, Delta skips the files of other keys: a batch of new orders reads the orders-keyed
    maps' rows of new keys, not all of them. `references`: per changed source, map_references.

    listed: only keys among the batch's values (run.batch_values), where the batch's are listed.
    Delta skips no more files by them, but they leave fewer rows to copy.

    With `listed`, also a key another map fixes (map_key_links): only keys of that map's rows as bounded
    here, collected from the store (run.key_values); for a key the batch fixes too, only where the driver
    reads them from files far smaller than this map's (heuristics.narrows_key). Where a statement of the
    refresh writes that map, a later source's statements read it with the earlier sources' increments, at
    keys the store does not hold yet: those keys too, where batches fix them (written_keys), else the key
    is not bounded."""
    layout, store = w.entry.layout, w.entry.store

    def narrowed(name: str, others: Condition, through: dict) -> bool:
        own = through.get(name)
        return own is not None and heuristics.narrows_key(
            run.candidate_bytes(store, others), run.candidate_bytes(store, layout.rows_of(name, own)))

    def bounded(through=None):
        for table in w.changed:
            batch = run.batch(*w.batch_key(table), w.entry.source_columns[table])
            if not run.batch_rows[batch]:
                continue  # no statement of this source runs
            ranges, values = run.batch_ranges[batch], run.batch_values(batch) if listed else {}
            for name, fixed, links in references[table]:
                terms = [KeyIn(key, values[column]) if column in values else KeyRange(key, *ranges[column])
                         for key, column in fixed if column in ranges]
                for key, other, other_key in links if through is not None else ():
                    if through.get(other) is None:
                        continue
                    others = layout.rows_of(other, through[other])
                    narrowing = any(key == k for k, _ in fixed)
                    if narrowing and not narrowed(name, others, through):
                        continue
                    keys = run.key_values(store, layout.map(other).map_id, other_key, others,
                                          on_driver_only=narrowing)
                    new = written_keys(w, run, other, other_key)
                    reached = None if keys is None or new is None else {*keys, *new}
                    if reached is not None and len(reached) <= heuristics.LISTED_KEY_VALUES_MAX:
                        terms.append(key_values(key, reached))
                yield name, terms

    return map_conditions(bounded(map_conditions(bounded()) if listed else None))
