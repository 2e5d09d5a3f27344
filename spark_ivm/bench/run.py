"""spark_ivm benchmark: TPC-H queries as incremental views, refreshed after small batches, against
running the queries from scratch.

    ./build.sh bench [--sf 0.1,1] [--queries all|q1,q3,q6] [--rounds 5] [--batch-fraction 0.001]
                     [--out bench/results] [--warehouse DIR] [--keep] [--cache DIR]
    ./build.sh bench --report bench/results/<timestamp>.json   # the report again from saved results
    ./build.sh bench --baseline docs/bench/<earlier>.json       # side by side with an earlier run

For each scale factor: generate TPC-H with tpchgen-cli (cached per scale factor), load it into Delta
tables with a batch of the orders (the largest keys, `--batch-fraction` of them) and their lineitems held
back. Before the first scale's measurements, the first query runs one unmeasured round, so that the JVM's
compilation of Spark and Delta code is not counted to whichever query and scale comes first.
For each query: CREATE INCREMENTAL VIEW (timed); then each round inserts the batch, refreshes and
reads the view, and deletes the batch, refreshes and reads again. Every refresh + read is timed against
running the query itself on the same data in the same session, and the two results must agree (same
rows as bags, fractional numbers within rounding). Also counted per refresh: Spark jobs and commits to the
view's map store; per view: maps, their rows and bytes, the time to create it and a refresh with nothing
to apply.

Writes <out>/<timestamp>.json, <timestamp>.md (also printed) and PNG charts. Exit code 1 when a view
disagrees with its query or a statement fails; queries without a file in sql/tpch or refused by CREATE
INCREMENTAL VIEW are reported as unsupported and skipped.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import sqlglot
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from sqlglot import exp

import spark_ivm
from spark_ivm.bench import report
from spark_ivm.bench import tpch
from spark_ivm.errors import UnsupportedQueryError
from spark_ivm.runtime.mapstore import StoreColumns, live_rows_sql
from spark_ivm.session import PROJECT_ROOT

ALL_QUERIES = [f"q{n}" for n in range(1, 23)]
DEFAULT_SCALES = "0.1,1"
DEFAULT_OUT = PROJECT_ROOT / "bench" / "results"
DEFAULT_CACHE = PROJECT_ROOT / ".cache" / "tpch"
REL_TOL = 1e-9  # fractional numbers of the view and the query may differ by this much (summing order)
SPARK_SETTINGS = ("spark.master", "spark.driver.memory", "spark.sql.shuffle.partitions")

console = Console(highlight=False, soft_wrap=True,
                  width=None if sys.stdout.isatty() else shutil.get_terminal_size((140, 24)).columns)


# -- measuring -------------------------------------------------------------------------------------------
class Measured:
    """Wall-clock seconds and Spark jobs of one step (filled in when its `with` block ends)."""
    seconds: float | None = None
    jobs: int | None = None


@contextmanager
def measured(spark, label: str):
    """Time a step and count the Spark jobs it runs, through a job group of its own."""
    sc = spark.sparkContext
    group = f"spark_ivm_bench_{label}_{uuid.uuid4().hex[:8]}"
    m = Measured()
    sc.setJobGroup(group, f"spark_ivm bench: {label}")
    started = time.perf_counter()
    try:
        yield m
    finally:
        m.seconds = time.perf_counter() - started
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            sc.setLocalProperty(key, None)
        m.jobs = len(sc.statusTracker().getJobIdsForGroup(group))


def store_version(spark, store: str) -> int:
    """The latest version of a Delta table (its commits so far, minus one)."""
    return int(spark.sql(f"DESCRIBE HISTORY {store} LIMIT 1").collect()[0]["version"])


def map_stats(spark, view: str, store: str) -> dict:
    """Maps of a view, the map store's rows per map_id (maps that share rows have one) and its size on
    disk."""
    shown = [r for r in spark.sql("SHOW INCREMENTAL VIEWS").collect() if r["name"] == view]
    names = list(shown[0]["maps"]) if shown else []
    columns = StoreColumns(tuple((f.name, f.dataType.simpleString()) for f in spark.table(store).schema.fields))
    rows = {str(r["map_id"]): int(r["n"]) for r in spark.sql(
        f"SELECT map_id, COUNT(*) AS n FROM ({live_rows_sql(store, columns)}) GROUP BY map_id").collect()}
    detail = spark.sql(f"DESCRIBE DETAIL {store}").collect()[0]
    return {"maps": len(names), "map_rows": rows, "map_rows_total": sum(rows.values()),
            "map_bytes": int(detail["sizeInBytes"]), "map_files": int(detail["numFiles"])}


def source_bytes(spark, database: str, sql: str) -> int:
    """The bytes of the tables the query reads (their Delta files), against which its map store is weighed."""
    tables = {t.name.lower() for t in sqlglot.parse_one(sql, read="spark").find_all(exp.Table)} & set(tpch.TABLES)
    return sum(int(spark.sql(f"DESCRIBE DETAIL {database}.{t}").collect()[0]["sizeInBytes"]) for t in sorted(tables))


def refresh(spark, view: str, store: str) -> dict:
    """REFRESH INCREMENTAL VIEW, timed, with its Spark jobs and commits to the map store."""
    before = store_version(spark, store)
    with measured(spark, "refresh") as m:
        stats = spark.sql(f"REFRESH INCREMENTAL VIEW {view}").collect()
    return {"refresh_s": m.seconds, "refresh_jobs": m.jobs, "commits": store_version(spark, store) - before,
            "rows_written": int(stats[0]["rows_written"] or 0) if stats else 0,
            "refresh_status": stats[0]["status"] if stats else None,
            "execution": stats[0]["execution"] if stats else None,
            "plan": stats[0]["plan"] if stats else None,
            "steps": json.loads(stats[0]["steps"]) if stats else {}}


def refresh_and_check(spark, query: tpch.Query, view: str, store: str) -> dict:
    """One measured refresh: refresh + read the view, then the query itself; do they agree?"""
    out = refresh(spark, view, store)
    with measured(spark, "read") as m:
        view_df = spark.table(view)
        actual = view_df.collect()
    out.update(read_s=m.seconds, read_jobs=m.jobs, view_rows=len(actual))
    with measured(spark, "recompute") as m:
        query_df = spark.sql(query.sql)
        expected = query_df.collect()
    out.update(recompute_s=m.seconds, recompute_jobs=m.jobs)
    if view_df.columns != query_df.columns:
        problem, note = f"columns differ: query {query_df.columns}, view {view_df.columns}", ""
    else:
        problem, note = tpch.compare(query.sql, expected, actual, query_df.columns, ordered=False, rel_tol=REL_TOL)
    out.update(agree=problem is None, problem=problem, note=note)
    return out


# -- one query -------------------------------------------------------------------------------------------
def run_query(spark, database: str, scale: float, name: str, rounds: int, step, keep: bool = False) -> dict:
    """Create the view of one query, run the rounds, return its record. `step(text)` shows progress."""
    result = {"query": name, "scale": scale, "status": report.OK, "reason": None, "title": None,
              "create_s": None, "create_jobs": None, "rounds": []}
    path = tpch.QUERY_DIR / f"{name}.sql"
    if not path.is_file():
        return {**result, "status": report.UNSUPPORTED, "reason": f"no sql/tpch/{name}.sql"}
    query = tpch.read_query(name)
    result["title"] = query.title
    view = f"{database}.bench_{name}"
    store = f"{view}__ivm_maps"

    step("create")
    spark.sql(f"DROP INCREMENTAL VIEW IF EXISTS {view}")
    try:
        with measured(spark, "create") as m:
            spark.sql(f"CREATE INCREMENTAL VIEW {view} AS\n{query.sql}")
    except UnsupportedQueryError as exc:
        return {**result, "status": report.UNSUPPORTED, "reason": one_line(exc)}
    except Exception as exc:
        return {**result, "status": report.FAILED, "reason": f"CREATE INCREMENTAL VIEW: {one_line(exc)}"}
    result.update(create_s=m.seconds, create_jobs=m.jobs)

    batch_in = False  # the held-back batch is in the tables (undo it whatever happens)
    statement = "reading the map store"
    try:
        result.update(map_stats(spark, view, store), source_bytes=source_bytes(spark, database, query.sql))
        statement = "REFRESH (nothing changed)"
        step("refresh, nothing changed")
        cold = refresh(spark, view, store)
        result.update(nochange_cold_s=cold["refresh_s"])
        for n in range(1, rounds + 1):
            for change in ("insert", "delete"):
                statement = f"round {n}: {change}"
                step(f"round {n}/{rounds}: {change} the batch")
                if change == "insert":
                    changed = tpch.insert_held_back(spark, database, keep=True)
                    batch_in = True
                else:
                    changed = tpch.delete_held_back(spark, database)
                    batch_in = False
                step(f"round {n}/{rounds}: refresh after {change}, read, recompute")
                statement = f"round {n}: refresh after {change}"
                measured_round = {"round": n, "change": change, "changed": changed.describe(),
                                  **refresh_and_check(spark, query, view, store)}
                result["rounds"].append(measured_round)
                if not measured_round["agree"]:
                    result["status"] = report.DIFFER
                    result["reason"] = result["reason"] or f"round {n} after {change}: {measured_round['problem']}"
        statement = "REFRESH (nothing changed)"
        step("refresh, nothing changed")
        warm = refresh(spark, view, store)
        result.update(nochange_refresh_s=warm["refresh_s"], nochange_jobs=warm["refresh_jobs"],
                      nochange_commits=warm["commits"])
        after = map_stats(spark, view, store)
        result.update(map_bytes_after=after["map_bytes"], map_files_after=after["map_files"])
    except Exception as exc:
        result.update(status=report.FAILED, reason=f"{statement}: {one_line(exc)}")
    finally:
        if batch_in:
            tpch.delete_held_back(spark, database)
        if not keep:
            try:
                spark.sql(f"DROP INCREMENTAL VIEW IF EXISTS {view}")
            except Exception as exc:  # the result is what matters; say so and go on
                console.print(f"[yellow]could not drop {view}: {escape(one_line(exc))}[/]")
    return result


def one_line(exc: BaseException, limit: int = 500) -> str:
    """An exception's message in one line (a Java stack trace cut to its first lines)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join(lines[:3]) if lines else type(exc).__name__
    return text if len(text) <= limit else text[:limit] + " …"


