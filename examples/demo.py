"""spark_ivm demo: TPC-H queries as incremental views, kept up to date through inserts, deletes and updates.

    ./build.sh demo [--scale 1] [--queries q1,q6,q3] [--warehouse DIR] [--keep]

1. generate TPC-H at the scale factor with tpchgen-cli (kept in .cache/tpch for the next run), hold back
   0.1% of the orders, load Delta tables;
2. CREATE INCREMENTAL VIEW tpch_qN AS <sql/tpch/qN.sql> for each query;
3. three small batches of plain Spark SQL DML on the tables: insert the held-back orders (RF1), delete
   0.1% of the orders (RF2), update a few lineitems and customers; after each, REFRESH INCREMENTAL VIEW
   every view, read it, and check it against the query run from scratch (same rows, exactly; same order
   for ORDER BY);
4. a summary: refresh + read against running the query. Exits 1 if a view differs from its query or a
   statement fails.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

import spark_ivm
from spark_ivm.bench import tpch
from spark_ivm.bench.tpch import compare

DATABASE = "tpch"
HOLD_BACK = 0.001  # fraction of the orders inserted by the first batch
DELETE = 0.001  # fraction of the orders deleted by the second batch
UPDATE_MODULUS = 2000  # one order (and customer) in this many has its rows updated by the third batch
INDENT = 4  # of the printed view rows
QUERY_DIR = Path(__file__).resolve().parents[1] / "sql" / "tpch"
DATA_CACHE = Path(__file__).resolve().parents[1] / ".cache" / "tpch"  # shared with ./build.sh bench

# A terminal's own width; a pipe or a log file gets $COLUMNS or 120 (rich would assume 80).
console = Console(highlight=False, soft_wrap=True,
                  width=None if sys.stdout.isatty() else shutil.get_terminal_size((120, 24)).columns)


# -- checking a view against its query -------------------------------------------------------------------
@dataclass
class Check:
    stage: str
    refresh_s: float | None = None  # REFRESH and reading the view; None for the initial check after CREATE
    rows_written: int | None = None
    recompute_s: float = 0.0
    rows: list = field(default_factory=list)  # the view's rows
    columns: list = field(default_factory=list)
    problem: str | None = None  # why the view differs from the query; None when they agree
    note: str = ""

    @property
    def verdict(self) -> str:
        return "agree" if self.problem is None else "DIFFER"


@dataclass
class ViewRun:
    query: tpch.Query
    view: str
    create_s: float | None = None
    checks: list[Check] = field(default_factory=list)
    error: str | None = None  # the statement that failed and its message


def check(spark, run: ViewRun, stage: str, refresh_s=None, rows_written=None) -> Check:
    """Read the view (its time added to the refresh's: a user refreshes to read) and run the query."""
    started = time.perf_counter()
    actual_df = spark.table(run.view)
    actual = actual_df.collect()
    if refresh_s is not None:
        refresh_s += time.perf_counter() - started
    started = time.perf_counter()
    expected_df = spark.sql(run.query.sql)
    expected = expected_df.collect()
    recompute_s = time.perf_counter() - started
    columns = expected_df.columns
    result = Check(stage, refresh_s, rows_written, recompute_s, actual, actual_df.columns)
    want = [(f.name, f.dataType.simpleString()) for f in expected_df.schema.fields]
    got = [(f.name, f.dataType.simpleString()) for f in actual_df.schema.fields]
    if want != got:
        result.problem = f"columns differ: query {want}, view {got}"
    else:
        result.problem, result.note = compare(run.query.sql, expected, actual, columns)
    return result


# -- printing --------------------------------------------------------------------------------------------
def seconds(s: float | None) -> str:
    return "-" if s is None else f"{s:.2f}s"


def show_rows(check: Check, limit: int) -> None:
    """The view's first rows; a view too wide for the console is shown one column per line."""
    if limit <= 0:
        return
    cells = [["NULL" if v is None else str(v) for v in row] for row in check.rows[:limit]]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(check.columns)]
    table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
    if INDENT + sum(widths) + 3 * len(widths) <= console.width:
        for c in check.columns:
            table.add_column(c, overflow="fold")
        for row in cells:
            table.add_row(*row)
    else:
        table.add_column("column")
        for n in range(len(cells)):
            table.add_column(f"row {n + 1}", overflow="fold")
        for i, c in enumerate(check.columns):
            table.add_row(c, *(row[i] for row in cells))
    console.print(Padding(table, (0, 0, 0, INDENT), expand=False))
    n = len(check.rows)
    console.print(" " * INDENT + (f"… {n} rows in all" if n > limit else f"({n} row{'' if n == 1 else 's'})"))


