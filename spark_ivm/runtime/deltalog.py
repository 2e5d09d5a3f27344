"""A Delta table's log, read on the driver: its latest version, id, columns and properties, what its commits
hold; and (delta_writes.py) an append that commits only if nothing was added to the table since the version
it was computed from. None of it runs a Spark job.

Delta keeps all of this in the table's `_delta_log` folder: a JSON file per commit (its actions: files added
and removed with their statistics, the commit's information with its user metadata) and, after each
commit, a checksum file with the table's metadata and size. Spark SQL's ways of asking run Spark jobs:
DESCRIBE HISTORY one; DESCRIBE DETAIL, a read `VERSION AS OF` an older version and Delta's idempotent
writes (txnAppId) make Delta rebuild the table's state from its log (a few more). Reading a file or two
on the driver takes milliseconds.

The reads go through the JVM's DeltaLog, so they see the table as Delta does (any file system the session
reaches, Delta's own parsing, its cache of the latest snapshot). Spark Connect has no JVM on the client:
there `DeltaLogs.available` is False and the runtime asks SQL instead.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from decimal import Decimal

from spark_ivm import heuristics
from spark_ivm.errors import IVMError
from spark_ivm.runtime import driver_files
# ConcurrentCommitError and Written: callers import them from here.
from spark_ivm.runtime.delta_writes import ConcurrentCommitError, DeltaWrites, Written  # noqa: F401

log = logging.getLogger("spark_ivm")

# The session catalog's errors for a table or database that does not exist (as PySpark names them, and as
# the JVM does).
_MISSING = ("[TABLE_OR_VIEW_NOT_FOUND]", "[SCHEMA_NOT_FOUND]", "NoSuchTableException", "NoSuchDatabaseException")
# The tables whose file lists a session keeps (DeltaLogs._file_list): a few views' stores and sources.
_LISTINGS_KEPT = 32
# A kept file list is brought forward by at most this many commits; more are listed anew.
_LISTING_FORWARD_COMMITS = 64
# Reader features under which a data file without a deletion vector holds its rows as plain Parquet.
_PLAIN_READER_FEATURES = frozenset({"deletionVectors", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"})


class NotDeltaError(IVMError):
    """The table exists but is not a Delta table."""


@dataclass(frozen=True)
class ChangeFile:
    """A data file holding changes of a table: kind `cdc` (a change data file: each row's `_change_type`
    says its change), `add` (each row inserted), `remove` (each row deleted) or `vectors` (a file whose
    deletion vector a commit sets or changes: its rows live after the commit and not before are inserted,
    those live before and not after deleted); size: the bytes of the changed rows in the file."""
    path: str  # as the log gives it: relative to the table's folder, or an absolute URI
    kind: str
    size: int
    # Of kind `vectors`: the file's deletion vector before and after the commit ({} for none; None where the
    # file is not in the table then).
    before: dict | None = None
    after: dict | None = None


@dataclass(frozen=True)
class TableSnapshot:
    """A Delta table as of its latest version when it was looked up."""
    table: str  # as named when looked up
    version: int
    table_id: str  # Delta's table id: a table dropped and created again under the same name has a new one
    columns: tuple[tuple[str, str], ...]  # (name, Spark SQL type) in schema order
    properties: dict[str, str]
    size_bytes: int | None  # of its current files, from the checksum (None: not written)
    location: str
    handle: object = field(default=None, compare=False, repr=False)  # the JVM's (DeltaLog, Snapshot, table)
    not_null: frozenset[str] = frozenset()  # the columns declared NOT NULL

    @property
    def change_feed(self) -> bool:
        return self.properties.get("delta.enableChangeDataFeed", "false").lower() == "true"


@dataclass(frozen=True)
class Changes:
    """What the commits of a range of versions of a table changed, as their log says."""
    data_changed: bool  # any file added or removed with a change of data (not a compaction, not metadata)
    rows: int | None  # the change data feed has at most this many rows (None: not known)
    # column -> (lowest, highest) of the values of every changed row in the column, from the files'
    # statistics; (None, None) where the changed rows hold only NULLs. Only columns every touched file has
    # statistics for.
    ranges: dict[str, tuple]
    # Whether every file the commits touched holds only changed rows (added or removed whole), so that the
    # ranges are of the changed rows themselves; rows deleted from a file through a deletion vector only
    # lie within that file's range.
    tight: bool = True
    # The bytes those rows take in the table's data files, at each file's bytes per row (None: not known).
    bytes: int | None = None


@dataclass(frozen=True)
class FileSubset:
    """Some of a table's files, as its checksum lists them: to read their rows and to replace them."""
    files: list  # the JVM's AddFile of each
    frame: object = field(repr=False)  # a DataFrame of their rows
    rows: int  # rows in them (those their statistics count)
    table_rows: int  # rows in all the table's files
    actions: list = field(repr=False, default_factory=list)  # each AddFile as the log lists it (a dict)