# -- one scale factor ------------------------------------------------------------------------------------
def database_name(scale: float) -> str:
    return "bench_sf" + report.fmt_scale(scale).replace(".", "_").replace("-", "_")


def tables_needed(queries: list[str]) -> list[str]:
    """The tables the queries read, and the two every batch changes."""
    needed = {"orders", "lineitem"}
    for name in queries:
        if (tpch.QUERY_DIR / f"{name}.sql").is_file():
            needed.update(tpch.tables_read(tpch.read_query(name).sql))
    return [t for t in tpch.TABLES if t in needed]


def run_scale(spark, scale: float, queries: list[str], args, progress, task, data: dict, saved,
              warm_up: bool = False) -> None:
    """Load one scale factor and run every query on it, adding to `data` and calling `saved()` after
    each query; with warm_up, first one unmeasured round of the first query."""
    database = database_name(scale)
    data_dir = Path(args.cache) / f"sf{report.fmt_scale(scale)}"
    progress.update(task, description=f"SF {scale:g}: generating (cached in {data_dir.name}) and loading TPC-H")
    started = time.perf_counter()
    counts = tpch.load_tpch(spark, scale, database, tables_needed(queries), hold_back=args.batch_fraction,
                            data_dir=data_dir)
    spark.sql(f"USE {database}")
    info = {"scale": scale, "load_s": time.perf_counter() - started, "rows": counts,
            "batch": {"orders": counts.get("orders_pending", 0), "lineitem": counts.get("lineitem_pending", 0)}}
    data["scales"].append(info)
    progress.console.print(f"SF {scale:g}: loaded {counts.get('lineitem', 0):,} lineitems in "
                           f"{info['load_s']:.1f}s; batch of {info['batch']['orders']:,} orders and "
                           f"{info['batch']['lineitem']:,} lineitems")

    def record(result: dict) -> None:
        data["results"].append(result)
        saved()

    if info["batch"]["orders"] == 0:
        reason = f"--batch-fraction {args.batch_fraction} holds back no order at SF {scale:g}"
        progress.console.print(f"[bold red]SF {scale:g}: {reason}[/]")
        for name in queries:
            record({"query": name, "scale": scale, "status": report.FAILED, "reason": reason, "rounds": []})
            progress.advance(task)
        return
    if warm_up:
        # The first minute of a JVM runs Spark's and Delta's code interpreted or barely compiled, which
        # would be counted to the first query measured.
        started = time.perf_counter()
        run_query(spark, database, scale, queries[0], 1,
                  lambda text: progress.update(task, description=f"SF {scale:g}: warming up with {queries[0]}: {text}"))
        data["warm_up_s"] = time.perf_counter() - started
    for name in queries:
        def step(text: str, name=name) -> None:
            progress.update(task, description=f"SF {scale:g} {name}: {text}")

        result = run_query(spark, database, scale, name, args.rounds, step, keep=args.keep)
        record(result)
        progress.console.print(describe(result))
        progress.advance(task)
    if not args.keep:
        spark.sql("USE default")
        spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")


