"""Rows the driver already holds, written as a Delta data file without a Spark job; the values of a few
columns in a table's changed files, and the rows of a store a refresh reads, read by the driver without one.

A refresh whose increments are few collects them to the driver (for views that keep their maps as
literals). Writing them through Spark then costs a job of one task for a handful of rows; writing the
Parquet file here (pyarrow) and committing it as an AddFile in the same transaction gives the table the
same rows. The file's statistics hold the row count, the NULL counts, and the lowest and highest values of
integer and date columns: Delta and the store's reads skip files by those; a column without them is never
skipped by.

A refresh reads a small batch here (see run.RefreshRun._consolidate_on_driver): the files that hold its
changes (DeltaLogs.change_files), usually a few small ones, read with pyarrow and netted, cost a few
milliseconds where planning Spark's read of the change data feed and a job per scan cost tenths of a
second. Of a batch Spark reads, the key values that bound the rows of the store a refresh copies (see
run.batch_values) are read from those files here, with no job.

The copy itself is read here too where the store's files that can hold its rows are few (see
run.RefreshRun.read_store_once): pyarrow filters them by the copy's condition (key_conditions), where
Spark would run a job to choose the files and one to filter them.

Only where the result is the same as Delta's own write: a table on the local file system, not
partitioned, without column mapping, constraints, generated or identity columns, or a writer feature
other than those listed; columns of types written here exactly. Otherwise the caller writes with Spark.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import time
import uuid
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from spark_ivm.runtime.deletion_vectors import UnreadableVector, deleted_rows
from spark_ivm.runtime.sources import CHANGE_SIGNS

# The writer features of a table these files may be added to: none of them asks anything of an AddFile.
_WRITER_FEATURES = {"appendOnly", "invariants", "deletionVectors", "changeDataFeed"}
_INTEGERS = {"tinyint": pa.int8(), "smallint": pa.int16(), "int": pa.int32(), "bigint": pa.int64()}
_DECODED_ROWS = 1 << 16  # rows of a row group decoded at a time where a few of its rows are read
_OTHERS = {"boolean": pa.bool_(), "string": pa.string(), "binary": pa.binary(), "double": pa.float64(),
           "float": pa.float32(), "date": pa.date32()}


def arrow_type(type_sql: str) -> pa.DataType | None:
    """The Arrow type Spark reads back as the Spark SQL type; None for a type not written here."""
    if type_sql in _INTEGERS:
        return _INTEGERS[type_sql]
    if type_sql in _OTHERS:
        return _OTHERS[type_sql]
    decimal_type = re.fullmatch(r"decimal\((\d+),(\d+)\)", type_sql)
    return pa.decimal128(int(decimal_type[1]), int(decimal_type[2])) if decimal_type else None


def local_folder(location: str) -> str | None:
    """The table's folder on this machine's file system; None for any other file system."""
    url = urlparse(location)
    return unquote(url.path) if url.scheme in ("file", "") and url.path else None


def writable(snapshot) -> bool:
    """Whether a file written here is what Delta would write to the table (see the module's docstring)."""
    _, jsnapshot, _ = snapshot.handle
    protocol = json.loads(jsnapshot.protocol().json())["protocol"]
    metadata = json.loads(jsnapshot.metadata().json())["metaData"]
    configuration = metadata.get("configuration") or {}
    fields = json.loads(metadata["schemaString"])["fields"]
    return (readable(snapshot)
            and set(protocol.get("writerFeatures") or ()) <= _WRITER_FEATURES
            and protocol.get("minWriterVersion", 0) in (2, 3, 4, 7)
            and not any(k.startswith("delta.constraints.") for k in configuration)
            and all(f.get("nullable", True) and not f.get("metadata") for f in fields)
            and all(arrow_type(t) is not None for _, t in snapshot.columns))


def table_schema(snapshot) -> pa.Schema:
    """The Arrow schema of the table's columns, as written here."""
    return pa.schema([pa.field(c, arrow_type(t)) for c, t in snapshot.columns])


def rows_table(snapshot, rows: list[tuple]) -> pa.Table:
    """Rows (tuples in the table's column order and types) as an Arrow table of its schema."""
    schema = table_schema(snapshot)
    columns = [list(column) for column in zip(*rows)] if rows else [[] for _ in schema]
    return pa.table([pa.array(values, type=f.type) for values, f in zip(columns, schema)], schema=schema)


def as_written(snapshot, rows: pa.Table) -> pa.Table | None:
    """The rows of an Arrow table as the table's columns (found by name) in its types; None where a column is
    missing or a value would change in the cast. Only casts between integers and decimals are made here, and
    Arrow makes them only where no value changes, so they agree with Spark's CAST; any other difference of
    type is left to Spark's."""
    schema = table_schema(snapshot)
    columns = []
    for field in schema:
        if field.name not in rows.column_names:
            return None
        column = rows.column(field.name)
        if column.type != field.type:
            if not (_exact_number(column.type) and _exact_number(field.type)):
                return None
            try:
                column = column.cast(field.type)  # a safe cast: it raises where a value would change
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
        columns.append(column)
    return pa.table(columns, schema=schema)


def _exact_number(arrow: pa.DataType) -> bool:
    return pa.types.is_integer(arrow) or pa.types.is_decimal(arrow)


def write_file(snapshot, rows: pa.Table) -> str:
    """Write the rows (an Arrow table of the table's schema, see as_written and rows_table) as one Parquet file
    in the table's folder; the AddFile action of it, in Delta's log format (JSON)."""
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    path = os.path.join(local_folder(snapshot.location), name)
    pq.write_table(rows, path, compression="snappy")
    nulls = {c: rows.column(c).null_count for c, _ in snapshot.columns}
    low, high = {}, {}
    for c, t in snapshot.columns:
        if (t in _INTEGERS or t == "date") and rows.column(c).null_count < rows.num_rows:
            bounds = pc.min_max(rows.column(c))
            low[c], high[c] = _stat(bounds["min"].as_py()), _stat(bounds["max"].as_py())
    stats = {"numRecords": rows.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls,
             "tightBounds": True}
    add = {"path": name, "partitionValues": {}, "size": os.path.getsize(path),
           "modificationTime": int(time.time() * 1000), "dataChange": True,
           "stats": json.dumps(stats, separators=(",", ":"))}
    return json.dumps({"add": add})


def _stat(value):
    return value.isoformat() if isinstance(value, datetime.date) else value


def readable(snapshot) -> bool:
    """Whether the table's files hold its columns under their own names, on this machine's file system."""
    return local_folder(snapshot.location) is not None and plain_layout(snapshot.handle[1])


def plain_layout(jsnapshot) -> bool:
    """Whether the files of a JVM snapshot of a table hold its columns under their own names: not
    partitioned, no column mapping."""
    metadata = json.loads(jsnapshot.metadata().json())["metaData"]
    return (not metadata.get("partitionColumns")
            and (metadata.get("configuration") or {}).get("delta.columnMapping.mode", "none") == "none")


def column_values(snapshot, files, columns: list[str]) -> dict[str, set] | None:
    """The distinct non-NULL values of `columns` in the table's change files (DeltaLogs.change_files): of
    every row of a change data file or of a file added or removed whole, of the changed rows of a file
    whose deletion vector changed. None if one of them is not read here."""
    found: dict[str, set] = {c: set() for c in columns}
    for file in {(f.path, f.kind, repr(f.before), repr(f.after)): f for f in files}.values():
        changes = _changes(snapshot, file, columns)
        if changes is None:
            return None
        for c in columns:
            found[c].update(v for v in changes[0].column(c).unique().to_pylist() if v is not None)
    return found


def change_rows(snapshot, files, columns: list[tuple[str, str]], multiplicity: str) -> pa.Table | None:
    """The changes the table's change files (DeltaLogs.change_files) hold, consolidated as the change data
    feed's rows would be: one row per distinct tuple of `columns` ((name, Spark SQL type)) with its net
    multiplicity (column `multiplicity`, int64), rows whose changes cancel left out. None where a column's
    type is not read here exactly or a file is not on this machine or lacks a column."""
    types = [arrow_type(t) for _, t in columns]
    if not columns or any(t is None for t in types):
        return None
    names = [c for c, _ in columns]
    schema = pa.schema([pa.field(c, t) for c, t in zip(names, types)])
    parts = []
    for file in files:
        changes = _changes(snapshot, file, names)
        if changes is None:
            return None
        try:
            rows = changes[0].select(names).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        parts.append(rows.append_column(multiplicity, changes[1]))
    if not parts:
        return schema.append(pa.field(multiplicity, pa.int64())).empty_table()
    netted = pa.concat_tables(parts).group_by(names, use_threads=False).aggregate([(multiplicity, "sum")])
    total = netted.column(f"{multiplicity}_sum")
    return pa.table([netted.column(c) for c in names] + [total], names=names + [multiplicity]).filter(
        pc.not_equal(total, 0))


def store_rows(snapshot, files: list[dict], condition, columns: list[str], max_rows: int) -> pa.Table | None:
    """The rows of the table's data files `files` (AddFile actions, as the log lists them) that the condition
    (a key_conditions.Condition; None: every row) holds for, their `columns` typed as Spark reads them. A column a file
    lacks (written before the column was added) reads as NULL, as in Delta. None where there are more than
    max_rows (the read stops there), a file is not on this machine, a type is not read here exactly, or a
    value of the condition does not convert to its column's type."""
    types = {c: arrow_type(t) for c, t in snapshot.columns}
    if any(types[c] is None for c in columns):
        return None
    expression = condition.arrow(types) if condition is not None else pc.scalar(True)
    if expression is None:
        return None
    schema = pa.schema([pa.field(c, t) for c, t in types.items() if t is not None])
    plain, marked = [], []
    for file in files:
        local = _local(snapshot, file["path"])
        if local is None:
            return None
        (marked if file.get("deletionVector") else plain).append((local, file))

    def parts():
        if plain:
            for batch in ds.dataset([local for local, _ in plain], schema=schema, format="parquet").to_batches(
                    columns=columns, filter=expression):
                if batch.num_rows:
                    yield pa.Table.from_batches([batch])
        for local, file in marked:
            yield _live_rows(snapshot, local, file, schema, expression, columns)

    found, kept = [], 0
    try:
        for part in parts():
            if part is None:
                return None
            kept += part.num_rows
            if kept > max_rows:
                return None
            found.append(part)
    except (OSError, UnreadableVector, pa.ArrowException):
        return None
    return pa.concat_tables(found) if found else pa.schema([schema.field(c) for c in columns]).empty_table()


def _live_rows(snapshot, local: str, file: dict, schema: pa.Schema, expression, columns: list[str]) -> pa.Table | None:
    """The rows of a file with a deletion vector that the filter holds for: the rows it marks are dropped by
    their position, before filtering. None where the vector marks rows the file does not have."""
    rows = ds.dataset([local], schema=schema, format="parquet").to_table()
    deleted = _indexes(deleted_rows(local_folder(snapshot.location), file["deletionVector"]))
    if len(deleted) and deleted[-1] >= rows.num_rows:
        return None
    live = np.ones(rows.num_rows, dtype=bool)
    live[deleted] = False
    return rows.filter(pa.array(live)).filter(expression).select(columns)


def _changes(snapshot, file, columns: list[str]) -> tuple[pa.Table, pa.Array] | None:
    """The changed rows of one change file (their `columns`) and the sign of each (int64: +1 inserted,
    -1 deleted); None where the file is not read here."""
    local = _local(snapshot, file.path)
    if local is None:
        return None
    if file.kind == "vectors":
        return _vector_changes(snapshot, local, file, columns)
    table = _read(local, columns + (["_change_type"] if file.kind == "cdc" else []))
    if table is None:
        return None
    if file.kind == "cdc":
        kinds = pa.array(list(CHANGE_SIGNS))
        signs = pa.array(list(CHANGE_SIGNS.values()), pa.int64())
        return table, pc.fill_null(pc.take(signs, pc.index_in(table.column("_change_type"), value_set=kinds)), 0)
    return table, pa.repeat(pa.scalar(1 if file.kind == "add" else -1, pa.int64()), table.num_rows)


def _vector_changes(snapshot, local: str, file, columns: list[str]) -> tuple[pa.Table, pa.Array] | None:
    """The rows of a data file live after the commit and not before (+1), or before and not after (-1),
    by its deletion vectors. Where the file stays in the table, only those rows are read (_rows_at)."""
    folder = local_folder(snapshot.location)
    try:
        before = None if file.before is None else deleted_rows(folder, file.before)
        after = None if file.after is None else deleted_rows(folder, file.after)
    except UnreadableVector:
        return None
    if before is None or after is None:  # the file added or removed with a vector: its other rows change
        table, marked = _read(local, columns), _indexes(before if after is None else after)
        if table is None or (len(marked) and marked[-1] >= table.num_rows):
            return None
        live = np.ones(table.num_rows, dtype=bool)
        live[marked] = False
        table = table.filter(pa.array(live))
        return table, pa.repeat(pa.scalar(-1 if after is None else 1, pa.int64()), table.num_rows)
    deleted, restored = _indexes(after - before), _indexes(before - after)
    rows = np.concatenate([deleted, restored])
    signs = np.concatenate([np.full(len(deleted), -1, np.int64), np.full(len(restored), 1, np.int64)])
    order = np.argsort(rows, kind="stable")
    rows, signs = rows[order], signs[order]
    try:
        parquet = pq.ParquetFile(local)
        if len(rows) and rows[-1] >= parquet.metadata.num_rows:
            return None
        batches = list(_rows_at(parquet, rows, columns))
        table = (pa.Table.from_batches(batches) if batches else parquet.schema_arrow.empty_table()).select(columns)
    except (OSError, KeyError, pa.ArrowException):
        return None
    return table, pa.array(signs)


def _rows_at(parquet: pq.ParquetFile, rows: np.ndarray, columns: list[str]):
    """The rows of the file at the positions `rows` (ascending), as record batches in that order. Only the
    row groups that hold them are decoded, each up to its last wanted row: a DELETE of old rows (the
    smallest keys, at the start of files written in key order) decodes a few pages of a large file."""
    counts = [parquet.metadata.row_group(g).num_rows for g in range(parquet.metadata.num_row_groups)]
    starts = np.cumsum([0] + counts)
    groups = np.searchsorted(starts, rows, side="right") - 1
    for g in np.unique(groups):
        wanted = rows[groups == g] - starts[g]
        offset = 0
        for batch in parquet.iter_batches(_DECODED_ROWS, row_groups=[int(g)], columns=columns):
            inside = wanted[(wanted >= offset) & (wanted < offset + batch.num_rows)]
            if len(inside):
                yield batch.take(pa.array(inside - offset))
            offset += batch.num_rows
            if offset > wanted[-1]:
                break


def _indexes(vector) -> np.ndarray:
    return np.asarray(vector.to_array(), dtype=np.int64)


def _local(snapshot, path: str) -> str | None:
    """A file of the table (its path as the log gives it) on this machine; None for another file system."""
    url = urlparse(path)
    if url.scheme and url.scheme != "file":
        return None
    return unquote(url.path) if url.scheme else os.path.join(local_folder(snapshot.location), unquote(path))


def _read(local: str, columns: list[str]) -> pa.Table | None:
    """The columns of one of the table's files; None if it is gone or lacks one."""
    try:
        return pq.read_table(local, columns=columns)
    except (OSError, KeyError, pa.ArrowException):
        return None  # e.g. a file cleaned up since, or a column by another name: Spark says which
