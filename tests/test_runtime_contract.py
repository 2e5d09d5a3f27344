"""The runtime's contract, through `spark.sql(...)`:

- the statements (CREATE / REFRESH [FULL] / REFRESH … VIEWS / DROP / SHOW / EXPLAIN INCREMENTAL VIEW)
  and the pass-through of every other statement;
- `spark.table(view)` returns exactly what the defining query returns on the sources as of the last
  refresh: names, order and types of the columns, bag semantics, AVG, HAVING, ORDER BY / LIMIT,
  groups that die at count 0 but live at SUM 0, NULL sums, NULL group keys, empty global aggregates;
- step tests: apply this DML, REFRESH, the view's rows are the query's rows;
- persistence: a new process refreshes and reads a view made by an earlier one.

All but the persistence test run in CI; that one, which starts two Spark processes of its own, is
`on_demand` (tests/test_crash_resume.py refreshes views in new processes in CI).

Every test works in its own database (`fresh_db`) on tiny Delta tables. The module keeps its views
in its own catalog table (`spark.ivm.catalog`), so that SHOW / REFRESH INCREMENTAL VIEWS see only
this module's views.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

import pytest

# End-to-end (see pyproject.toml): part of ./build.sh test, except the persistence test (on_demand: it
# starts two Spark processes of its own); all of it: ./build.sh test -m runtime
pytestmark = pytest.mark.runtime

import spark_ivm

CATALOG_CONF = "spark.ivm.catalog"


# -- helpers ---------------------------------------------------------------------------------------
def _cell(v):
    if isinstance(v, float):
        return round(v, 9)
    return v


def row_key(row: tuple) -> tuple:
    """Sort key of a row: NULLs first in every column, then the values."""
    return tuple((v is not None, v) for v in row)


def rows(df) -> list[tuple]:
    """The rows of df as a sorted list (duplicates kept)."""
    return sorted((tuple(_cell(v) for v in r) for r in df.collect()), key=row_key)


def schema(df) -> list[tuple[str, object]]:
    return [(f.name, f.dataType) for f in df.schema.fields]


def assert_view_is_query(spark, view: str, query: str, ordered: bool = False) -> list[tuple]:
    """The view has the query's columns (names, order, types) and rows; returns the rows."""
    got, want = spark.table(view), spark.sql(query)
    assert schema(got) == schema(want)
    if ordered:
        got_rows = [tuple(_cell(v) for v in r) for r in got.collect()]
        want_rows = [tuple(_cell(v) for v in r) for r in want.collect()]
    else:
        got_rows, want_rows = rows(got), rows(want)
    assert got_rows == want_rows
    return got_rows


def refresh(spark, view: str, full: bool = False):
    result = spark.sql(f"REFRESH INCREMENTAL VIEW {view}{' FULL' if full else ''}").collect()
    assert len(result) == 1, result
    return result[0]


def create(spark, view: str, query: str, options: str = "") -> None:
    with_ = f" WITH ({options})" if options else ""
    spark.sql(f"CREATE INCREMENTAL VIEW {view}{with_} AS {query}")


def store_versions(spark, view: str) -> int:
    return spark.sql(f"DESCRIBE HISTORY {view}__ivm_maps").count()


# -- fixtures --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def module_catalog(spark):
    spark_ivm.enable(spark)
    spark.sql("CREATE DATABASE IF NOT EXISTS ivm_contract")
    previous = spark.conf.get(CATALOG_CONF, None)
    spark.conf.set(CATALOG_CONF, "ivm_contract.views")
    yield "ivm_contract.views"
    if previous is None:
        spark.conf.unset(CATALOG_CONF)
    else:
        spark.conf.set(CATALOG_CONF, previous)


@pytest.fixture
def ivm(spark, module_catalog, fresh_db):
    """The session with IVM statements on, inside a database of its own."""
    return spark


