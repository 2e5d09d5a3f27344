"""The writes of DeltaLogs (deltalog.py): an append or overwrite in one commit of Delta's own transaction,
which refuses the commit when the table changed since the version the rows were computed from; rows the
driver holds are written as a file of their own (driver_files) and added in the same commit.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from spark_ivm import heuristics
from spark_ivm.errors import IVMError
from spark_ivm.runtime import driver_files

if TYPE_CHECKING:
    from spark_ivm.runtime.deltalog import FileSubset, TableSnapshot

log = logging.getLogger("spark_ivm")

# Delta's exceptions for a commit that lost a race with another one: the table changed in a way the
# transaction's reads depend on.
_CONFLICTS = ("ConcurrentAppendException", "ConcurrentDeleteReadException", "ConcurrentDeleteDeleteException",
              "ConcurrentTransactionException", "ConcurrentWriteException", "MetadataChangedException",
              "ProtocolChangedException")


class ConcurrentCommitError(IVMError):
    """Another commit to the table was made after the version an append was computed from."""


@dataclass(frozen=True)
class Written:
    """A committed write: its version, the rows it added and its AddFiles (a Scala list)."""
    version: int
    rows: int
    files: object


class DeltaWrites:
    """The writes of DeltaLogs, which gives them the session and its JVM helpers (_static, _option, _scala,
    _class, _frame)."""

    _write_defaults = None  # Delta's WRITE operation's default arguments, made once

    def append(self, snapshot: TableSnapshot, df, user_metadata: str, held: bool = False,
               arrow: pa.Table | None = None) -> Written:
        """Append the DataFrame's rows to the table in one commit with the user metadata, as a transaction
        that read the whole table as of `snapshot`: Delta refuses the commit (ConcurrentCommitError) if any
        commit after that version added or removed files, so two writes computed from one version never
        both land. `held`: the DataFrame's rows are on the driver (a local relation), so that, where the
        table allows it, they are written from there without a Spark job (see driver_files); `arrow`: the same
        rows as an Arrow table the driver holds, written as they are where their types allow it."""
        return self._write(snapshot, df, user_metadata, overwrite=False, held=held or arrow is not None, arrow=arrow)

    def append_rows(self, snapshot: TableSnapshot, rows: list[tuple], user_metadata: str) -> Written:
        """Append rows the driver holds (tuples in the table's column order and types; the table must be
        driver_files.writable) as one file it writes, without a Spark job. The rows do not depend on the
        table's, so the commit lands beside other appends made after `snapshot`, as INSERT does."""
        return self._write(snapshot, None, user_metadata, overwrite=False,
                           rows=driver_files.rows_table(snapshot, rows))

    def overwrite(self, snapshot: TableSnapshot, df, user_metadata: str, replacing: FileSubset | None = None
                  ) -> Written:
        """Replace the table's rows as of `snapshot` (or only those of the files `replacing`) with the
        DataFrame's, as `append` does."""
        return self._write(snapshot, df, user_metadata, overwrite=True, replacing=replacing)

    def overwrite_rows(self, snapshot: TableSnapshot, rows: pa.Table, user_metadata: str, replacing: FileSubset
                       ) -> Written:
        """Replace the rows of the files `replacing` with rows the driver holds (an Arrow table of the table's
        schema, see driver_files.as_written), written without a Spark job in files of `STORE_FILE_ROWS` rows
        each (rows in key order then keep narrow key ranges per file), as `overwrite` does."""
        return self._write(snapshot, None, user_metadata, overwrite=True, replacing=replacing, rows=rows)

    def _write(self, snapshot: TableSnapshot, df, user_metadata: str, overwrite: bool,
               replacing: FileSubset | None = None, held: bool = False, arrow: pa.Table | None = None,
               rows: pa.Table | None = None) -> Written:
        """The write of append or overwrite; `rows`: instead of the DataFrame, rows the driver writes (an Arrow
        table of the table's schema), in a commit that reads nothing of the table unless it overwrites (see
        append_rows); `arrow`: see append."""
        delta_log, jsnapshot, meta = snapshot.handle
        txn = delta_log.startTransaction(self._option(meta), self._option(jsnapshot))
        if rows is None or overwrite:
            txn.readWholeTable()
        if rows is None:
            if held and not overwrite and driver_files.writable(snapshot):
                rows = driver_files.as_written(snapshot, arrow) if arrow is not None else None
                if rows is None:
                    # A projection of a local relation: Spark computes it while planning, no job.
                    rows = driver_files.rows_table(snapshot, [tuple(r) for r in _cast(df, snapshot).collect()])
            else:
                df = _cast(df, snapshot)
        if rows is not None:
            size = heuristics.STORE_FILE_ROWS if overwrite else max(rows.num_rows, 1)
            parsed = self._static("org.apache.spark.sql.delta.actions.Action$.MODULE$")
            files = self._scala([parsed.fromJson(driver_files.write_file(snapshot, rows.slice(start, size)))
                                 for start in range(0, max(rows.num_rows, 1), size)]).toList()
        else:
            files = txn.writeFiles(df._jdf)
        actions = files
        if overwrite:
            removed = [f.remove() for f in (replacing.files if replacing else jsnapshot.allFiles().collectAsList())]
            actions = files.appendedAll(self._scala(removed).toList())
        operation = self._write_operation(user_metadata, overwrite)
        try:
            version = txn.commit(actions, operation)
        except Exception as exc:
            if any(name in str(exc) for name in _CONFLICTS):
                raise ConcurrentCommitError(
                    f"another commit to {snapshot.table} was made after version {snapshot.version}") from None
            self._remove_orphans(snapshot, files)
            raise
        rows = 0
        added = files.iterator()
        while added.hasNext():
            stats = added.next().stats()
            rows += json.loads(stats)["numRecords"] if stats else 0
        return Written(int(version), rows, files)

    def _write_operation(self, user_metadata: str, overwrite: bool):
        """Delta's WRITE operation (append or overwrite) carrying the user metadata into the commit's
        information."""
        if self._write_defaults is None:
            # Write(mode, partitionBy, predicate, userMetadata, …): every argument but the mode and the user
            # metadata at its default.
            companion = self._static("org.apache.spark.sql.delta.DeltaOperations$Write$.MODULE$")
            self._write_defaults = [getattr(companion, f"$lessinit$greater$default${i}")() for i in range(2, 10)]
        arguments = list(self._write_defaults)
        arguments[2] = self._option(user_metadata)
        mode = self._static(f"org.apache.spark.sql.SaveMode.{'Overwrite' if overwrite else 'Append'}")
        return self._class("org.apache.spark.sql.delta.DeltaOperations$Write")(mode, *arguments)

    def written_rows(self, snapshot: TableSnapshot, written: Written):
        """A DataFrame of the rows a write to the snapshot's table (the version it started from) committed,
        read from the files it added."""
        return self._frame(snapshot, written.files)

    def _remove_orphans(self, snapshot: TableSnapshot, files) -> None:
        """After a commit failed: if the table's log is gone (the table was dropped while the write ran), delete
        the files the write put in its folder, and the folder if that leaves it empty. Left there, they would
        make a CREATE of a table of the same name fail on a folder that is not empty."""
        jvm = self.spark._jvm
        hadoop_path = jvm.org.apache.hadoop.fs.Path
        try:
            root = hadoop_path(snapshot.location)
            fs = root.getFileSystem(self._js.sessionState().newHadoopConf())
            if fs.exists(hadoop_path(root, "_delta_log")):
                return
            added = files.iterator()
            while added.hasNext():
                fs.delete(hadoop_path(root, hadoop_path(jvm.java.net.URI(added.next().path()))), False)
            if fs.exists(root) and len(fs.listStatus(root)) == 0:
                fs.delete(root, False)
        except Exception as exc:  # the commit's own error is the one to report
            log.warning("could not remove the files of a failed write to %s: %s", snapshot.table, exc)


def _cast(df, snapshot: TableSnapshot):
    """The DataFrame's columns in the table's types: a transaction writes the rows' own types, where INSERT
    casts them to the table's."""
    return df.selectExpr(*(f"CAST(`{c.replace('`', '``')}` AS {t}) AS `{c.replace('`', '``')}`"
                           for c, t in snapshot.columns))