class DeltaLogs(DeltaWrites):
    """The Delta logs of tables of one Spark session (its writes: delta_writes.py)."""

    def __init__(self, spark):
        self.spark = spark
        self._js = getattr(spark, "_jsparkSession", None)
        # A commit's file never changes: its actions by (table id, version), the latest ones read.
        self._actions: OrderedDict[tuple[str, int], list[dict]] = OrderedDict()
        # The files of the latest version of each table listed: table id -> (version, files) (see _file_list).
        self._listings: OrderedDict[str, tuple[int, list]] = OrderedDict()
        self._lock = threading.Lock()
        self._statics: dict[str, object] = {}
        self._json_mapper = None

    @property
    def available(self) -> bool:
        return self._js is not None

    def as_python(self, value):
        """A JVM object (a Scala map or sequence, Delta's actions) as Python values, through its JSON: one
        call, where iterating it from Python takes a call per element and an exception at its end."""
        if self._json_mapper is None:
            self._json_mapper = self._static("org.apache.spark.sql.delta.util.JsonUtils.mapper")()
        return json.loads(self._json_mapper.writeValueAsString(value))

    def _static(self, path: str):
        """The static member `package.Class.member` of a JVM class (a method, or a class nested in it),
        looked up once: py4j asks the JVM about each part of a dotted name at every use, a round trip each."""
        member = self._statics.get(path)
        if member is None:
            name, _, attribute = path.rpartition(".")
            member = self._statics[path] = getattr(self._class(name), attribute)
        return member

    def _option(self, value):
        """Scala's Option of a value: Some(value), or None for None (see _static)."""
        return self._static("scala.Option.apply")(value)

    def _scala(self, java_list):
        """A Java list (or a Python list, which py4j passes as one) as a Scala collection."""
        return self._static("scala.jdk.javaapi.CollectionConverters.asScala")(java_list)

    def _class(self, name: str):
        """A JVM class by its full name, without a round trip (see _static)."""
        from py4j.java_gateway import JavaClass  # classic Spark only: Spark Connect's client has no py4j

        return JavaClass(name, self.spark._jvm._gateway_client)

    # -- snapshots -----------------------------------------------------------------------------------------
    def catalog_tables(self, tables) -> dict[str, object]:
        """The session catalog's metadata of each table, None for a name no table has (nor a view).

        One metastore call per database: asked table by table, a refresh of a view over six tables spent
        most of a refresh with nothing to apply waiting for the metastore."""
        js = self._js
        catalog = js.sessionState().catalog()
        parse = js.sessionState().sqlParser().parseTableIdentifier
        names = {t: catalog.qualifyIdentifier(parse(t)) for t in tables}
        databases: dict[str, list[str]] = {}
        for table, name in names.items():
            databases.setdefault(name.database().get(), []).append(table)
        found: dict[str, object] = dict.fromkeys(names)
        for tables_of in databases.values():
            wanted = self._class("java.util.ArrayList")([names[t] for t in tables_of])
            try:
                metas = catalog.getTablesByName(self._scala(wanted).toSeq())
            except Exception as exc:
                if any(name in str(exc) for name in _MISSING):
                    continue  # no such database
                raise
            by_name = {str(meta.identifier().table()).lower(): meta for meta in (metas.apply(i) for i in range(metas.size()))}
            for table in tables_of:
                found[table] = by_name.get(str(names[table].table()).lower())
        return found

    def snapshot(self, table: str, meta=None) -> TableSnapshot | None:
        """The table's latest snapshot; None when no table has the name. Raises NotDeltaError for another
        kind of table or a view. meta: the table's catalog metadata, when looked up (see catalog_tables)."""
        js = self._js
        if meta is None:
            meta = self.catalog_tables([table])[table]
            if meta is None:
                return None
        provider = meta.provider().get() if meta.provider().isDefined() else meta.tableType().name().lower()
        if provider.lower() != "delta":
            raise NotDeltaError(f"{table} is not a Delta table (format {provider})")
        delta_log = self._static("org.apache.spark.sql.delta.DeltaLog.forTable")(js, meta)
        location = str(meta.location().toString())
        snapshot = self._latest(delta_log, meta, location)
        if snapshot.version() < 0:
            return None
        metadata = snapshot.metadata()
        checksum = snapshot.checksumOpt()
        schema = _schema(snapshot.schema().json())
        return TableSnapshot(
            table=table,
            version=int(snapshot.version()),
            table_id=str(metadata.id()),
            columns=_columns(schema),
            properties=self.as_python(metadata.configuration()),
            size_bytes=int(checksum.get().tableSizeBytes()) if checksum.isDefined() else None,
            location=location,
            handle=(delta_log, snapshot, meta),
            not_null=frozenset(f.name for f in schema.fields if not f.nullable),
        )

    def _latest(self, delta_log, meta, location: str):
        """The table's latest JVM snapshot.

        Delta's update lists the table's whole log folder where it is on a local file system (a file status
        per commit file kept, which grows with the table's history), though a refresh mostly finds no new
        commit. So where the folder is on this machine, the snapshot Delta holds is taken as it is when the
        log shows nothing after it: no commit file of the next version, the commit file of its version the
        one it read (same modification time: not a table dropped and created again at the same place), and
        no commit staged by a commit coordinator."""
        held = delta_log.unsafeVolatileSnapshot()
        table_folder = driver_files.local_folder(location)
        version = held.version()
        if table_folder is not None and version >= 0:
            folder = os.path.join(table_folder, "_delta_log")
            try:
                read = os.stat(os.path.join(folder, f"{version:020d}.json")).st_mtime_ns // 1_000_000
                staged = os.path.join(folder, "_staged_commits")
                if (not os.path.exists(os.path.join(folder, f"{version + 1:020d}.json"))
                        and not (os.path.isdir(staged) and os.listdir(staged))
                        and read == held.logSegment().lastCommitFileModificationTimestamp()):
                    return held
            except OSError:  # no commit file of the version: Delta's update says what the table is now
                pass
        return delta_log.update(False, self._option(None), self._option(meta))

    # -- commits -------------------------------------------------------------------------------------------
    def actions(self, snapshot: TableSnapshot, version: int) -> list[dict]:
        """The actions of one commit of the table (each a dict with one key: add, remove, cdc, commitInfo, …).
        Raises an error of the JVM if the commit's file is gone (e.g. cleaned up by log retention)."""
        key = (snapshot.table_id, version)
        with self._lock:
            if key in self._actions:
                self._actions.move_to_end(key)
                return self._actions[key]
        delta_log = snapshot.handle[0]
        path = self._class("org.apache.hadoop.fs.Path")(delta_log.logPath(), f"{version:020d}.json")
        lines = delta_log.store().read(path, delta_log.newDeltaHadoopConf()).iterator()
        actions = []
        while lines.hasNext():
            line = lines.next()
            if line.strip():
                actions.append(json.loads(line, parse_float=Decimal))
        with self._lock:
            self._actions[key] = actions
            if len(self._actions) > heuristics.CACHED_COMMITS:
                self._actions.popitem(last=False)
        return actions

    def user_metadata(self, snapshot: TableSnapshot, version: int | None = None) -> str | None:
        """The user metadata of a commit (by default the snapshot's)."""
        for action in self.actions(snapshot, snapshot.version if version is None else version):
            if "commitInfo" in action:
                return action["commitInfo"].get("userMetadata")
        return None

    def changes(self, snapshot: TableSnapshot, start: int, end: int, columns=()) -> Changes:
        """What versions start..end of the table changed, with the ranges of `columns` (see Changes)."""
        changed, rows, size, tight = False, 0, 0, True
        ranges: dict[str, list | None] = {c: [None, None] for c in columns}
        for version in range(start, end + 1):
            for added, removed in _files_by_path(self.actions(snapshot, version)).values():
                if not any(a.get("dataChange", True) for a in added + removed):
                    continue
                changed = True
                tight = tight and not (added and removed)
                count = _changed_rows(added, removed)
                rows = None if rows is None or count is None else rows + count
                per_row = _bytes_per_row(added + removed)
                size = None if size is None or count is None or per_row is None else size + round(count * per_row)
                # A file removed and added back holds the same rows with more of them deleted: the added
                # one's statistics are of all of them. A file removed whole has its statistics where it was
                # added (a remove action carries only its row count).
                for action in added or [self._as_added(snapshot, version, r) for r in removed]:
                    _widen(ranges, action)
        return Changes(changed, rows, {c: tuple(r) for c, r in ranges.items() if r is not None}, tight, size)

    def change_files(self, snapshot: TableSnapshot, start: int, end: int) -> list[ChangeFile] | None:
        """The data files that hold the changes of versions start..end as the change data feed reads them: a
        commit's change data files where it has some, else the files it added (each row inserted) and
        removed (each row deleted), and those whose deletion vector it changed (a DELETE on a table with
        deletion vectors: the rows the new vector adds are deleted). None where a commit changes the
        table's metadata (its columns or whether it records changes)."""
        files: list[ChangeFile] = []
        for version in range(start, end + 1):
            actions = self.actions(snapshot, version)
            if any("metaData" in a for a in actions):
                return None
            cdc = [a["cdc"] for a in actions if "cdc" in a]
            if cdc:
                files += [ChangeFile(a["path"], "cdc", int(a.get("size", 0))) for a in cdc]
                continue
            for path, (added, removed) in _files_by_path(actions).items():
                added = [a for a in added if a.get("dataChange", True)]
                removed = [a for a in removed if a.get("dataChange", True)]
                if len(added) > 1 or len(removed) > 1:
                    return None
                if any(a.get("deletionVector") for a in added + removed) or (added and removed):
                    files.append(_vectors_change(path, added, removed))
                else:
                    files += [ChangeFile(path, kind, int(a.get("size", 0)))
                              for kind, file_actions in (("add", added), ("remove", removed)) for a in file_actions]
        return files

    def _as_added(self, snapshot: TableSnapshot, version: int, removed: dict) -> dict:
        """The add action of a removed file, found in the commits before `version` (up to
        heuristics.FILE_LOOKBACK_VERSIONS of them), else the remove action itself."""
        stats = _stats(removed)
        if stats is not None and "minValues" in stats:
            return removed
        for earlier in range(version - 1, max(-1, version - 1 - heuristics.FILE_LOOKBACK_VERSIONS), -1):
            for action in self.actions(snapshot, earlier):
                if "add" in action and action["add"]["path"] == removed["path"]:
                    return action["add"]
        return removed

    # -- reads --------------------------------------------------------------------------------------------
    def read_files(self, snapshot: TableSnapshot, keep=None):
        """A DataFrame of the table's rows as of the snapshot, from the files its checksum lists, of those
        only the files `keep(statistics)` holds for (statistics: the file's `stats` as a dict, None when it
        has none); None when the checksum does not list the files.

        Reading the table by name instead makes Delta rebuild its state of a new version first (a few Spark
        jobs), to learn the files this snapshot's checksum already lists (for tables of at most
        spark.databricks.delta.allFilesInCrc.thresholdNumFiles files when they were written)."""
        files = self._file_list(snapshot)
        if files is None:
            return None
        kept = None if keep is None else [f for f, stats in files if keep(stats)]
        if kept is None or len(kept) == len(files):
            listed = self._listed_files(snapshot)
            if listed is not None:
                return self._frame(snapshot, listed.toList())
            kept = [f for f, _ in files]
        return self._frame(snapshot, self._add_files(kept))

    def version_frame(self, snapshot: TableSnapshot, version: int):
        """A DataFrame of the table's rows as of `version` (at most the snapshot's), from the files that
        version's checksum lists; None when it lists none, or the version's log is gone.

        Reading the version by name (or `versionAsOf`) makes Delta choose the files anew for every query
        that reads it, a Spark job each ("Filtering files for query"); a frame over the listed files is read
        as it is, deletion vectors applied."""
        delta_log, at_version, meta = snapshot.handle
        if version != snapshot.version:
            try:
                at_version = delta_log.getSnapshotAt(version, self._option(None), self._option(meta), False)
            except Exception:  # the version's commits are gone (log cleanup): read the table by name
                return None
        listed = self._listed_files(snapshot, at_version)
        return None if listed is None else self._frame(snapshot, listed.toList(), at_version, plain=True)

    def listed_files(self, snapshot: TableSnapshot, keep=None) -> list[dict] | None:
        """The AddFile actions (as Python values) the snapshot's checksum lists, of those only the files
        `keep(statistics)` holds for (as read_files); None when it does not list them."""
        files = self._file_list(snapshot)
        if files is None:
            return None
        return [f for f, stats in files if keep is None or keep(stats)]

    def rows_on_driver(self, snapshot: TableSnapshot, condition, columns: list[str], max_rows: int):
        """The table's rows as of the snapshot that the condition (a key_conditions.Condition) holds for,
        their `columns`, read by the driver (driver_files.store_rows) from the files the checksum lists
        whose statistics allow such rows: no Spark job. None where the driver does not read them: the
        files are not listed or not on this machine, weigh more than heuristics.DRIVER_STORE_BYTES, or
        hold more than max_rows such rows."""
        if not driver_files.readable(snapshot):
            return None
        files = self.listed_files(snapshot, condition.could_hold)
        if files is None or sum(int(f.get("size", 0)) for f in files) > heuristics.DRIVER_STORE_BYTES:
            return None
        return driver_files.store_rows(snapshot, files, condition, columns, max_rows)

    def small_files(self, snapshot: TableSnapshot, max_rows: int, paths=frozenset()) -> FileSubset | None:
        """The files of the table's snapshot that hold fewer than max_rows rows each (or say nothing of
        their rows), or whose path is among `paths`, as the checksum lists them; None when it does not
        list them."""
        listed = self._file_list(snapshot)
        if listed is None:
            return None
        chosen = [f for f, stats in listed if _small(f, stats, max_rows, paths)]
        files = self._add_files(chosen)
        return FileSubset(files, self._frame(snapshot, files), self.small_file_rows(snapshot, max_rows, paths),
                          sum((stats or {}).get("numRecords") or 0 for _, stats in listed), chosen)

    def small_file_rows(self, snapshot: TableSnapshot, max_rows: int, paths=frozenset()) -> int | None:
        """The rows of the files small_files chooses, as their statistics count them; None when the checksum
        does not list the files."""
        listed = self._file_list(snapshot)
        if listed is None:
            return None
        return sum((stats or {}).get("numRecords") or 0 for f, stats in listed if _small(f, stats, max_rows, paths))

    def appended_files(self, snapshot: TableSnapshot, max_commits: int) -> set[str]:
        """The paths of the files that the table's latest commits appended (WRITE in mode Append), since
        the last commit of another kind (an overwrite, a compaction, the table's creation), looking at most
        max_commits commits back."""
        paths: set[str] = set()
        for version in range(snapshot.version, max(-1, snapshot.version - max_commits), -1):
            try:
                actions = self.actions(snapshot, version)
            except Exception:  # the commit's file is gone (log cleanup): no earlier append is known
                break
            info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
            if (info.get("operation"), (info.get("operationParameters") or {}).get("mode")) != ("WRITE", "Append") \
                    or any("remove" in a for a in actions):
                break
            paths.update(a["add"]["path"] for a in actions if "add" in a)
        return paths

    def _file_list(self, snapshot: TableSnapshot) -> list[tuple[dict, dict | None]] | None:
        """Each AddFile the snapshot's checksum lists, as a Python value, with its statistics (as _stats);
        None when the checksum lists none.

        Converting the checksum's list costs in proportion to the table's files, and a refresh asks for the
        files of its stores and sources several times, and commits to its stores. So the list of a table's
        latest version is kept, and brought forward by the commits after it (their actions are read anyway
        for the change data feed); listed anew where that does not account for every file removed."""
        with self._lock:
            kept = self._listings.get(snapshot.table_id)
        if kept is not None and kept[0] == snapshot.version:
            return kept[1]  # kept only where this version's checksum lists the files
        if self._listed_files(snapshot) is None:
            return None
        files = None
        if kept is not None and kept[0] < snapshot.version <= kept[0] + _LISTING_FORWARD_COMMITS:
            try:
                commits = [self.actions(snapshot, v) for v in range(kept[0] + 1, snapshot.version + 1)]
            except Exception:  # a commit's file is gone (log cleanup): list the files anew
                commits = None
            files = commits and _forwarded(kept[1], commits)
        if files is None:
            files = [(f, _stats(f)) for f in self.as_python(self._listed_files(snapshot))]
        with self._lock:
            if kept is None or kept[0] <= snapshot.version:
                self._listings[snapshot.table_id] = (snapshot.version, files)
                self._listings.move_to_end(snapshot.table_id)
                if len(self._listings) > _LISTINGS_KEPT:
                    self._listings.popitem(last=False)
        return files

    def _add_files(self, files: list[dict]) -> list:
        """The JVM's AddFile of each file (an AddFile action as a Python value): Delta parses them from the
        log's format, as it reads a commit."""
        parsed = self._static("org.apache.spark.sql.delta.actions.Action$.MODULE$")
        return [parsed.fromJson(json.dumps({"add": f})) for f in files]

    def _listed_files(self, snapshot: TableSnapshot, jsnapshot=None):
        """The AddFiles the snapshot's checksum lists (a Scala sequence); None when it lists none. jsnapshot:
        the JVM snapshot of an older version of the table, whose checksum to read instead."""
        checksum = (snapshot.handle[1] if jsnapshot is None else jsnapshot).checksumOpt()
        listed = checksum.get().allFiles() if checksum.isDefined() else self._option(None)
        return listed.get() if listed.isDefined() else None

    def _frame(self, snapshot: TableSnapshot, files, jsnapshot=None, plain: bool = False):
        """A DataFrame of the rows of the snapshot's files `files` (a Python list or a Scala list of AddFile);
        jsnapshot: the JVM snapshot of an older version of the table they are files of."""
        from pyspark.sql import DataFrame

        delta_log, latest, _ = snapshot.handle
        jsnapshot = latest if jsnapshot is None else jsnapshot
        if isinstance(files, list):
            files = self._scala(files).toList()
        jdf = delta_log.createDataFrame(jsnapshot, files, False, self._option(None))
        if plain and self._plain_parquet(jsnapshot, files):
            jdf = self._parquet_scan(jdf)
        return DataFrame(jdf, self.spark)

    def _plain_parquet(self, jsnapshot, files) -> bool:
        """Whether the files hold the table's rows as plain Parquet files do: no deletion vector, no partition
        columns, no column mapping or other reader feature that changes what a file's rows are."""
        protocol = self.as_python(jsnapshot.protocol())
        features = set(protocol.get("readerFeatures") or ())
        if protocol.get("minReaderVersion", 1) > 1 and not features <= _PLAIN_READER_FEATURES:
            return False
        return driver_files.plain_layout(jsnapshot) and not any(a.get("deletionVector") for a in self.as_python(files))

    def _parquet_scan(self, jdf):
        """The DataFrame of Delta's scan of a list of files (DeltaLog.createDataFrame), its files read by
        Spark's Parquet format instead of Delta's.

        Delta's format marks the scan for its deletion-vector rule, which builds and collects a DataFrame of
        the file list on the driver each time a query that reads the scan is planned, to find that no file
        has a deletion vector; the files, schema (with its NOT NULL columns) and statistics stay as Delta
        gave them."""
        scan = jdf.queryExecution().logical()
        if not scan.getClass().getName().endswith(".LogicalRelation"):  # no files: Delta gives empty rows
            return jdf
        relation = scan.relation()
        parquet = self._class("org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat")()
        relation = relation.copy(relation.location(), relation.partitionSchema(), relation.dataSchema(),
                                 relation.bucketSpec(), parquet, relation.options(), self._js)
        scan = scan.copy(relation, scan.output(), scan.catalogTable(), scan.isStreaming(), scan.stream())
        return self._static("org.apache.spark.sql.classic.Dataset.ofRows")(self._js, scan)