# -- statements ------------------------------------------------------------------------------------
def test_statement_lifecycle(ivm, fresh_db):
    spark = ivm
    spark.sql("CREATE TABLE t (g STRING, v INT) USING delta")
    spark.sql("INSERT INTO t VALUES ('a', 1), ('a', 2), ('b', 3)")
    query = "SELECT g, SUM(v) AS s FROM t GROUP BY g"
    spark.sql(f"CREATE INCREMENTAL VIEW v AS {query}").collect()
    assert_view_is_query(spark, "v", query)

    # IF NOT EXISTS on an existing view: nothing happens, the view keeps its definition.
    spark.sql("create incremental view if not exists v as SELECT g FROM t").collect()
    assert spark.table("v").columns == ["g", "s"]

    show = spark.sql("SHOW INCREMENTAL VIEWS")
    assert show.columns == ["name", "sources", "source_versions", "maps", "state"]
    listed = {r["name"]: r for r in show.collect()}
    me = listed[f"{fresh_db}.v"]
    assert me["sources"] == [f"{fresh_db}.t"]
    t_version = spark.sql("DESCRIBE HISTORY t").count() - 1
    assert json.loads(me["source_versions"]) == {f"{fresh_db}.t": t_version}
    assert me["maps"] and all(isinstance(m, str) for m in me["maps"])
    assert me["state"] == "ok"

    explain = spark.sql("EXPLAIN INCREMENTAL VIEW v")
    assert explain.columns == ["plan"]
    (plan,) = [r["plan"] for r in explain.collect()]
    for m in me["maps"]:
        assert m in plan
    assert "2 rows" in plan  # the view's group map holds groups a and b
    assert "ON BATCH OF t" in plan
    assert "computed in one aggregation" in plan  # its SUM's and COUNTs' statements, fused

    status = refresh(spark, "V")  # names are case-insensitive
    assert status["view"] == f"{fresh_db}.v"
    assert status["status"] == "up to date"

    spark.sql("DROP INCREMENTAL VIEW v").collect()
    assert not spark.catalog.tableExists("v")
    assert not spark.catalog.tableExists("v__ivm_maps")
    assert f"{fresh_db}.v" not in {r["name"] for r in spark.sql("SHOW INCREMENTAL VIEWS").collect()}
    assert rows(spark.table("t")) == [("a", 1), ("a", 2), ("b", 3)]  # the source is untouched
    spark.sql("DROP INCREMENTAL VIEW IF EXISTS v").collect()  # silent


def test_other_statements_pass_through(ivm, fresh_db):
    spark = ivm
    assert spark.sql("SELECT 'REFRESH INCREMENTAL VIEW x' AS s").collect()[0]["s"] == "REFRESH INCREMENTAL VIEW x"
    assert spark.sql("SELECT {x} + 1 AS y", x=41).collect()[0]["y"] == 42  # keyword arguments go along
    spark.sql("CREATE TABLE t (k INT) USING delta")
    spark.sql("CREATE VIEW plain AS SELECT k * 2 AS k2 FROM t")
    spark.sql("INSERT INTO t VALUES (1), (2)")
    assert rows(spark.table("plain")) == [(2,), (4,)]
    spark.sql("REFRESH TABLE t")  # Spark's own REFRESH
    assert {r["tableName"] for r in spark.sql("SHOW TABLES").collect() if not r["isTemporary"]} == {"t", "plain"}


def test_refresh_all_views(ivm, fresh_db):
    spark = ivm
    spark.sql("CREATE TABLE t (g INT, v INT) USING delta")
    spark.sql("INSERT INTO t VALUES (1, 10), (2, 20)")
    q1 = "SELECT g, COUNT(*) AS n FROM t GROUP BY g"
    q2 = "SELECT SUM(v) AS s FROM t"
    create(spark, "v1", q1)
    create(spark, "v2", q2)
    spark.sql("INSERT INTO t VALUES (1, 5), (3, 7)")
    result = {r["view"]: r["status"] for r in spark.sql("REFRESH INCREMENTAL VIEWS").collect()}
    assert result[f"{fresh_db}.v1"] == "refreshed"
    assert result[f"{fresh_db}.v2"] == "refreshed"
    assert assert_view_is_query(spark, "v1", q1) == [(1, 2), (2, 1), (3, 1)]
    assert assert_view_is_query(spark, "v2", q2) == [(42,)]