def report(run: ViewRun, check: Check, limit: int) -> None:
    if check.refresh_s is None:
        timing = f"recompute {seconds(check.recompute_s)}"
    else:
        timing = (f"refresh + read {seconds(check.refresh_s)} ({check.rows_written} map rows written) "
                  f"vs recompute {seconds(check.recompute_s)} ({ratio(check.recompute_s, check.refresh_s)})")
    mark = "[green]agree[/]" if check.problem is None else "[bold red]DIFFER[/]"
    note = f" ({check.note})" if check.note else ""
    console.print(f"  {run.view}: {timing}: {mark}{note}")
    if check.problem:
        console.print(f"    [red]{escape(check.problem)}[/]")
    show_rows(check, limit)


def summary(runs: list[ViewRun]) -> None:
    table = Table(title="Incremental maintenance vs recomputing the query (wall-clock seconds)", box=box.SIMPLE_HEAD)
    for name, justify in (("view", "left"), ("step", "left"), ("spark_ivm", "right"), ("recompute", "right"),
                          ("ratio", "right"), ("result", "left")):
        table.add_column(name, justify=justify)
    for run in runs:
        for c in run.checks:
            ivm = run.create_s if c.refresh_s is None else c.refresh_s
            step_name = "create" if c.refresh_s is None else f"refresh + read after {c.stage}"
            table.add_row(run.view, step_name, seconds(ivm), seconds(c.recompute_s), ratio(c.recompute_s, ivm),
                          "[green]agree[/]" if c.problem is None else "[bold red]DIFFER[/]")
        refreshes = [c for c in run.checks if c.refresh_s is not None]
        if refreshes:
            ivm, recompute = sum(c.refresh_s for c in refreshes), sum(c.recompute_s for c in refreshes)
            table.add_row(run.view, f"[bold]all {len(refreshes)} refreshes[/]", seconds(ivm), seconds(recompute),
                          ratio(recompute, ivm), "", end_section=True)
        if run.error:
            table.add_row(run.view, "[bold red]failed[/]", "", "", "", "see below",
                          end_section=True)
    console.print(table)
    console.print("  ratio = recompute / spark_ivm: above 1 the incremental refresh is faster")


def ratio(recompute: float, ivm: float | None) -> str:
    return "-" if not ivm else f"{recompute / ivm:.2f}x"


def step(title: str) -> None:
    console.print(f"\n[bold]{title}[/]")


# -- the demo --------------------------------------------------------------------------------------------
def query_names(text: str) -> list[str]:
    if text.strip().lower() == "all":
        return sorted((p.stem for p in QUERY_DIR.glob("q*.sql")), key=lambda n: int(n[1:]))
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    return [n if n.startswith("q") else f"q{n}" for n in names]


def fail(run: ViewRun, statement: str, exc: BaseException) -> None:
    message = f"{type(exc).__name__}: {exc}".strip()
    run.error = f"{statement}\n{message}"
    console.print(f"  [bold red]{run.view}: {escape(statement)} failed[/]")
    lines = message.splitlines()
    if len(lines) > 40:  # a Java stack trace: its head says what failed
        lines = lines[:40] + [f"… {len(lines) - 40} more lines"]
    console.print("    " + "\n    ".join(lines), markup=False)
    frames = "".join(traceback.format_tb(exc.__traceback__)).rstrip()
    console.print("    Traceback (most recent call last):\n  " + frames.replace("\n", "\n  "), markup=False, style="dim")