def _schema(schema_json: str):
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(schema_json))


def _columns(schema) -> tuple[tuple[str, str], ...]:
    return tuple((f.name, f.dataType.simpleString()) for f in schema.fields)


def _small(file: dict, stats: dict | None, max_rows: int, paths) -> bool:
    """Whether small_files chooses the file: fewer than max_rows rows (or no count), or among the paths."""
    rows = (stats or {}).get("numRecords")
    return rows is None or rows < max_rows or file["path"] in paths


def _forwarded(files: list[tuple[dict, dict | None]], commits: list[list[dict]]) -> list | None:
    """A table's files (AddFiles with their statistics, see DeltaLogs._file_list) after the commits (each a
    list of actions, in order); None where a commit removes a file not among them."""
    for actions in commits:
        removed = {a["remove"]["path"] for a in actions if "remove" in a}
        added = [a["add"] for a in actions if "add" in a]
        if not removed <= {f["path"] for f, _ in files}:
            return None
        replaced = removed | {a["path"] for a in added}
        # As the checksum lists a file: its add action with dataChange false, as Delta replays the log.
        files = [(f, stats) for f, stats in files if f["path"] not in replaced] + [
            ({**a, "dataChange": False}, _stats(a)) for a in added]
    return files


def _files_by_path(actions: list[dict]) -> dict[str, tuple[list[dict], list[dict]]]:
    """The commit's data file actions by file: (adds, removes). A deletion that marks rows in a deletion
    vector removes the file and adds it back with the new vector. Change data files are left out: the
    rows they hold are rows of the files the commit removes and adds (an update's old and new rows)."""
    files: dict[str, tuple[list, list]] = {}
    for action in actions:
        for kind, i in (("add", 0), ("remove", 1)):
            if kind in action:
                files.setdefault(action[kind]["path"], ([], []))[i].append(action[kind])
    return files