def test_views_sharing_a_map_store(ivm, fresh_db, monkeypatch):
    """Views that name one store are refreshed together in one commit, also when their trigger statements
    are more than one Spark plan holds (heuristics.PLAN_MAX_STATEMENTS, lowered here: computed in groups);
    keys of one name and different types get columns of their own; dropping a view removes only its rows,
    the last one the store."""
    from spark_ivm import heuristics

    spark = ivm
    monkeypatch.setattr(heuristics, "PLAN_MAX_STATEMENTS", 2)
    groups = []
    plan_groups = heuristics.plan_groups
    monkeypatch.setattr(heuristics, "plan_groups", lambda counts: groups.append(plan_groups(counts)) or groups[-1])
    spark.sql("CREATE TABLE t (g INT, v INT) USING delta")
    spark.sql("CREATE TABLE u (g STRING, w INT) USING delta")
    spark.sql("INSERT INTO t VALUES (1, 10), (2, 20), (NULL, 1)")
    spark.sql("INSERT INTO u VALUES ('a', 1), ('b', NULL)")
    queries = {"s1": "SELECT g, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY g",
               "s2": "SELECT g, MAX(w) AS m FROM u GROUP BY g",  # g is a STRING here, an INT in s1
               "s3": "SELECT t.g, u.g AS ug, COUNT(*) AS n FROM t JOIN u ON t.v = u.w GROUP BY t.g, u.g"}
    for name, query in queries.items():
        create(spark, name, query, "store = 'shared_maps'")
    assert not spark.catalog.tableExists("s1__ivm_maps")
    before = spark.sql("DESCRIBE HISTORY shared_maps").count()
    spark.sql("INSERT INTO t VALUES (1, 5), (3, 1)")
    spark.sql("INSERT INTO u VALUES ('a', 7), ('c', 5)")
    spark.sql("DELETE FROM u WHERE w IS NULL")
    statuses = {r["view"]: r["status"] for r in spark.sql("REFRESH INCREMENTAL VIEWS").collect()}
    assert [statuses[f"{fresh_db}.{n}"] for n in queries] == ["refreshed"] * 3
    assert spark.sql("DESCRIBE HISTORY shared_maps").count() == before + 1  # one commit for the three
    assert any(len(g) > 1 for g in groups), groups  # their increments computed in groups
    for name, query in queries.items():
        assert_view_is_query(spark, name, query)
    spark.sql("DROP INCREMENTAL VIEW s2")
    spark.sql("INSERT INTO t VALUES (2, 7)")
    refresh(spark, "s3")
    for name in ("s1", "s3"):
        if name == "s1":
            refresh(spark, "s1")
        assert_view_is_query(spark, name, queries[name])
    assert refresh(spark, "s1", full=True)["status"] == "rebuilt"
    assert_view_is_query(spark, "s1", queries["s1"])
    with pytest.raises(spark_ivm.IVMError, match="not a map store"):
        create(spark, "bad", queries["s1"], "store = 't'")
    assert spark.table("t").count() == 6 and not spark.catalog.tableExists("bad")
    spark.sql("DROP INCREMENTAL VIEW s1")
    assert_view_is_query(spark, "s3", queries["s3"])
    spark.sql("DROP INCREMENTAL VIEW s3")
    assert not spark.catalog.tableExists("shared_maps")


# -- what the view returns -------------------------------------------------------------------------
def test_aggregates_null_keys_zero_sums_and_dead_groups(ivm):
    spark = ivm
    spark.sql("CREATE TABLE t (g STRING, v INT, d DECIMAL(10, 2)) USING delta")
    spark.sql("""INSERT INTO t VALUES ('a', 1, 1.50), ('a', -1, -1.50), ('b', NULL, NULL), ('b', NULL, NULL),
                 (NULL, 5, 2.25), ('c', 3, 0.10)""")
    query = ("SELECT g, COUNT(*) AS n, COUNT(v) AS nv, SUM(v) AS s, AVG(v) AS a, SUM(d) AS sd, AVG(d) AS ad "
             "FROM t GROUP BY g")
    create(spark, "v", query)
    got = assert_view_is_query(spark, "v", query)
    assert got == sorted([
        ("a", 2, 2, 0, 0.0, Decimal("0.00"), Decimal("0.000000")),  # SUM 0: the group stays
        ("b", 2, 0, None, None, None, None),  # only NULLs: SUM and AVG are NULL
        (None, 1, 1, 5, 5.0, Decimal("2.25"), Decimal("2.250000")),  # NULL key: a group of its own
        ("c", 1, 1, 3, 3.0, Decimal("0.10"), Decimal("0.100000")),
    ], key=row_key)

    spark.sql("DELETE FROM t WHERE g = 'c'")  # count 0: the group disappears
    spark.sql("INSERT INTO t VALUES ('b', 4, 1.00), (NULL, NULL, NULL), ('d', 0, 0.00)")
    spark.sql("UPDATE t SET v = 2 WHERE g = 'a' AND v = -1")
    assert refresh(spark, "v")["status"] == "refreshed"
    got = assert_view_is_query(spark, "v", query)
    assert "c" not in [r[0] for r in got]
    assert ("d", 1, 1, 0, 0.0, Decimal("0.00"), Decimal("0.000000")) in got


