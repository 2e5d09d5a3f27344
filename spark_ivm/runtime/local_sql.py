"""Statements run on the driver, in DuckDB, where the driver holds every row they read.

A refresh of a small batch reads few rows: the batch's changes and the store's rows at its keys, which
the driver reads itself where they are few (see run.RefreshRun: _consolidate_on_driver, read_store_once).
Spark then spends most of such a refresh on its fixed costs: planning statements of tens of thousands of
characters and a job, with its stages and tasks, per checkpoint and per broadcast, each for a few
thousand rows. DuckDB, in the driver's process, computes the same SQL over the same Arrow tables in
milliseconds, and the rows stay on the driver for the store's write (driver_files) and the views.

Only SQL whose meaning is the same in both engines runs here: the runtime's own forms (joins, unions,
sums, CASE, COALESCE, comparisons, window sums) over columns whose types both read alike. A statement
that divides (`try_divide`, `/`) does where Spark's types of its divisions are derived (see division:
DuckDB then divides as Spark does). A statement that calls a function of the calculus other than those,
reads a table the driver does not hold (DuckDB knows only the tables registered on it), or fails in DuckDB
for any reason runs in Spark as before.
The result takes the column types Spark would give it (see spark_types), so what reads it later, in either
engine, sees what Spark's own result would have been, without Spark analysing the SQL.
"""

from __future__ import annotations

import logging
import re

import duckdb
import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema

from spark_ivm import heuristics
from spark_ivm.runtime.division import DIVIDE_PREFIX, exact_divisions

log = logging.getLogger("spark_ivm")

# Tokens to rewrite or check: string literals, quoted identifiers, Spark's NULL-safe equality, decimal
# literals, optimizer hints (comments to DuckDB, dropped), operators refused, and words followed by an
# opening parenthesis (function calls, keywords, and a table alias with its column names: `AS t(a, b)`).
_TOKENS = re.compile(r"'(?:[^'\\]|\\.)*'|`(?:[^`]|``)*`|<=>|\b\d+(?:\.\d+)?BD\b|/\*\+.*?\*/|[/%]"
                     r"|\b(?:DIV|RLIKE|REGEXP)\b|\b(AS\s+)?([A-Za-z_]\w*)\s*\(", re.IGNORECASE)

# Keywords before a parenthesis, and the functions whose meaning (and result, for the arguments the
# runtime passes) is the same in Spark and DuckDB.
_KEYWORDS = {"select", "from", "join", "as", "in", "on", "where", "and", "or", "not", "when", "then", "else",
             "over", "by", "values", "exists", "having", "is", "case", "end", "all", "union", "distinct"}
_FUNCTIONS = {"sum", "coalesce", "nullif", "cast", "count", "min", "max", "stack", "decimal",
              "year", "month", "day", "abs"}  # the parts of a date (timestamps are refused), absolute values


def duckdb_sql(spark_sql: str, checked: bool = True) -> str | None:
    """The runtime's Spark SQL in DuckDB's spelling, or None where its meaning in DuckDB may differ;
    unchecked, the spelling whatever the SQL means (the SQL generator's tests run it in DuckDB, with Spark's
    functions as macros)."""
    refused = False

    def rewrite(m: re.Match) -> str:
        nonlocal refused
        token = m.group(0)
        if token[0] == "'":
            refused |= "\\" in token  # escapes, and LIKE's default escape character, differ
            return token
        if token[0] == "`":
            return '"' + token[1:-1].replace("``", "`").replace('"', '""') + '"'
        if token == "<=>":
            return " IS NOT DISTINCT FROM "
        if token.endswith("BD"):
            return token[:-2]
        if token.startswith("/*+"):
            return " "
        if m.group(2) is None:
            # Division and remainder (Spark divides decimals to a decimal, DuckDB to a double; by zero, Spark
            # fails where DuckDB gives NULL); regular expressions (Java's and RE2 differ).
            refused = True
            return token
        name = m.group(2).lower()
        if not m.group(1) and name not in _KEYWORDS and name not in _FUNCTIONS and not name.startswith(DIVIDE_PREFIX):
            refused |= name != "substring" or not _positive_substring(spark_sql, m.end() - 1)
        return token

    try:
        translated = _TOKENS.sub(rewrite, spark_sql)
        return None if refused and checked else _without_stack(translated)
    except (ValueError, IndexError):  # not the runtime's shape of a call: left to Spark
        return None


