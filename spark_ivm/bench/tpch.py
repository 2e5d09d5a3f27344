"""TPC-H data for demos and benchmarks: generate with tpchgen-cli, load into Delta tables, change them.

    counts = load_tpch(spark, 0.01, "tpch", hold_back=0.01)  # 1% of the orders wait in *_pending
    insert_held_back(spark, "tpch")                          # RF1: insert them (and their lineitems)
    delete_held_back(spark, "tpch")                          # … and take them out again
    delete_orders(spark, "tpch", 0.005)                      # RF2: delete 0.5% of the orders
    update_rows(spark, "tpch")                               # some lineitems and customers change
    update_dimensions(spark, "tpch")                         # … and some orders, parts and suppliers
    delete_dimension_rows(spark, "tpch")                     # customers, parts, suppliers, a nation go

Every table gets the schema of the TPC-H specification (section 1.4): identifiers BIGINT, integers INT,
money and quantities DECIMAL(15,2), dates DATE, text STRING. The tables are Delta tables with the change
data feed and deletion vectors on, as incremental views need.

Held-back orders are the ones with the largest keys (new orders arrive at the end of the key space); the
RF2 deletion takes the smallest keys, so the two never overlap.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import sqlglot

TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
PENDING = {"orders": "orders_pending", "lineitem": "lineitem_pending"}

SCHEMAS = {
    "region": "r_regionkey BIGINT, r_name STRING, r_comment STRING",
    "nation": "n_nationkey BIGINT, n_name STRING, n_regionkey BIGINT, n_comment STRING",
    "supplier": "s_suppkey BIGINT, s_name STRING, s_address STRING, s_nationkey BIGINT, s_phone STRING, "
                "s_acctbal DECIMAL(15,2), s_comment STRING",
    "customer": "c_custkey BIGINT, c_name STRING, c_address STRING, c_nationkey BIGINT, c_phone STRING, "
                "c_acctbal DECIMAL(15,2), c_mktsegment STRING, c_comment STRING",
    "part": "p_partkey BIGINT, p_name STRING, p_mfgr STRING, p_brand STRING, p_type STRING, p_size INT, "
            "p_container STRING, p_retailprice DECIMAL(15,2), p_comment STRING",
    "partsupp": "ps_partkey BIGINT, ps_suppkey BIGINT, ps_availqty INT, ps_supplycost DECIMAL(15,2), "
                "ps_comment STRING",
    "orders": "o_orderkey BIGINT, o_custkey BIGINT, o_orderstatus STRING, o_totalprice DECIMAL(15,2), "
              "o_orderdate DATE, o_orderpriority STRING, o_clerk STRING, o_shippriority INT, o_comment STRING",
    "lineitem": "l_orderkey BIGINT, l_partkey BIGINT, l_suppkey BIGINT, l_linenumber INT, "
                "l_quantity DECIMAL(15,2), l_extendedprice DECIMAL(15,2), l_discount DECIMAL(15,2), "
                "l_tax DECIMAL(15,2), l_returnflag STRING, l_linestatus STRING, l_shipdate DATE, "
                "l_commitdate DATE, l_receiptdate DATE, l_shipinstruct STRING, l_shipmode STRING, "
                "l_comment STRING",
}

TABLE_PROPERTIES = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}

# The TPC-H queries of this repository (sql/tpch/q<N>.sql), present in a source checkout.
QUERY_DIR = Path(__file__).resolve().parents[2] / "sql" / "tpch"


# -- generating ------------------------------------------------------------------------------------------
def tpchgen_command() -> str:
    """The tpchgen-cli executable: next to this Python (a venv's bin/) or else on the PATH."""
    beside = Path(sys.executable).parent / "tpchgen-cli"
    if beside.is_file():
        return str(beside)
    found = shutil.which("tpchgen-cli")
    if not found:
        raise FileNotFoundError("tpchgen-cli is not installed (pip install tpchgen-cli)")
    return found


def generate(scale: float, out_dir: str | Path, tables=None) -> Path:
    """Write TPC-H tables at a scale factor as out_dir/<table>.parquet; files already generated there at
    the same scale factor are reused."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    marker = out / "scale_factor"
    if marker.is_file() and marker.read_text().strip() != _scale_text(scale):
        for t in TABLES:
            (out / f"{t}.parquet").unlink(missing_ok=True)
    marker.write_text(_scale_text(scale))
    missing = [t for t in (tables or TABLES) if not (out / f"{t}.parquet").is_file()]
    if missing:
        subprocess.run(
            [tpchgen_command(), "parquet", "--scale-factor", _scale_text(scale), "--output-dir", str(out),
             "--tables", ",".join(missing), "--overwrite", "--quiet"],
            check=True)
    return out


def _scale_text(scale: float) -> str:
    if scale <= 0:
        raise ValueError(f"scale factor must be positive, not {scale}")
    return f"{scale:g}"


# -- loading ---------------------------------------------------------------------------------------------
def load_tpch(spark, scale: float, database: str = "tpch", tables=None, *, hold_back: float = 0.0,
              data_dir: str | Path | None = None) -> dict[str, int]:
    """Generate TPC-H at `scale` and load it into Delta tables `database.<table>` (replacing them).

    hold_back: the fraction of orders (largest keys) kept out of `orders`, with their lineitems, in
    `orders_pending` and `lineitem_pending` for `insert_held_back` to add later.
    data_dir: keep the generated files there (and reuse them next time); default a temporary folder.
    Returns the row count of every table loaded, pending tables included."""
    tables = list(tables or TABLES)
    unknown = [t for t in tables if t not in TABLES]
    if unknown:
        raise ValueError(f"unknown TPC-H tables {unknown}; known: {', '.join(TABLES)}")
    if not 0 <= hold_back < 1:
        raise ValueError(f"hold_back must be a fraction in [0, 1), not {hold_back}")
    splitting = hold_back > 0 and any(t in PENDING for t in tables)
    needed = tables + (["orders"] if splitting and "orders" not in tables else [])

    scratch = None if data_dir else tempfile.mkdtemp(prefix="tpch_")
    try:
        folder = generate(scale, data_dir or scratch, needed)
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
        for pending in PENDING.values():
            spark.sql(f"DROP TABLE IF EXISTS {database}.{pending}")
        cut = _hold_back_key(spark, folder / "orders.parquet", hold_back) if splitting else None
        writes = {}  # table name -> its rows
        for table in tables:
            rows = _typed(spark, table, folder / f"{table}.parquet")
            if cut is not None and table in PENDING:
                key = _order_key(table)
                writes[table] = rows.where(f"{key} < {cut}")
                writes[PENDING[table]] = rows.where(f"{key} >= {cut}")
            else:
                writes[table] = rows
        # Writing a small table is mostly driver-side work (commit, metastore): overlap the tables.
        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = {name: pool.submit(_write, spark, f"{database}.{name}", rows, _table_of(name))
                       for name, rows in writes.items()}
            return {name: f.result() for name, f in futures.items()}
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _typed(spark, table: str, path: Path):
    """The generated file's rows with the specification's column types."""
    columns = [c.strip().split(" ", 1) for c in _split_columns(SCHEMAS[table])]
    return spark.read.parquet(str(path)).selectExpr(*(f"CAST({n} AS {t}) AS {n}" for n, t in columns))


def _split_columns(ddl: str) -> list[str]:
    return re.split(r",\s*(?![^()]*\))", ddl)  # commas outside DECIMAL(15,2)


def column_names() -> dict[str, list[str]]:
    """Each table's column names, in the order of its schema (what the compiler needs to know of it)."""
    return {table: [c.strip().split(" ", 1)[0] for c in _split_columns(ddl)] for table, ddl in SCHEMAS.items()}


def _table_of(name: str) -> str:
    """The TPC-H table whose rows a loaded table holds (a pending table: those of its table)."""
    return next((t for t, p in PENDING.items() if p == name), name)


def _write(spark, name: str, rows, table: str) -> int:
    """Write the rows into a new Delta table with the table's columns, every one NOT NULL as the
    specification's DDL declares them."""
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    columns = ", ".join(f"{c.strip()} NOT NULL" for c in _split_columns(SCHEMAS[table]))
    properties = ", ".join(f"'{k}' = '{v}'" for k, v in TABLE_PROPERTIES.items())
    spark.sql(f"CREATE TABLE {name} ({columns}) USING delta TBLPROPERTIES ({properties})")
    rows.writeTo(name).append()
    return spark.table(name).count()


def _hold_back_key(spark, orders_file: Path, fraction: float) -> int | None:
    """The smallest held-back order key: orders with a key at least this are held back."""
    keys = spark.read.parquet(str(orders_file)).select("o_orderkey")
    count = round(keys.count() * fraction)
    if count == 0:
        return None
    return _nth_key(keys.orderBy(keys.o_orderkey.desc()), count)


def _nth_key(ordered_keys, n: int) -> int:
    return int(ordered_keys.limit(n).collect()[-1][0])


def _order_key(table: str) -> str:
    return {"orders": "o_orderkey", "lineitem": "l_orderkey"}[table]


# -- changing --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Changed:
    """Rows a batch of DML changed, per table."""
    inserted: dict[str, int]
    deleted: dict[str, int]
    updated: dict[str, int]

    def describe(self) -> str:
        parts = [f"{verb} {n:,} {t} rows" for verb, d in
                 (("inserted", self.inserted), ("deleted", self.deleted), ("updated", self.updated))
                 for t, n in d.items()]
        return ", ".join(parts) or "no changes"


def insert_held_back(spark, database: str = "tpch", *, keep: bool = False) -> Changed:
    """RF1: insert the held-back orders and their lineitems, and empty the pending tables (unless
    `keep`: then the same batch can be inserted again after `delete_held_back`)."""
    inserted = {}
    for table, pending in PENDING.items():
        source = _pending_table(spark, database, pending)
        inserted[table] = spark.table(source).count()  # INSERT INTO reports no row count
        if inserted[table]:
            spark.sql(f"INSERT INTO {database}.{table} SELECT * FROM {source}")
            if not keep:
                spark.sql(f"DELETE FROM {source}")
    return Changed(inserted, {}, {})


def delete_held_back(spark, database: str = "tpch") -> Changed:
    """Undo `insert_held_back(keep=True)`: delete the orders (and their lineitems) whose keys are those
    of the held-back batch."""
    source = _pending_table(spark, database, PENDING["orders"])
    first = spark.sql(f"SELECT MIN(o_orderkey) FROM {source}").collect()[0][0]
    if first is None:
        return Changed({}, {"orders": 0, "lineitem": 0}, {})
    deleted = {
        "lineitem": _affected(spark.sql(f"DELETE FROM {database}.lineitem WHERE l_orderkey >= {first}")),
        "orders": _affected(spark.sql(f"DELETE FROM {database}.orders WHERE o_orderkey >= {first}")),
    }
    return Changed({}, deleted, {})


def _pending_table(spark, database: str, pending: str) -> str:
    source = f"{database}.{pending}"
    if not spark.catalog.tableExists(source):
        raise ValueError(f"{source} does not exist; load with load_tpch(..., hold_back=…)")
    return source


def delete_orders(spark, database: str = "tpch", fraction: float = 0.005) -> Changed:
    """RF2: delete the orders with the smallest keys (a fraction of all orders) and their lineitems."""
    keys = spark.table(f"{database}.orders").select("o_orderkey")
    count = round(keys.count() * fraction)
    if count == 0:
        return Changed({}, {"orders": 0, "lineitem": 0}, {})
    last = _nth_key(keys.orderBy("o_orderkey"), count)
    deleted = {
        "lineitem": _affected(spark.sql(f"DELETE FROM {database}.lineitem WHERE l_orderkey <= {last}")),
        "orders": _affected(spark.sql(f"DELETE FROM {database}.orders WHERE o_orderkey <= {last}")),
    }
    return Changed({}, deleted, {})


def update_rows(spark, database: str = "tpch", modulus: int = 50) -> Changed:
    """Deterministic updates touching the columns the TPC-H queries filter and aggregate on: for the
    orders with key ≡ 1 (mod `modulus`) the lineitems' discount moves by 0.02 and quantity by 1; for key
    ≡ 2 the lineitems ship 45 days later; every `modulus`-th customer swaps its market segment between
    BUILDING and MACHINERY (or joins BUILDING)."""
    updated = {
        "lineitem": _affected(spark.sql(
            f"UPDATE {database}.lineitem SET "
            f"l_discount = CASE WHEN l_discount >= 0.05 THEN l_discount - 0.02 ELSE l_discount + 0.02 END, "
            f"l_quantity = l_quantity + 1 "
            f"WHERE l_orderkey % {modulus} = 1"))
        + _affected(spark.sql(
            f"UPDATE {database}.lineitem SET l_shipdate = date_add(l_shipdate, 45) "
            f"WHERE l_orderkey % {modulus} = 2")),
        "customer": _affected(spark.sql(
            f"UPDATE {database}.customer SET "
            f"c_mktsegment = CASE WHEN c_mktsegment = 'BUILDING' THEN 'MACHINERY' ELSE 'BUILDING' END "
            f"WHERE c_custkey % {modulus} = 0")),
    }
    return Changed({}, {}, updated)


def update_dimensions(spark, database: str = "tpch", modulus: int = 50) -> Changed:
    """Updates of orders, part and supplier rows on columns the TPC-H queries filter, join and group on:
    for the orders with key ≡ 3 (mod `modulus`) the priority rotates and the order date moves 30 days on;
    every `modulus`-th part (key ≡ 4) flips its size between 15 and 14, its container to MED BOX and its
    name to start with 'forest'; every third supplier moves to the next nation and its balance grows."""
    updated = {
        "orders": _affected(spark.sql(
            f"UPDATE {database}.orders SET "
            f"o_orderpriority = CASE WHEN o_orderpriority LIKE '1%' THEN '5-LOW' ELSE '1-URGENT' END, "
            f"o_orderdate = date_add(o_orderdate, 30) WHERE o_orderkey % {modulus} = 3")),
        "part": _affected(spark.sql(
            f"UPDATE {database}.part SET p_size = CASE WHEN p_size = 15 THEN 14 ELSE 15 END, "
            f"p_container = 'MED BOX', p_name = concat('forest ', p_name) WHERE p_partkey % {modulus} = 4")),
        "supplier": _affected(spark.sql(
            f"UPDATE {database}.supplier SET s_nationkey = (s_nationkey + 1) % 25, "
            f"s_acctbal = s_acctbal + 100 WHERE s_suppkey % 3 = 1")),
    }
    return Changed({}, {}, updated)


def delete_dimension_rows(spark, database: str = "tpch", modulus: int = 50, nation: str = "JAPAN") -> Changed:
    """Deletions of dimension rows, leaving facts that refer to them: every `modulus`-th customer, part
    and part-supplier (keys ≡ 7, 8 and 9), one supplier in ten, and one nation (by name) — which empties
    the groups of that nation."""
    deleted = {
        "customer": _affected(spark.sql(f"DELETE FROM {database}.customer WHERE c_custkey % {modulus} = 7")),
        "part": _affected(spark.sql(f"DELETE FROM {database}.part WHERE p_partkey % {modulus} = 8")),
        "partsupp": _affected(spark.sql(f"DELETE FROM {database}.partsupp WHERE ps_partkey % {modulus} = 9")),
        "supplier": _affected(spark.sql(f"DELETE FROM {database}.supplier WHERE s_suppkey % 10 = 5")),
        "nation": _affected(spark.sql(f"DELETE FROM {database}.nation WHERE n_name = '{nation}'")),
    }
    return Changed({}, deleted, {})


def _affected(result) -> int:
    rows = [r.asDict() for r in result.collect()]
    return int(rows[0]["num_affected_rows"]) if rows and "num_affected_rows" in rows[0] else 0


# -- queries ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Query:
    name: str  # q1
    title: str  # the leading comment, e.g. "TPC-H Q1, Pricing Summary Report (…)"
    sql: str  # the query without the leading comment


def tables_read(sql: str) -> list[str]:
    """The TPC-H tables a query reads, in the order of TABLES."""
    names = {t.name.lower() for t in sqlglot.parse_one(sql, read="spark").find_all(sqlglot.exp.Table)}
    return [t for t in TABLES if t in names]


def read_query(name: str, folder: str | Path = QUERY_DIR) -> Query:
    """sql/tpch/<name>.sql, its leading `--` comment lines split off as the title."""
    path = Path(folder) / f"{name}.sql"
    if not path.is_file():
        available = ", ".join(sorted(p.stem for p in Path(folder).glob("q*.sql")))
        raise FileNotFoundError(f"no query {name} in {folder} (available: {available})")
    lines = path.read_text().strip().splitlines()
    comment = []
    while lines and lines[0].lstrip().startswith("--"):
        comment.append(lines.pop(0).lstrip()[2:].strip())
    return Query(name, " ".join(comment), "\n".join(lines).strip().rstrip(";").strip())


# -- comparing a view's rows with the query's ------------------------------------------------------------
def order_columns(sql: str, columns: list[str]) -> list[str] | None:
    """The output columns the query's final ORDER BY sorts on, or None when it sorts on anything else."""
    tree = sqlglot.parse_one(sql, read="spark")
    order = tree.args.get("order")
    if order is None:
        return None
    names = []
    for item in order.expressions:
        target = item.this
        if not isinstance(target, sqlglot.exp.Column) or target.name.lower() not in [c.lower() for c in columns]:
            return None
        names.append(next(c for c in columns if c.lower() == target.name.lower()))
    return names


def compare(sql: str, expected_rows, actual_rows, columns, *, ordered: bool = True,
            rel_tol: float = 0.0) -> tuple[str | None, str]:
    """(problem, note): problem is None when the view's rows are the query's rows.

    Rows are compared as bags; `rel_tol` > 0 lets floating-point and decimal values differ by that
    relative amount (sums added up in another order round differently). `ordered` also checks the order
    of a query with ORDER BY, as far as its sort keys tell rows apart."""
    expected = [tuple(r) for r in expected_rows]
    actual = [tuple(r) for r in actual_rows]
    if not same_bag(expected, actual, rel_tol):
        if _limited_ties(sql, expected, actual, columns):
            return None, "another choice among the rows tied on the sort keys at the LIMIT"
        missing = list((Counter(expected) - Counter(actual)).elements())
        extra = list((Counter(actual) - Counter(expected)).elements())
        return (f"{len(missing)} query rows missing from the view, {len(extra)} extra rows in the view; "
                f"first missing: {missing[:3]}; first extra: {extra[:3]}"), ""
    tree = sqlglot.parse_one(sql, read="spark")
    if not ordered or tree.args.get("order") is None or expected == actual:
        return None, ""
    keys = order_columns(sql, columns)
    if keys is None:
        return "same rows but in a different order (ORDER BY on an expression: cannot tell ties apart)", ""
    idx = [columns.index(k) for k in keys]
    if [tuple(r[i] for i in idx) for r in expected] == [tuple(r[i] for i in idx) for r in actual]:
        return None, "rows with equal sort keys in another order"
    return "rows in a different order", ""


def same_bag(expected: list[tuple], actual: list[tuple], rel_tol: float = 0.0) -> bool:
    """The same rows the same number of times; fractional numbers within `rel_tol` of each other."""
    if Counter(expected) == Counter(actual):
        return True
    if rel_tol <= 0 or len(expected) != len(actual):
        return False
    pairs = zip(sorted(expected, key=_rounded_row), sorted(actual, key=_rounded_row))
    return all(len(e) == len(a) and all(_close(x, y, rel_tol) for x, y in zip(e, a)) for e, a in pairs)


def _rounded_row(row: tuple) -> tuple:
    """A sort key in which nearly equal fractional numbers sort alike (NULLs first)."""
    return tuple((v is not None, float(f"{v:.6g}") if isinstance(v, (float, Decimal)) else (0 if v is None else v))
                 for v in row)


def _close(x, y, rel_tol: float) -> bool:
    if x == y:
        return True
    if isinstance(x, (float, Decimal)) and isinstance(y, (float, Decimal)):
        return math.isclose(float(x), float(y), rel_tol=rel_tol, abs_tol=1e-9)
    return False


def _limited_ties(sql: str, expected, actual, columns) -> bool:
    """With ORDER BY … LIMIT, rows tied on the sort keys at the cut may legitimately differ."""
    tree = sqlglot.parse_one(sql, read="spark")
    keys = order_columns(sql, columns)
    if tree.args.get("limit") is None or keys is None or len(expected) != len(actual) or not expected:
        return False
    idx = [columns.index(k) for k in keys]
    key = lambda r: tuple(r[i] for i in idx)  # noqa: E731
    if [key(r) for r in expected] != [key(r) for r in actual]:
        return False
    last = key(expected[-1])
    return Counter(r for r in expected if key(r) != last) == Counter(r for r in actual if key(r) != last)