def test_column_names_order_and_types_match_the_query(ivm):
    """Unaliased aggregates, expressions over aggregates, casts, and the column order of the query."""
    spark = ivm
    spark.sql("CREATE TABLE t (k BIGINT, g STRING, x DOUBLE, n INT) USING delta")
    spark.sql("INSERT INTO t VALUES (1, 'p', 0.5, 2), (2, 'p', 1.5, NULL), (3, 'q', NULL, 7)")
    query = "SELECT COUNT(*), SUM(x), g, SUM(n) * 2 AS twice, CAST(SUM(k) AS INT) AS ki FROM t GROUP BY g"
    create(spark, "v", query)
    assert spark.table("v").columns == ["count(1)", "sum(x)", "g", "twice", "ki"]
    assert_view_is_query(spark, "v", query)
    spark.sql("INSERT INTO t VALUES (4, 'q', 2.0, 1), (5, 'r', NULL, NULL)")
    refresh(spark, "v")
    assert_view_is_query(spark, "v", query)


def test_global_aggregate_over_empty_table_is_one_row(ivm):
    spark = ivm
    spark.sql("CREATE TABLE t (v INT) USING delta")
    query = "SELECT COUNT(*) AS n, SUM(v) AS s, COUNT(v) AS nv FROM t"
    create(spark, "v", query)
    assert assert_view_is_query(spark, "v", query) == [(0, None, 0)]
    spark.sql("INSERT INTO t VALUES (1), (NULL), (2)")
    refresh(spark, "v")
    assert assert_view_is_query(spark, "v", query) == [(3, 3, 2)]
    spark.sql("DELETE FROM t")
    refresh(spark, "v")
    assert assert_view_is_query(spark, "v", query) == [(0, None, 0)]


def test_bag_semantics_keep_duplicates(ivm):
    spark = ivm
    spark.sql("CREATE TABLE t (k INT, v INT) USING delta")
    spark.sql("INSERT INTO t VALUES (1, 1), (1, 1), (2, 5), (3, NULL), (4, -1)")
    query = "SELECT k, v * 10 AS w FROM t WHERE v IS NULL OR v > 0"
    create(spark, "v", query)
    assert assert_view_is_query(spark, "v", query) == sorted([(1, 10), (1, 10), (2, 50), (3, None)], key=row_key)
    spark.sql("INSERT INTO t VALUES (1, 1), (2, 5), (3, NULL)")
    spark.sql("DELETE FROM t WHERE k = 2 AND v = 5")  # both copies
    refresh(spark, "v")
    assert assert_view_is_query(spark, "v", query) == sorted(
        [(1, 10), (1, 10), (1, 10), (3, None), (3, None)], key=row_key)


def test_having_order_by_limit(ivm):
    spark = ivm
    spark.sql("CREATE TABLE t (g STRING, v INT) USING delta")
    spark.sql("INSERT INTO t VALUES ('a', 1), ('a', 2), ('b', 10), ('c', 5), ('c', 6), ('d', 7), ('d', 1)")
    query = "SELECT g, SUM(v) AS s FROM t GROUP BY g HAVING COUNT(*) > 1 ORDER BY s DESC, g LIMIT 2"
    create(spark, "v", query)
    assert assert_view_is_query(spark, "v", query, ordered=True) == [("c", 11), ("d", 8)]
    spark.sql("INSERT INTO t VALUES ('b', 1), ('a', 20)")
    spark.sql("DELETE FROM t WHERE g = 'c' AND v = 6")
    refresh(spark, "v")
    assert assert_view_is_query(spark, "v", query, ordered=True) == [("a", 23), ("b", 11)]