def _vectors_change(path: str, added: list[dict], removed: list[dict]) -> ChangeFile:
    """The change of a file one commit adds or removes with a deletion vector, or adds back with another.
    Its size is the changed rows' share of the file's bytes: the driver keeps only those rows."""
    action = (added or removed)[0]
    size, changed = int(action.get("size", 0)), _changed_rows(added, removed)
    records = next((int(s["numRecords"]) for s in map(_stats, added + removed) if s and "numRecords" in s), None)
    if changed is not None and records:
        size = size * changed // records
    return ChangeFile(path, "vectors", size,
                      (removed[0].get("deletionVector") or {}) if removed else None,
                      (added[0].get("deletionVector") or {}) if added else None)


def _stats(action: dict) -> dict | None:
    stats = action.get("stats")
    return json.loads(stats, parse_float=Decimal) if isinstance(stats, str) and stats else None


def _cardinality(action: dict) -> int:
    return int((action.get("deletionVector") or {}).get("cardinality", 0))


def _changed_rows(added: list[dict], removed: list[dict]) -> int | None:
    """How many rows of the change data feed a data file's actions in one commit make, at most."""
    if added and removed:  # rows deleted through a deletion vector
        return abs(sum(map(_cardinality, added)) - sum(map(_cardinality, removed)))
    count = 0
    for action in added + removed:
        stats = _stats(action)
        if stats is None or "numRecords" not in stats:
            return None
        count += int(stats["numRecords"]) - _cardinality(action)
    return count


def _bytes_per_row(actions: list[dict]) -> float | None:
    """The bytes a row takes in a data file: its size over its rows, from the first action that has both."""
    for action in actions:
        stats = _stats(action)
        records = int(stats.get("numRecords") or 0) if stats else 0
        if records and action.get("size") is not None:
            return int(action["size"]) / records
    return None


def _widen(ranges: dict[str, list | None], action: dict) -> None:
    """Widen each column's range by a data file's statistics; a column the file has none for loses its."""
    if not ranges:
        return
    stats = _stats(action)
    for column, bounds in list(ranges.items()):
        if bounds is None:
            continue
        if stats is None:
            ranges[column] = None
            continue
        nulls, records = stats.get("nullCount", {}).get(column), stats.get("numRecords")
        low, high = stats.get("minValues", {}).get(column), stats.get("maxValues", {}).get(column)
        if low is None or high is None:
            if nulls is not None and nulls == records:
                continue  # only NULLs in this file
            ranges[column] = None
            continue
        bounds[0] = low if bounds[0] is None else min(bounds[0], low)
        bounds[1] = high if bounds[1] is None else max(bounds[1], high)