def _positive_substring(sql: str, opening: int) -> bool:
    """Whether the substring call whose parenthesis opens at `opening` starts at a positive literal position
    and takes a literal length, if any: there Spark and DuckDB agree (on a position of 0 or below, or a
    negative length, they do not)."""
    args = _split(sql[opening + 1:_closing(sql, opening)])
    return len(args) in (2, 3) and all(a.isdigit() for a in args[1:]) and int(args[1]) > 0


_STACK = re.compile(r"(?<![\w\"'])stack\(", re.IGNORECASE)


def _without_stack(sql: str) -> str | None:
    """`SELECT stack(n, e…) AS (c…) FROM (q) AS f` (the store's rows of fused statements, see
    mapstore.fused_rows_sql) as a lateral VALUES list, which DuckDB has and Spark does not."""
    while (found := _STACK.search(sql)) is not None:
        start = found.start()
        args_end = _closing(sql, start + len("stack"))
        head = re.compile(r"\s*AS\s*\(").match(sql, args_end + 1)
        if head is None:
            return None
        names_end = _closing(sql, head.end() - 1)
        source = re.compile(r"\s*FROM\s*\(").match(sql, names_end + 1)
        if source is None:
            return None
        source_end = _closing(sql, source.end() - 1)
        alias = re.compile(r"\s*AS\s+(\w+)").match(sql, source_end + 1)
        if alias is None:
            return None
        args = _split(sql[start + len("stack("):args_end])
        names = sql[head.end():names_end]
        width = len(_split(names))
        count = int(args[0])
        values = args[1:]
        if count * width != len(values):
            return None
        rows = ", ".join("(" + ", ".join(values[i * width:(i + 1) * width]) + ")" for i in range(count))
        sql = (f"{sql[:start]}__stacked.*{sql[names_end + 1:alias.end()]}, "
               f"LATERAL (VALUES {rows}) AS __stacked({names}){sql[alias.end():]}")
    return sql


def _outside_strings(sql: str, start: int = 0):
    """(index, character, depth of parentheses after it) of each character from `start` that is not within
    a string literal or a quoted identifier."""
    depth, i = 0, start
    while i < len(sql):
        c = sql[i]
        if c == '"':
            i = sql.index(c, i + 1)
        elif c == "'":
            i += 1
            while sql[i] != "'":
                i += 2 if sql[i] == "\\" else 1
        else:
            depth += (c == "(") - (c == ")")
            yield i, c, depth
        i += 1


def _closing(sql: str, opening: int) -> int:
    """The index of the parenthesis that closes the one at `opening`."""
    for i, c, depth in _outside_strings(sql, opening):
        if c == ")" and depth == 0:
            return i
    raise ValueError("unbalanced parentheses")


def _split(args: str) -> list[str]:
    """Top-level comma-separated parts."""
    parts, last = [], 0
    for i, c, depth in _outside_strings(args):
        if c == "," and depth == 0:
            parts.append(args[last:i].strip())
            last = i + 1
    parts.append(args[last:].strip())
    return parts


# DuckDB's result types as Spark's: what Spark's analysis of the same SQL gives. A sum of integers is a
# HUGEINT in DuckDB and a bigint in Spark (both fail where it overflows). A decimal's precision may differ
# (a sum is DECIMAL(38, s) in DuckDB, decimal(p + 10, s) in Spark), not its scale; with scales of at most 6,
# Spark's arithmetic on either keeps every digit, so a statement Spark computes from such a result gives what
# it would from its own. Other types, and larger scales, are left to Spark.
_SPARK_TYPES = {"hugeint": pa.int64(), "bigint": pa.int64(), "integer": pa.int32(), "smallint": pa.int16(),
                "tinyint": pa.int8(), "double": pa.float64(), "float": pa.float32(), "boolean": pa.bool_(),
                "varchar": pa.string(), "date": pa.date32()}
