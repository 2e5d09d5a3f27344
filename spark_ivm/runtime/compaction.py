"""Which files of a map store a compaction rewrites, and a compaction the driver computes itself.

Every `spark.ivm.compactEvery`-th refresh rewrites the store's small files, and the files appended since the
last compaction however large (at SF 10 a refresh's batch appends hundreds of thousands of rows), with its
own staged rows, one row per map and key (mapstore.compact_rows_sql), and every few compactions the whole
store (heuristics.compacts_whole_store). Spark's compaction is a job, a shuffle and a write of its own:
seconds at SF 10, where the refresh itself takes a fraction of one. The files of a few refreshes hold about
as many rows as those refreshes wrote, so where the driver holds the staged rows (see local_sql) and can
read those files (driver_files), it sums the rows in DuckDB and writes them itself, in key order and in
files of STORE_FILE_ROWS rows, in the same commit Spark's compaction would make; a compaction of the whole
store too, where the store is as small. The files it writes carry Delta's minimum and maximum only for
integer and date columns (driver_files.write_file): a read by decimal or string keys cannot skip them.
"""

from __future__ import annotations

import sys

from spark_ivm import heuristics
from spark_ivm.runtime import driver_files
from spark_ivm.runtime.mapstore import StoreColumns, compacted_sql


def compacts_early(logs, store, staged_rows: int, appended: set[str]) -> bool:
    """Whether a refresh compacts the store before its turn: the files a compaction rewrites (`appended`, the
    paths appended since the last one, and the small ones) and its staged rows fit what the driver compacts
    (DRIVER_WRITE_ROWS), and with another refresh's as many rows they would not. The rows of keys changed
    again and again pile up in the appended files until a compaction; with large batches they would outgrow
    the driver's compaction, and the driver's read of the store at a batch's keys (DRIVER_STORE_ROWS),
    before the refresh whose turn it is."""
    rows = logs.small_file_rows(store, heuristics.STORE_FILE_ROWS, appended) if appended else None
    return rows is not None and rows + staged_rows <= heuristics.DRIVER_WRITE_ROWS < rows + 2 * staged_rows


def compacted_files(logs, store, compaction: int | None, appended: set[str]):
    """The store's files that its compaction number `compaction` (None: one before its turn) rewrites: its
    small files and those the refreshes since the last compaction appended (`appended`, their paths),
    however large (a FileSubset, see heuristics.compacts_whole_store); None for all of them."""
    files = logs.small_files(store, heuristics.STORE_FILE_ROWS, appended)
    if files is None or heuristics.compacts_whole_store(files.rows, files.table_rows, compaction):
        return None
    return files


def compact_on_driver(logs, run, store, store_columns: StoreColumns, staged: str, files) -> tuple | None:
    """The compaction of the store (a TableSnapshot) with the staged rows, computed by the driver: (the
    compacted rows in key order and the store's types, the FileSubset they replace). `files`: the small files
    the compaction rewrites (compacted_files), None for all of them. None where Spark compacts: the driver
    does not hold the staged rows, cannot read a file or compute the rows, or the files and the staged rows
    hold more than DRIVER_WRITE_ROWS rows."""
    held = run.driver.held.get(staged)
    if held is None or not (driver_files.readable(store) and driver_files.writable(store)):
        return None
    with run.timed("write"):
        if files is None:
            files = logs.small_files(store, sys.maxsize)  # the whole store: every file
        if files is None or files.rows + held.num_rows > heuristics.DRIVER_WRITE_ROWS:
            return None
        columns = [c for c, _ in store.columns]
        old = driver_files.store_rows(store, files.actions, None, columns, heuristics.DRIVER_WRITE_ROWS)
        if old is None or not set(columns) <= set(held.column_names):
            return None
        # Both in the table's column order: the union that sums them is by position.
        run.driver.hold(f"{staged}_compacted", old)
        run.driver.hold(f"{staged}_ordered", held.select(columns))
        order = ", ".join(["map_id"] + store_columns.keys)
        sql = compacted_sql(f"{staged}_compacted", f"{staged}_ordered", store_columns)
        computed = run.driver.compute(f"{sql} ORDER BY {order}")
        rows = driver_files.as_written(store, computed[0]) if computed is not None else None
        return (rows, files) if rows is not None else None