def run_demo(spark, args) -> int:
    queries = [tpch.read_query(n, QUERY_DIR) for n in query_names(args.queries)]
    runs = [ViewRun(q, f"tpch_{q.name}") for q in queries]

    step(f"1. TPC-H at scale factor {args.scale:g}: generate with tpchgen-cli, hold back "
         f"{HOLD_BACK:.1%} of the orders, load into Delta tables in database {DATABASE}")
    t = time.perf_counter()
    counts = tpch.load_tpch(spark, args.scale, DATABASE, hold_back=HOLD_BACK,
                            data_dir=DATA_CACHE / f"sf{args.scale:g}")
    table = Table(box=box.SIMPLE, show_edge=False)
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, n in counts.items():
        table.add_row(name, f"{n:,}")
    console.print(table)
    console.print(f"  loaded in {seconds(time.perf_counter() - t)}")
    spark.sql(f"USE {DATABASE}")

    step("2. Creating the incremental views")
    for run in runs:
        console.print(f"  {run.view}: {run.query.title}")
        statement = f"DROP INCREMENTAL VIEW IF EXISTS {run.view}"
        try:
            spark.sql(statement)
            statement = f"CREATE INCREMENTAL VIEW {run.view} AS <sql/tpch/{run.query.name}.sql>"
            t = time.perf_counter()
            spark.sql(f"CREATE INCREMENTAL VIEW {run.view} AS\n{run.query.sql}")
        except Exception as exc:
            fail(run, statement, exc)
            continue
        run.create_s = time.perf_counter() - t
        console.print(f"    created in {seconds(run.create_s)}")
        try:
            c = check(spark, run, "initial")
        except Exception as exc:
            fail(run, f"reading {run.view}", exc)
            continue
        run.checks.append(c)
        report(run, c, args.rows)

    batches = [
        ("insert", "3a. Inserting the held-back orders and their lineitems (RF1)",
         lambda: tpch.insert_held_back(spark, DATABASE)),
        ("delete", f"3b. Deleting {DELETE:.1%} of the orders (smallest keys) and their lineitems (RF2)",
         lambda: tpch.delete_orders(spark, DATABASE, DELETE)),
        ("update", "3c. Updating lineitems (discount, quantity, ship date) and customers (market segment)",
         lambda: tpch.update_rows(spark, DATABASE, UPDATE_MODULUS)),
    ]
    for stage, title, apply in batches:
        step(title)
        t = time.perf_counter()
        changed = apply()
        console.print(f"  {changed.describe()} ({seconds(time.perf_counter() - t)})")
        for run in runs:
            if run.error:
                continue
            t = time.perf_counter()
            try:
                stats = spark.sql(f"REFRESH INCREMENTAL VIEW {run.view}").collect()
            except Exception as exc:
                fail(run, f"REFRESH INCREMENTAL VIEW {run.view}", exc)
                continue
            refresh_s = time.perf_counter() - t
            written = sum(int(r["rows_written"] or 0) for r in stats)
            try:
                c = check(spark, run, stage, refresh_s, written)
            except Exception as exc:
                fail(run, f"reading {run.view}", exc)
                continue
            run.checks.append(c)
            report(run, c, args.rows)

    step("4. Summary")
    summary(runs)
    errors = [r for r in runs if r.error]
    differ = [r for r in runs if any(c.problem for c in r.checks)]
    for r in errors:
        statement, message = r.error.split("\n", 1)
        lines = [line.strip() for line in message.splitlines() if line.strip()] or [""]
        first = " ".join(lines[:2] if "An error occurred while calling" in lines[0] else lines[:1])[:400]
        console.print(f"[bold red]error[/] {r.view}: {escape(statement)}: {escape(first)}")
    if errors or differ:
        console.print(f"[bold red]{len(differ)} view(s) differ, {len(errors)} failed[/]")
        return 1
    console.print("[green]every view agrees with its query after every batch[/]")
    return 0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor (default 1)")
    parser.add_argument("--warehouse", help="Spark warehouse folder (default: a fresh temporary folder, "
                                            "deleted at the end unless --keep)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary warehouse")
    parser.add_argument("--queries", default="q1,q6,q3",
                        help="comma-separated queries of sql/tpch, or 'all' (default q1,q6,q3)")
    parser.add_argument("--rows", type=int, default=3, help="rows of each view to print (default 3)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    temporary = args.warehouse is None
    warehouse = args.warehouse or tempfile.mkdtemp(prefix="spark_ivm_demo_")
    started = time.perf_counter()
    spark = None
    try:
        step("Starting Spark with Delta Lake and spark_ivm")
        spark = spark_ivm.session(warehouse=str(Path(warehouse).resolve()))
        console.print(f"  Spark {spark.version}, warehouse {warehouse} ({seconds(time.perf_counter() - started)})")
        return run_demo(spark, args)
    finally:
        if spark is not None:
            spark.stop()
        console.print(f"\ndemo took {seconds(time.perf_counter() - started)}")
        if temporary and not args.keep:
            shutil.rmtree(warehouse, ignore_errors=True)
        elif temporary:
            console.print(f"warehouse kept in {warehouse}")


if __name__ == "__main__":
    sys.exit(main())