def describe(result: dict) -> str:
    """One progress line for a finished query."""
    head = f"SF {result['scale']:g} {result['query']}: "
    if result["status"] == report.UNSUPPORTED:
        return head + f"[yellow]unsupported: {escape(result['reason'] or '')}[/]"
    if result["status"] == report.FAILED:
        return head + f"[bold red]FAILED: {escape(result['reason'] or '')}[/]"
    s = report.summarize(result)
    mark = "[green]agree[/]" if result["status"] == report.OK else f"[bold red]DIFFER: {escape(result['reason'])}[/]"
    return (head + f"refresh+read {report.fmt_seconds(s['refresh_s'])}s, recompute "
            f"{report.fmt_seconds(s['recompute_s'])}s ({report.fmt_ratio(s['speedup'])}), "
            f"{report.fmt_count(s['jobs_per_refresh'])} jobs and {report.fmt_count(s['commits_per_refresh'])} "
            f"commit(s) per refresh, create {report.fmt_seconds(s['create_s'])}s: {mark}")


# -- the whole run ---------------------------------------------------------------------------------------
def machine(spark) -> dict:
    info = {
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "spark": spark.version,
        "delta": _version("delta-spark"),
        "spark_ivm": spark_ivm.__version__,
        "tpchgen_cli": _version("tpchgen-cli"),
        "spark_conf": {k: spark.conf.get(k, None) or spark.sparkContext.getConf().get(k) for k in SPARK_SETTINGS},
    }
    try:
        info["java"] = spark.sparkContext._jvm.System.getProperty("java.version")
    except Exception:  # not a classic session
        info["java"] = None
    return info


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def save(data: dict, out: Path, stamp: str) -> Path:
    """Aggregate and write the JSON (also after every query, so a long run stopped half way keeps what
    it measured: `--report` makes the Markdown and charts from it)."""
    data["summary"] = [report.summarize(r) for r in data["results"]]
    data["growth"] = report.growth(data["summary"])
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / f"{stamp}.json"
    partial = json_path.with_suffix(".json.partial")
    partial.write_text(json.dumps(data, indent=1, default=str) + "\n")
    partial.replace(json_path)  # never a half-written results file
    return json_path