DECIMAL_SCALE_MAX = 6


def spark_types(columns: list[str], types: list) -> pa.Schema | None:
    """The Arrow schema of Spark's types for DuckDB's result columns, or None where one has none here."""
    fields = []
    for name, t in zip(columns, types):
        if t.id == "decimal":
            precision, scale = (int(x) for x in re.findall(r"\d+", str(t)))
            if scale > DECIMAL_SCALE_MAX:
                return None
            fields.append(pa.field(name, pa.decimal128(precision, scale)))
        elif t.id in _SPARK_TYPES:
            fields.append(pa.field(name, _SPARK_TYPES[t.id]))
        else:
            return None
    return pa.schema(fields)


class DriverStatements:
    """The rows the driver holds, as Arrow tables by the name of the Spark view of them, and the DuckDB
    database in which statements that read only those run."""

    def __init__(self, view_prefix: str, enabled: bool = True, divides=lambda: True):
        self.held: dict[str, pa.Table] = {}
        self.enabled = enabled
        self._divides = divides  # whether the session divides by Spark's default rules (asked once, if at all)
        self._functions: set[str] = set()
        self._views = re.compile(rf"\b{re.escape(view_prefix)}\w+")
        self._db = None
        self._registered: set[str] = set()

    def hold(self, view: str, rows: pa.Table) -> None:
        self.held[view] = rows

    def compute(self, sql: str) -> tuple[pa.Table, object] | None:
        """The query's rows computed by DuckDB, in Spark's types, and their Spark schema (a StructType); None
        where the query reads a view the driver does not hold, has no DuckDB form of the same meaning, or
        fails there."""
        if not self.enabled:
            return None
        views = set(self._views.findall(sql))
        if not views <= self.held.keys() or any(_has_timestamp(self.held[v].schema) for v in views):
            return None
        translated, functions = duckdb_sql(sql), []
        if translated is None and ("try_divide" in sql or " / " in sql) and self._divides_as_spark():
            exact = exact_divisions(sql, {v: self.held[v].schema for v in views})
            if exact is not None:
                translated, functions = duckdb_sql(exact[0]), exact[1]
        if translated is None:
            return None
        db = self._database()
        for function in functions:
            if function.name not in self._functions:
                function.register(db)
                self._functions.add(function.name)
        for view in views - self._registered:
            db.register(view, self.held[view])
            self._registered.add(view)
        try:
            query = db.sql(translated)
            schema = spark_types(query.columns, query.types)
            if schema is None:
                return None
            rows = query.to_arrow_table().cast(schema, safe=True)
        except (duckdb.Error, pa.ArrowInvalid) as exc:
            log.debug("computed by Spark, not DuckDB: %s", exc)
            return None
        return rows, from_arrow_schema(schema)

    def _divides_as_spark(self) -> bool:
        if callable(self._divides):
            self._divides = bool(self._divides())
        return self._divides

    def _database(self):
        if self._db is None:
            self._db = duckdb.connect()
            # Spark's order of NULLs; what a refresh reads on the driver is small.
            self._db.execute("SET default_null_order = 'nulls_first_on_asc_last_on_desc'")
            self._db.execute(f"SET memory_limit = '{heuristics.DRIVER_STATEMENTS_MEMORY_MB}MB'")
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
            self._functions.clear()


def _has_timestamp(schema: pa.Schema) -> bool:
    # Spark's timestamps are instants shown in the session's time zone; DuckDB's literals and comparisons
    # of them follow its own time zone.
    return any(pa.types.is_timestamp(f.type) for f in schema)