# -- steps: DML, REFRESH, the view is the query ----------------------------------------------------
JOIN_QUERY = ("SELECT c.region, COUNT(*) AS n, SUM(o.amt) AS total "
              "FROM o JOIN c ON o.ck = c.ck GROUP BY c.region")


def _join_tables(spark) -> None:
    spark.sql("CREATE TABLE c (ck INT, region STRING) USING delta")
    spark.sql("CREATE TABLE o (ok INT, ck INT, amt INT) USING delta")
    spark.sql("INSERT INTO c VALUES (1, 'east'), (2, 'west'), (3, NULL), (NULL, 'north')")
    spark.sql("INSERT INTO o VALUES (10, 1, 5), (11, 1, NULL), (12, 2, 7), (13, 3, 1), (14, NULL, 9)")


def test_step_insert_and_delete_before_the_same_refresh_changes_nothing(ivm):
    spark = ivm
    spark.sql("CREATE TABLE t (g INT, v INT) USING delta")
    spark.sql("INSERT INTO t VALUES (1, 1), (2, 2)")
    query = "SELECT g, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY g"
    create(spark, "v", query)
    before = rows(spark.table("v"))
    spark.sql("INSERT INTO t VALUES (3, 3), (1, 100)")
    spark.sql("DELETE FROM t WHERE g = 3 OR v = 100")
    refresh(spark, "v")
    assert assert_view_is_query(spark, "v", query) == before == [(1, 1, 1), (2, 1, 2)]


def test_step_changes_to_two_tables_in_one_refresh(ivm):
    spark = ivm
    _join_tables(spark)
    create(spark, "v", JOIN_QUERY)
    spark.sql("INSERT INTO o VALUES (15, 2, 3), (16, 4, 8), (17, NULL, 1)")
    spark.sql("INSERT INTO c VALUES (4, 'east'), (5, 'south')")
    spark.sql("DELETE FROM c WHERE ck = 3")
    spark.sql("DELETE FROM o WHERE ok = 10")
    assert refresh(spark, "v")["status"] == "refreshed"
    got = assert_view_is_query(spark, "v", JOIN_QUERY)
    assert got == sorted([("east", 2, 8), ("west", 2, 10)], key=row_key)


def test_step_update_changes_a_join_key(ivm):
    spark = ivm
    _join_tables(spark)
    create(spark, "v", JOIN_QUERY)
    spark.sql("UPDATE o SET ck = 2 WHERE ok = 10")  # moves from east to west
    spark.sql("UPDATE c SET ck = NULL WHERE ck = 3")  # the NULL-region group loses its only row
    refresh(spark, "v")
    got = assert_view_is_query(spark, "v", JOIN_QUERY)
    assert got == sorted([("east", 1, None), ("west", 2, 12)], key=row_key)


def test_step_refresh_without_changes_is_up_to_date(ivm):
    spark = ivm
    spark.sql("CREATE TABLE t (g INT, v INT) USING delta")
    spark.sql("INSERT INTO t VALUES (1, 1)")
    query = "SELECT g, SUM(v) AS s FROM t GROUP BY g"
    create(spark, "v", query)
    history = store_versions(spark, "v")
    status = refresh(spark, "v")
    assert status["status"] == "up to date"
    assert status["rows_written"] == 0
    assert store_versions(spark, "v") == history  # nothing written
    assert assert_view_is_query(spark, "v", query) == [(1, 1)]


def test_step_repeat_refresh_changes_nothing(ivm):
    spark = ivm
    spark.sql("CREATE TABLE t (g INT, v INT) USING delta")
    spark.sql("INSERT INTO t VALUES (1, 1), (2, 2)")
    query = "SELECT g, SUM(v) AS s FROM t GROUP BY g"
    create(spark, "v", query)
    spark.sql("UPDATE t SET v = v + 10 WHERE g = 2")
    first = refresh(spark, "v")
    assert first["status"] == "refreshed"
    after_first = assert_view_is_query(spark, "v", query)
    history = store_versions(spark, "v")
    second = refresh(spark, "v")
    assert second["status"] == "up to date"
    assert second["rows_written"] == 0
    assert store_versions(spark, "v") == history
    assert json.loads(second["source_versions"]) == json.loads(first["source_versions"])
    assert assert_view_is_query(spark, "v", query) == after_first == [(1, 1), (2, 12)]