def finish(data: dict, out: Path, stamp: str) -> tuple[Path, Path, list[Path]]:
    """Write the JSON, the Markdown and the charts."""
    json_path = save(data, out, stamp)
    md_path = out / f"{stamp}.md"
    md_path.write_text(report.markdown(data))
    return json_path, md_path, report.charts(data, out / stamp)


def run(args) -> int:
    scales = parse_scales(args.sf)
    queries = parse_queries(args.queries)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    temporary = args.warehouse is None
    if temporary:
        DEFAULT_CACHE.parent.mkdir(parents=True, exist_ok=True)
        warehouse = tempfile.mkdtemp(prefix="bench-warehouse-", dir=DEFAULT_CACHE.parent)
    else:
        warehouse = args.warehouse
    data = {"started": datetime.now().isoformat(timespec="seconds"),
            "settings": {"scales": scales, "queries": queries, "rounds": args.rounds,
                         "batch_fraction": args.batch_fraction},
            "scales": [], "results": []}
    if args.baseline:
        data["baseline"] = load_baseline(args.baseline)
    started = time.perf_counter()
    spark = None
    try:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=True) as progress:
            task = progress.add_task("starting Spark", total=len(scales) * len(queries))
            spark = spark_ivm.session(warehouse=str(Path(warehouse).resolve()), log_level="ERROR")
            data["machine"] = machine(spark)
            for i, scale in enumerate(scales):
                run_scale(spark, scale, queries, args, progress, task, data,
                          saved=lambda: save(data, Path(args.out), stamp), warm_up=i == 0)
    except BaseException as exc:  # Ctrl-C or a failure outside one query: report what was measured
        data["interrupted"] = one_line(exc) if str(exc) else type(exc).__name__
        console.print(f"[bold red]stopped: {escape(data['interrupted'])}[/]")
        if not data["results"]:
            raise
    finally:
        if spark is not None:
            spark.stop()
        if temporary and not args.keep:
            shutil.rmtree(warehouse, ignore_errors=True)
        elif temporary:
            console.print(f"warehouse kept in {warehouse}")
    data["seconds"] = time.perf_counter() - started
    return publish(data, Path(args.out), stamp)


