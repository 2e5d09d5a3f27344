"""Source tables: which tables a query reads, their Delta versions and their change data feed."""

from __future__ import annotations

import logging
import re

from sqlglot import exp

from spark_ivm.errors import IVMError
from spark_ivm.frontend.source import SqlSource
from spark_ivm.runtime.sqlgen import MULTIPLICITY, quote

log = logging.getLogger("spark_ivm")

# Change data feed rows and their signed multiplicities.
CHANGE_SIGNS = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}


class SourceError(IVMError):
    """A source table cannot feed an incremental view."""


# A part of a source table's name: what Spark's session catalog admits for tables and databases. The
# runtime writes source names into SQL (DESCRIBE DETAIL, table_changes('…'), reads at a version), so a name
# with any other character (a path-based table, a quote, a backtick) is refused rather than quoted.
_NAME_PART = re.compile(r"[A-Za-z0-9_]+")


def referenced_tables(sql: str) -> list[str]:
    """Names of the tables a query reads (CTE names excluded), as written, in order."""
    tree = SqlSource(sql).statement  # syntax errors are reported as the front end reports them
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    names = []
    for t in tree.find_all(exp.Table):
        parts = [p for p in (t.catalog, t.db, t.name) if p]
        name = ".".join(parts)
        if not name or name.lower() in ctes:
            continue
        if not all(_NAME_PART.fullmatch(p) for p in parts):
            raise SourceError(f"source table {'.'.join(quote(p) for p in parts)}: incremental views read tables "
                              f"whose names (and databases) are letters, digits and underscores; "
                              f"a path-based table can be read through a table registered over its path")
        names.append(name)
    return list(dict.fromkeys(names))


def check_delta_source(spark, table: str) -> int:
    """A source must be a Delta table with the change data feed on; turn the feed on if it is off.
    The table's size in bytes (of its current files)."""
    detail = spark.sql(f"DESCRIBE DETAIL {table}").collect()[0]
    if (detail["format"] or "").lower() != "delta":
        raise SourceError(f"source table {table} is not a Delta table (format {detail['format']}); "
                          f"incremental views read Delta's change data feed")
    props = detail["properties"] or {}
    if str(props.get("delta.enableChangeDataFeed", "false")).lower() != "true":
        log.warning("enabling the change data feed on source table %s", table)
        print(f"spark_ivm: enabling the change data feed on source table {table}")
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    return int(detail["sizeInBytes"] or 0)


def latest_commit(spark, table: str):
    """The table's latest Delta commit: a row of DESCRIBE HISTORY (version, userMetadata, …)."""
    return spark.sql(f"DESCRIBE HISTORY {table} LIMIT 1").collect()[0]


def current_version(spark, table: str) -> int:
    return int(latest_commit(spark, table)["version"])


def change_rows_sql(table: str, start: int, end: int, columns, consolidated: bool = True) -> str:
    """The changes of versions start..end, consolidated: one row per distinct tuple with its net
    multiplicity (a row inserted and deleted in the range cancels out); else each change as a row of
    multiplicity 1 or -1.

    Both are the same relation with multiplicities, and the statements' SQL only sums multiplicities (it
    aggregates a batch before any test of its rows), so they give the same increments: consolidating
    costs a shuffle of the batch by all its columns, and pays only when many changes cancel or the
    consolidated batch is read many times."""
    cols = ", ".join(quote(c) for c, _ in columns)
    sign = " ".join(f"WHEN '{k}' THEN {v}" for k, v in CHANGE_SIGNS.items())
    changes = f"table_changes('{table}', {start}, {end})"
    if not consolidated:
        kinds = ", ".join(f"'{k}'" for k in CHANGE_SIGNS)
        return (f"SELECT {cols}, CASE _change_type {sign} END AS {MULTIPLICITY} FROM {changes} "
                f"WHERE _change_type IN ({kinds})")
    return (f"SELECT {cols}, SUM(CASE _change_type {sign} ELSE 0 END) AS {MULTIPLICITY} "
            f"FROM {changes} GROUP BY {cols} HAVING SUM(CASE _change_type {sign} ELSE 0 END) <> 0")