@pytest.mark.parametrize("depth", [0, 1])
def test_step_depth_limited_view(ivm, depth):
    """Depth 0 recomputes the view's maps, depth 1 keeps first-order deltas; both tables change."""
    spark = ivm
    _join_tables(spark)
    create(spark, "v", JOIN_QUERY, f"depth = {depth}")
    assert f"depth {depth}" in spark.sql("EXPLAIN INCREMENTAL VIEW v").collect()[0]["plan"]
    spark.sql("INSERT INTO o VALUES (15, 2, 3), (16, 4, 8)")
    spark.sql("INSERT INTO c VALUES (4, 'east')")
    spark.sql("UPDATE c SET region = 'west' WHERE ck = 1")
    refresh(spark, "v")
    got = assert_view_is_query(spark, "v", JOIN_QUERY)
    assert got == sorted([(None, 1, 1), ("east", 1, 8), ("west", 4, 15)], key=row_key)
    spark.sql("DELETE FROM o WHERE amt IS NULL")
    refresh(spark, "v")
    assert_view_is_query(spark, "v", JOIN_QUERY)


def test_step_many_appends_then_one_refresh(ivm):
    spark = ivm
    spark.sql("CREATE TABLE t (g INT, v INT) USING delta")
    query = "SELECT g, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY g"
    create(spark, "v", query)
    for i in range(8):
        spark.sql(f"INSERT INTO t VALUES ({i % 3}, {i}), ({i % 2}, NULL)")
    status = refresh(spark, "v")
    assert status["status"] == "refreshed"
    assert json.loads(status["source_versions"])[spark.catalog.currentDatabase() + ".t"] == 8
    assert assert_view_is_query(spark, "v", query) == [(0, 7, 9), (1, 7, 12), (2, 2, 7)]


def test_step_merge_statement(ivm):
    spark = ivm
    spark.sql("CREATE TABLE t (k INT, g STRING, v INT) USING delta")
    spark.sql("INSERT INTO t VALUES (1, 'a', 1), (2, 'a', 2), (3, 'b', 3)")
    query = "SELECT g, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY g"
    create(spark, "v", query)
    spark.sql("""MERGE INTO t USING (SELECT * FROM VALUES (1, 'a', 10), (3, 'b', 0), (4, 'c', 4) AS s(k, g, v)) s
                 ON t.k = s.k
                 WHEN MATCHED AND s.v = 0 THEN DELETE
                 WHEN MATCHED THEN UPDATE SET v = s.v
                 WHEN NOT MATCHED THEN INSERT *""")
    refresh(spark, "v")
    assert assert_view_is_query(spark, "v", query) == [("a", 2, 12), ("c", 1, 4)]


def test_step_qualified_table_names(ivm, fresh_db):
    """Tables named with their database, both changed before one refresh."""
    spark = ivm
    _join_tables(spark)
    query = (f"SELECT c.region, COUNT(*) AS n, SUM(o.amt) AS total "
             f"FROM {fresh_db}.o o JOIN {fresh_db}.c c ON o.ck = c.ck GROUP BY c.region")
    create(spark, "v", query)
    spark.sql("INSERT INTO o VALUES (15, 2, 3)")
    spark.sql("INSERT INTO c VALUES (4, 'east')")
    spark.sql("INSERT INTO o VALUES (16, 4, 8)")
    refresh(spark, "v")
    got = assert_view_is_query(spark, "v", query)
    assert got == sorted([(None, 1, 1), ("east", 3, 13), ("west", 2, 10)], key=row_key)