def publish(data: dict, out: Path, stamp: str) -> int:
    json_path, md_path, pngs = finish(data, out, stamp)
    console.print()
    console.print(md_path.read_text(), markup=False)
    console.print(f"results: {json_path}, {md_path}" + "".join(f", {p}" for p in pngs))
    bad = report.failures(data["results"])
    if data.get("interrupted"):
        console.print(f"[bold red]the run stopped before its end: {escape(data['interrupted'])}[/]")
    if bad:
        console.print(f"[bold red]{len(bad)} query run(s) failed or disagreed with the query:[/]")
        for r in bad:
            console.print(f"[bold red]  {r['query']} at SF {r['scale']:g}: {r['status']}: {escape(r['reason'] or '')}[/]")
    return 1 if bad or data.get("interrupted") else 0


def rereport(path: str, out: str | None, baseline: str | None = None) -> int:
    """The Markdown and charts again from a saved results file."""
    source = Path(path)
    data = json.loads(source.read_text())
    if baseline:
        data["baseline"] = load_baseline(baseline)
    return publish(data, Path(out) if out else source.parent, source.stem)


def load_baseline(path: str) -> dict:
    """An earlier run's summary to compare with (see report.baseline_table)."""
    data = json.loads(Path(path).read_text())
    summary = data.get("summary") or [report.summarize(r) for r in data.get("results", [])]
    return {"source": Path(path).name, "started": data.get("started"), "summary": summary}


# -- command line ----------------------------------------------------------------------------------------
def parse_scales(text: str) -> list[float]:
    try:
        scales = sorted({float(s) for s in text.split(",") if s.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"scale factors must be numbers: {text!r}") from None
    if not scales or any(s <= 0 for s in scales):
        raise argparse.ArgumentTypeError(f"scale factors must be positive: {text!r}")
    return scales


def parse_queries(text: str) -> list[str]:
    if text.strip().lower() == "all":
        return list(ALL_QUERIES)
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    names = [n if n.startswith("q") else f"q{n}" for n in names]
    if not names:
        raise argparse.ArgumentTypeError("no queries given")
    return list(dict.fromkeys(names))


def fraction(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a fraction between 0 and 1, not {text}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {text}")
    return value


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m spark_ivm.bench", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[2:]))
    parser.add_argument("--sf", default=DEFAULT_SCALES,
                        help=f"comma-separated TPC-H scale factors (default {DEFAULT_SCALES})")
    parser.add_argument("--queries", default="all",
                        help="comma-separated queries, e.g. q1,q3,q6, or 'all' for q1…q22 (default all)")
    parser.add_argument("--rounds", type=positive_int, default=5,
                        help="rounds of insert + refresh, delete + refresh per query (default 5)")
    parser.add_argument("--batch-fraction", type=fraction, default=0.001,
                        help="fraction of the orders inserted and deleted by each batch (default 0.001)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="results folder (default bench/results)")
    parser.add_argument("--warehouse", help="Spark warehouse folder (default: a fresh folder under .cache, "
                                            "deleted at the end unless --keep)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the views, the loaded tables and a temporary warehouse for inspection")
    parser.add_argument("--cache", default=str(DEFAULT_CACHE),
                        help="folder of generated TPC-H data, one sub-folder per scale factor (default .cache/tpch)")
    parser.add_argument("--report", metavar="RESULTS_JSON",
                        help="do not run: write the Markdown and charts again from a saved results file")
    parser.add_argument("--baseline", metavar="RESULTS_JSON",
                        help="an earlier run's results to compare with: the report shows both side by side and "
                             "checks the targets measured against it")
    args = parser.parse_args(argv)
    try:
        parse_scales(args.sf)
        parse_queries(args.queries)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report:
        return rereport(args.report, args.out if args.out != str(DEFAULT_OUT) else None, args.baseline)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
