"""The benchmark: its aggregation and report (pure Python), and a smoke run on Spark (marker `runtime`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from spark_ivm.bench import report
from spark_ivm.bench.tpch import compare, same_bag

ROOT = Path(__file__).resolve().parents[1]


def round_(n, change, refresh, read, recompute, jobs=10, commits=1):
    return {"round": n, "change": change, "refresh_s": refresh, "read_s": read, "recompute_s": recompute,
            "refresh_jobs": jobs, "commits": commits, "agree": True}


def result(query, scale, rounds, status=report.OK, **extra):
    return {"query": query, "scale": scale, "status": status, "reason": None, "rounds": rounds, "maps": 3,
            "map_rows_total": 40, "map_bytes": 5000, "create_s": 2.0, "nochange_refresh_s": 0.5, **extra}


# -- numbers ---------------------------------------------------------------------------------------------
def test_median_skips_missing_values():
    assert report.median([3, None, 1, 2]) == 2
    assert report.median([4, 1, 3, 2]) == 2.5
    assert report.median([None]) is None
    assert report.median([]) is None


def test_ratio():
    assert report.ratio(6, 3) == 2
    assert report.ratio(None, 3) is None
    assert report.ratio(3, None) is None
    assert report.ratio(3, 0) is None


def test_summarize_takes_medians_over_inserts_and_deletes():
    rounds = [round_(1, "insert", 1.0, 0.5, 9.0, jobs=10), round_(1, "delete", 2.0, 0.5, 10.0, jobs=12),
              round_(2, "insert", 3.0, 0.5, 11.0, jobs=14)]
    s = report.summarize(result("q6", 0.1, rounds))
    assert s["refresh_s"] == 2.5  # median of 1.5, 2.5, 3.5: refresh + read
    assert s["refresh_only_s"] == 2.0
    assert s["recompute_s"] == 10.0
    assert s["speedup"] == pytest.approx(4.0)
    assert s["jobs_per_refresh"] == 12
    assert s["commits_per_refresh"] == 1
    assert s["rounds"] == 3
    assert (s["maps"], s["map_rows"], s["map_bytes"], s["create_s"]) == (3, 40, 5000, 2.0)


def test_summarize_without_rounds():
    s = report.summarize({"query": "q2", "scale": 1, "status": report.UNSUPPORTED, "reason": "no sql", "rounds": []})
    assert s["refresh_s"] is None and s["recompute_s"] is None and s["speedup"] is None
    assert s["reason"] == "no sql"


def test_growth_from_smallest_to_largest_scale():
    summaries = [report.summarize(r) for r in [
        result("q1", 1, [round_(1, "insert", 3.0, 1.0, 40.0)]),
        result("q1", 0.1, [round_(1, "insert", 1.5, 0.5, 4.0)]),
        result("q1", 0.01, [round_(1, "insert", 1.0, 0.0, 1.0)]),
        result("q6", 0.1, [round_(1, "insert", 1.0, 0.0, 1.0)]),  # one scale only: no growth
        result("q3", 0.1, [], status=report.UNSUPPORTED),
    ]]
    rows = report.growth(summaries)
    assert len(rows) == 1
    g = rows[0]
    assert (g["query"], g["from_scale"], g["to_scale"]) == ("q1", 0.01, 1)
    assert g["scale_growth"] == pytest.approx(100)
    assert g["refresh_growth"] == pytest.approx(4.0)
    assert g["recompute_growth"] == pytest.approx(40.0)


def test_queries_sort_by_number():
    assert sorted(["q10", "q2", "q1", "q22"], key=report.query_order) == ["q1", "q2", "q10", "q22"]


def test_failures_are_disagreements_and_failed_statements():
    results = [result("q1", 1, [], status=report.OK), result("q2", 1, [], status=report.UNSUPPORTED),
               result("q3", 1, [], status=report.DIFFER), result("q4", 1, [], status=report.FAILED)]
    assert [r["query"] for r in report.failures(results)] == ["q3", "q4"]


# -- text ------------------------------------------------------------------------------------------------
def test_formatting():
    assert report.fmt_seconds(None) == "-"
    assert report.fmt_seconds(1.234) == "1.23"
    assert report.fmt_seconds(12.34) == "12.3"
    assert report.fmt_seconds(123.4) == "123"
    assert report.fmt_ratio(2.345) == "2.35x"
    assert report.fmt_ratio(23.45) == "23.4x"
    assert report.fmt_ratio(None) == "-"
    assert report.fmt_count(12) == "12"
    assert report.fmt_count(12.5) == "12.5"
    assert report.fmt_count(1234567) == "1,234,567"
    assert report.fmt_bytes(512) == "512 B"
    assert report.fmt_bytes(2048) == "2.0 KB"
    assert report.fmt_bytes(3 * 1024 ** 3) == "3.0 GB"
    assert report.fmt_scale(0.1) == "0.1" and report.fmt_scale(1.0) == "1"


def test_markdown_table_escapes_pipes_and_aligns_numbers():
    text = report.markdown_table(["name", "n"], [["a|b", "1"]], {"n"})
    assert text.splitlines() == ["| name | n |", "| --- | ---: |", "| a\\|b | 1 |"]


def sample_report():
    results = [
        result("q1", 0.01, [round_(1, "insert", 1.0, 0.2, 3.0), round_(1, "delete", 1.2, 0.2, 3.2)]),
        result("q1", 0.1, [round_(1, "insert", 2.0, 0.2, 12.0), round_(1, "delete", 2.2, 0.2, 13.0)]),
        result("q6", 0.01, [round_(1, "insert", 0.5, 0.1, 1.0)]),
        {"query": "q2", "scale": 0.01, "status": report.UNSUPPORTED, "reason": "no sql/tpch/q2.sql", "rounds": []},
        {"query": "q2", "scale": 0.1, "status": report.UNSUPPORTED, "reason": "no sql/tpch/q2.sql", "rounds": []},
        result("q5", 0.01, [round_(1, "insert", 0.5, 0.1, 1.0)], status=report.DIFFER,
               reason="round 1 after insert: 1 row missing"),
    ]
    data = {"started": "2026-01-01T00:00:00",
            "settings": {"scales": [0.01, 0.1], "queries": ["q1", "q2", "q5", "q6"], "rounds": 1,
                         "batch_fraction": 0.001},
            "scales": [{"scale": 0.01, "load_s": 10.0, "batch": {"orders": 15, "lineitem": 60}}],
            "machine": {"cores": 2, "memory_bytes": 24 * 1024 ** 3, "spark": "4.2.0", "delta": "4.4.0",
                        "spark_conf": {"spark.master": "local[2]"}},
            "results": results}
    data["summary"] = [report.summarize(r) for r in results]
    data["growth"] = report.growth(data["summary"])
    return data


def test_markdown_report():
    text = report.markdown(sample_report())
    assert "| q1 | 0.01 | 1.30 | 3.10 | 2.38x | 10 | 1 | 3 | 40 | 4.9 KB | 2.00 | 0.50 | agree |" in text
    assert "| q1 | 0.1 | 2.30 | 12.5 | 5.43x |" in text
    assert "| q1 | 0.01 → 0.1 (10x data) | 1.77x | 4.03x |" in text
    assert "- q2: unsupported: no sql/tpch/q2.sql" in text
    assert text.count("q2: unsupported") == 1  # once, not once per scale factor
    assert "**q5 at SF 0.01: differ**: round 1 after insert: 1 row missing" in text
    assert "2 cores" in text and "24.0 GB memory" in text and "Spark 4.2.0" in text and "Delta Lake 4.4.0" in text
    lines = text.splitlines()
    assert lines.index("| q1 | 0.01 | 1.30 | 3.10 | 2.38x | 10 | 1 | 3 | 40 | 4.9 KB | 2.00 | 0.50 | agree |") < \
        next(i for i, line in enumerate(lines) if line.startswith("| q6 |"))


def test_steps_are_medians_per_step_with_reading_the_view():
    rounds = [{**round_(1, "insert", 2.0, 0.5, 9.0), "steps": {"progress": 0.2, "write": 1.0}},
              {**round_(1, "delete", 2.0, 0.7, 9.0), "steps": {"progress": 0.4, "write": 0.6, "batches": 0.3}},
              {**round_(2, "insert", 2.0, 0.9, 9.0), "steps": {"progress": 0.3, "write": 0.8}}]
    steps = report.summarize(result("q6", 1, rounds))["steps"]
    assert list(steps) == ["progress", "write", "batches", "read the view"]
    assert steps["progress"] == pytest.approx(0.3)
    assert steps["write"] == pytest.approx(0.8)
    assert steps["batches"] == 0  # a step a round did not report took no time in it
    assert steps["read the view"] == pytest.approx(0.7)


def test_targets_say_which_hold_which_do_not_and_what_was_not_measured():
    summaries = [report.summarize(r) for r in [
        result("q1", 0.1, [round_(1, "insert", 0.6, 0.2, 5.0)]),
        result("q1", 1, [{**round_(1, "insert", 0.6, 0.1, 9.0, jobs=3), "read_jobs": 0,
                          "steps": {"progress": 0.05, "write": 0.2, "view": 0.1}}],
               nochange_refresh_s=0.05, nochange_jobs=0),  # 0.7 s, 12.9x; fixed steps 0.45 s
        result("q6", 0.1, [round_(1, "insert", 1.0, 0.5, 1.0)]),
        result("q6", 1, [{**round_(1, "insert", 2.0, 1.0, 2.0, commits=2, jobs=4), "read_jobs": 3,
                          "steps": {"batches": 0.4, "write": 0.3}}],
               nochange_jobs=1),  # 3 s: 2x the small scale; fixed steps 1.7 s
    ]]
    baseline = [report.summarize(r) for r in [result("q1", 1, [round_(1, "insert", 2.0, 1.0, 9.0, jobs=9)]),
                                              result("q6", 1, [round_(1, "insert", 2.0, 1.0, 2.0, jobs=8)])]]
    checks = report.target_checks(summaries, report.growth(summaries), baseline)
    by = {(c["target"], c["query"]): c for c in checks}
    flat = "refresh+read grows at most 1.2x from SF 0.1 to SF 1"
    assert by[(flat, "q1")]["holds"] is True and by[(flat, "q1")]["value"] == pytest.approx(0.875)
    assert by[(flat, "q6")]["holds"] is False and by[(flat, "q6")]["value"] == pytest.approx(2.0)
    assert by[(flat, "q3")]["holds"] is None  # not in the run
    assert by[("refresh+read at most 0.8 s at SF 1", "q1")]["holds"] is True
    assert by[("refresh+read at most 0.6 s at SF 1", "q6")]["holds"] is False
    assert by[("refresh+read runs at most 4 Spark jobs at SF 1", "q6")]["value"] == 7
    assert by[("one commit per refresh at SF 1", "q6")]["holds"] is False
    assert by[("a refresh with no changes at most 0.1 s", "q1")]["holds"] is True
    assert by[("a refresh with no changes runs no Spark job", "q1")]["holds"] is True
    assert by[("a refresh with no changes runs no Spark job", "q6")]["holds"] is False
    assert by[("at least 4x faster than recompute at SF 1", "q1")]["holds"] is True
    assert by[("faster than recompute at SF 1", "q6")]["holds"] is False  # 2 s against 3 s
    fixed = "fixed steps (and reading the view) at most 0.5 s at SF 1"
    assert by[(fixed, "q1")]["holds"] is True and by[(fixed, "q1")]["value"] == pytest.approx(0.45)
    assert by[(fixed, "q6")]["holds"] is False and by[(fixed, "q6")]["value"] == pytest.approx(1.7)
    third = "Spark jobs per refresh at most a third of the baseline's"
    assert by[(third, "q1")]["holds"] is True and by[(third, "q6")]["holds"] is False
    unmeasured = {c["query"]: c["holds"] for c in report.target_checks(summaries, []) if c["target"] == third}
    assert unmeasured == {"q1": None, "q6": None}  # no baseline: not measured
    table = report.targets_table(checks)
    assert "| refresh+read at most 0.6 s at SF 1 | - | q6 (3.00 s) | - |" in table
    # A view whose refreshes had nothing to apply is left out of the targets of every query, but for the
    # refresh with no changes.
    idle = report.summarize(result("q2", 1, [round_(1, "insert", 0.1, 0.1, 5.0, commits=0)], nochange_jobs=0))
    idle_checks = {c["target"] for c in report.target_checks([idle], []) if c["query"] == "q2"}
    assert idle_checks == {"a refresh with no changes runs no Spark job", "a refresh with no changes at most 0.1 s",
                           "CREATE at most 3x the query's time at SF 1",
                           "map store no larger than the tables it reads at SF 1"}
    assert "| at least 2x faster than recompute at SF 1 | - | - | q3, q10, q12 |" in table


def test_targets_at_sf_10_ask_more_of_a_longer_query_and_a_flat_refresh_from_sf_1():
    summaries = [report.summarize(r) for r in [
        result("q1", 1, [round_(1, "insert", 0.3, 0.1, 2.0)]),
        result("q1", 10, [round_(1, "insert", 0.4, 0.1, 12.0)]),  # a long query: the higher speedup needed, met
        result("q3", 1, [round_(1, "insert", 0.3, 0.1, 2.0)]),
        result("q3", 10, [round_(1, "insert", 1.0, 0.2, 11.0)]),  # a long query: the higher speedup not met
        result("q6", 1, [round_(1, "insert", 0.2, 0.1, 1.0)]),
        result("q6", 10, [round_(1, "insert", 0.25, 0.05, 1.8)]),  # a short query: the lower speedup needed, met
    ]]
    by = {(c["target"], c["query"]): c for c in report.target_checks(summaries, report.growth(summaries))}
    fast = "at least 5x faster than recompute at SF 10 (10x where the query takes 10 s or more)"
    assert by[(fast, "q1")]["holds"] is True and by[(fast, "q6")]["holds"] is True
    assert by[(fast, "q3")]["holds"] is False and by[(fast, "q3")]["value"] == pytest.approx(11 / 1.2)
    flat = "refresh+read grows at most 1.3x from SF 1 to SF 10"
    assert by[(flat, "q1")]["value"] == pytest.approx(1.25) and by[(flat, "q1")]["holds"] is True
    assert by[(flat, "q3")]["holds"] is False and by[(flat, "q6")]["holds"] is True
    # A run without SF 10 leaves its targets out.
    at_sf_1 = [s for s in summaries if s["scale"] == 1]
    assert not any("SF 10" in c["target"] for c in report.target_checks(at_sf_1, []))


def test_the_report_compares_with_a_baseline():
    now = [report.summarize(result("q1", 1, [round_(1, "insert", 0.5, 0.1, 3.0, jobs=3)]))]
    before = [report.summarize(result("q1", 1, [round_(1, "insert", 2.0, 1.0, 3.0, jobs=9)])),
              report.summarize(result("q3", 1, [round_(1, "insert", 2.0, 1.0, 3.0)]))]
    table = report.baseline_table(now, before)
    assert "| q1 | 1 | 3.00 | 0.60 | 5.00x | 9 | 3 | 3.00 | 3.00 |" in table
    assert "q3" not in table  # not measured now


def test_bounds_split_a_slower_refresh_into_fixed_steps_and_the_views_work():
    fixed_bound = {**round_(1, "insert", 1.5, 1.0, 2.0),
                   "steps": {"progress": 0.1, "batches": 0.5, "triggers": 0.4, "write": 0.5}}  # fixed 2.1 s
    own_bound = {**round_(1, "insert", 4.0, 0.5, 3.0),
                 "steps": {"batches": 0.5, "store read": 0.5, "triggers": 3.0}}  # view's work 3.5 s
    faster = {**round_(1, "insert", 0.5, 0.1, 9.0), "steps": {"triggers": 0.5}}
    both = {**round_(1, "insert", 3.0, 1.0, 1.0), "steps": {"batches": 1.0, "triggers": 2.0}}  # 2 s each
    summaries = [report.summarize(result(q, 1, [r])) for q, r in
                 [("q6", fixed_bound), ("q3", own_bound), ("q1", faster), ("q9", both)]]
    rows = report.bounds(summaries)
    assert [r["query"] for r in rows] == ["q3", "q6", "q9"]  # q1 is faster than recompute
    q3, q6, q9 = rows
    assert q9["bound"] == "each alone"
    assert q6["fixed_s"] == pytest.approx(2.1) and q6["own_s"] == pytest.approx(0.4)
    assert q6["bound"] == "fixed steps alone"
    assert q3["fixed_s"] == pytest.approx(1.0) and q3["own_s"] == pytest.approx(3.5)
    assert q3["bound"] == "the view's work alone"
    assert "| q6 | 1 | 2.50 | 2.00 | 2.10 | 0.40 | fixed steps alone |" in report.bounds_table(rows)


def test_a_report_without_the_target_scales_lists_no_targets():
    text = report.markdown(sample_report())  # SF 0.01 and 0.1 only
    assert "Targets" not in text


def test_a_stopped_run_keeps_and_says_what_it_measured(tmp_path):
    from spark_ivm.bench.run import save

    data = sample_report()
    del data["summary"], data["growth"]
    data["results"] = data["results"][:2]
    path = save(data, tmp_path, "run")
    assert [f.name for f in tmp_path.iterdir()] == ["run.json"]  # written whole: no partial file left
    assert [r["query"] for r in json.loads(path.read_text())["results"]] == ["q1", "q1"]
    assert "stopped before its end" not in report.markdown(data)
    data["interrupted"] = "KeyboardInterrupt"
    assert "- **stopped before its end** (KeyboardInterrupt): the results so far" in report.markdown(data)


def test_charts_are_written(tmp_path):
    files = report.charts(sample_report(), tmp_path / "run")
    assert [f.name for f in files] == ["run-refresh_vs_recompute.png", "run-scaling.png"]
    for f in files:
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_charts_without_measurements(tmp_path):
    data = sample_report()
    data["summary"] = [s for s in data["summary"] if s["status"] == report.UNSUPPORTED]
    assert report.charts(data, tmp_path / "run") == []


# -- comparing results -----------------------------------------------------------------------------------
def test_same_bag_counts_duplicates():
    assert same_bag([(1, "a"), (1, "a"), (2, "b")], [(2, "b"), (1, "a"), (1, "a")])
    assert not same_bag([(1, "a"), (1, "a")], [(1, "a")])
    assert not same_bag([(1, "a"), (1, "a"), (2, "b")], [(1, "a"), (2, "b"), (2, "b")], rel_tol=1e-9)


def test_same_bag_tolerates_rounding_of_fractional_numbers_only():
    assert not same_bag([(1, 0.1 + 0.2)], [(1, 0.3)])
    assert same_bag([(1, 0.1 + 0.2), (2, 5.0)], [(2, 5.0), (1, 0.3)], rel_tol=1e-9)
    assert same_bag([(Decimal("1.0000000001"), None)], [(Decimal("1.0000000002"), None)], rel_tol=1e-9)
    assert not same_bag([(1, 0.3)], [(1, 0.31)], rel_tol=1e-9)
    assert not same_bag([(1, date(2020, 1, 1))], [(2, date(2020, 1, 1))], rel_tol=1e-9)


def test_compare_as_bags_ignores_order():
    sql = "SELECT a, SUM(b) AS s FROM t GROUP BY a ORDER BY s"
    assert compare(sql, [(1, 2.0), (2, 3.0)], [(2, 3.0), (1, 2.0)], ["a", "s"], ordered=False) == (None, "")
    assert compare(sql, [(1, 2.0), (2, 3.0)], [(2, 3.0), (1, 2.0)], ["a", "s"])[0] == "rows in a different order"
    problem, _ = compare(sql, [(1, 2.0)], [(1, 2.5)], ["a", "s"], ordered=False, rel_tol=1e-9)
    assert problem.startswith("1 query rows missing from the view, 1 extra rows in the view")


# -- the benchmark itself, on Spark ----------------------------------------------------------------------
@pytest.mark.runtime
@pytest.mark.on_demand  # a Spark process of its own and TPC-H generated: minutes; each benchmark run does as much
def test_bench_smoke(tmp_path):
    """SF 0.01, one round, q6 (and q2, to see a missing query reported, not fatal)."""
    out = tmp_path / "results"
    env = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    run = subprocess.run(
        [sys.executable, "-m", "spark_ivm.bench", "--sf", "0.01", "--rounds", "1", "--queries", "q6,q99",
         "--out", str(out), "--warehouse", str(tmp_path / "warehouse")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [json_file] = out.glob("*.json")
    data = json.loads(json_file.read_text())
    by_query = {r["query"]: r for r in data["results"]}
    q6 = by_query["q6"]
    assert q6["status"] == report.OK
    assert [(r["change"], r["agree"]) for r in q6["rounds"]] == [("insert", True), ("delete", True)]
    assert all(r["commits"] == 1 and r["refresh_jobs"] is not None for r in q6["rounds"])  # often none
    assert q6["nochange_commits"] == 0
    assert q6["maps"] >= 1 and q6["map_bytes"] > 0 and q6["create_s"] > 0 and q6["source_bytes"] > q6["map_bytes"]
    assert by_query["q99"]["status"] == report.UNSUPPORTED
    assert data["machine"]["cores"] and data["machine"]["spark"]
    md = json_file.with_suffix(".md").read_text()
    assert "| q6 | 0.01 |" in md and "q99: unsupported" in md
    stem = json_file.stem
    assert sorted(p.name for p in out.glob("*.png")) == [f"{stem}-refresh_vs_recompute.png", f"{stem}-scaling.png"]
    assert "| q6 | 0.01 |" in run.stdout


def test_targets_weigh_create_against_the_query_and_the_map_store_against_its_tables():
    summaries = [report.summarize(r) for r in [
        result("q1", 1, [round_(1, "insert", 0.3, 0.1, 2.0)], create_s=5.0, map_bytes=10, source_bytes=100),
        result("q9", 1, [round_(1, "insert", 0.3, 0.1, 2.0)], create_s=7.0, map_bytes=300, source_bytes=100),
        result("q5", 10, [round_(1, "insert", 0.3, 0.1, 20.0)], create_s=200.0, map_bytes=5000),  # tables unknown
    ]]
    by = {(c["target"], c["query"]): c for c in report.target_checks(summaries, [])}
    create, store = "CREATE at most 3x the query's time at SF 1", "map store no larger than the tables it reads at SF 1"
    assert by[(create, "q1")]["holds"] is True and by[(create, "q1")]["value"] == pytest.approx(2.5)
    assert by[(create, "q9")]["holds"] is False and by[(create, "q9")]["value"] == pytest.approx(3.5)
    assert by[(store, "q1")]["holds"] is True and by[(store, "q9")]["value"] == pytest.approx(3.0)
    assert by[("CREATE at most 3x the query's time at SF 10", "q5")]["holds"] is False
    assert by[("map store no larger than the tables it reads at SF 10", "q5")]["holds"] is None  # not measured