def test_refresh_from_another_database(ivm, fresh_db):
    """A view made in one database, with its sources named unqualified, is refreshed (incrementally
    and FULL) while another database is current: the sources stay the ones of its definition."""
    spark = ivm
    spark.sql("CREATE TABLE t (g INT, v INT) USING delta")
    spark.sql("INSERT INTO t VALUES (1, 1), (2, 2)")
    query = "SELECT g, SUM(v) AS s FROM t GROUP BY g"
    create(spark, "v", query)
    qualified_query = f"SELECT g, SUM(v) AS s FROM {fresh_db}.t GROUP BY g"
    spark.sql("USE default")
    spark.sql(f"INSERT INTO {fresh_db}.t VALUES (1, 10)")
    assert refresh(spark, f"{fresh_db}.v")["status"] == "refreshed"
    assert assert_view_is_query(spark, f"{fresh_db}.v", qualified_query) == [(1, 11), (2, 2)]
    spark.sql(f"INSERT INTO {fresh_db}.t VALUES (3, 3)")
    assert refresh(spark, f"{fresh_db}.v", full=True)["status"] == "rebuilt"
    assert assert_view_is_query(spark, f"{fresh_db}.v", qualified_query) == [(1, 11), (2, 2), (3, 3)]


def test_step_self_join(ivm):
    spark = ivm
    spark.sql("CREATE TABLE e (id INT, boss INT) USING delta")
    spark.sql("INSERT INTO e VALUES (1, NULL), (2, 1), (3, 1), (4, 2)")
    query = "SELECT b.id AS boss, COUNT(*) AS reports FROM e w JOIN e b ON w.boss = b.id GROUP BY b.id"
    create(spark, "v", query)
    assert_view_is_query(spark, "v", query)
    # one batch that changes both sides of the self-join at once
    spark.sql("INSERT INTO e VALUES (5, 4), (6, 5)")
    spark.sql("UPDATE e SET boss = 4 WHERE id = 3")
    refresh(spark, "v")
    assert assert_view_is_query(spark, "v", query) == [(1, 1), (2, 1), (4, 2), (5, 1)]


# -- persistence across processes ------------------------------------------------------------------
WORKER = Path(__file__).with_name("crash_worker.py")
PERSISTENCE_TEST = "test_views_persist_across_processes"


def _worker(warehouse: Path, *args: str, tag: str = "RESULT"):
    proc = subprocess.run([sys.executable, str(WORKER), str(warehouse), *args],
                          capture_output=True, text=True, timeout=1200, cwd=str(WORKER.parent))
    found = [json.loads(line[len(tag) + 1:]) for line in proc.stdout.splitlines() if line.startswith(tag + " ")]
    assert proc.returncode == 0 and found, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return found[-1]


def _two_processes(warehouse: Path) -> tuple[dict, dict]:
    made = _worker(warehouse, "setup")
    return made, _worker(warehouse, "verify", "--show")


@pytest.fixture(scope="module", autouse=True)
def persistence_run(request, tmp_path_factory):
    """The two processes of the persistence test, started with the module's first test so that they
    run while the in-process tests do (they are independent: another warehouse, other JVMs)."""
    if not any(item.originalname == PERSISTENCE_TEST for item in request.session.items):
        yield None
        return
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(_two_processes, tmp_path_factory.mktemp("persistence") / "wh")
    yield future
    pool.shutdown(wait=True)


@pytest.mark.on_demand  # two more Spark processes; tests/test_crash_resume.py resumes views in new ones in CI
def test_views_persist_across_processes(persistence_run: Future):
    """Process 1 creates tables and a view and changes the tables (no refresh); process 2, on the
    same warehouse, refreshes the view and reads it. Each uses its own warehouse, not the fixture's:
    embedded Derby admits one process at a time."""
    made, out = persistence_run.result()
    assert made["created_view"] == made["created_query"]
    assert out["before_view"] == made["created_view"]  # nothing refreshed in between
    assert out["refresh1"]["status"] == "refreshed"
    assert out["view_schema"] == out["query_schema"]
    assert out["view"] == out["query"]
    assert out["view"] != made["created_view"]
    assert out["refresh2"] == {"status": "up to date", "rows_written": 0}
    (shown,) = [r for r in out["show"] if r["name"] == "p.v"]
    assert shown["sources"] == ["p.c", "p.o"]
    assert shown["state"] == "ok"
    for m in shown["maps"]:
        assert m in out["explain"]
