"""Errors of the runtime's statements: each is a `spark_ivm.IVMError` subclass whose message names the
problem, and a CREATE that fails leaves nothing behind (no map store `<name>__ivm_maps`, no Spark
table or view `<name>`, no catalog row) and does not disturb the other views.

The module works in one database, `ivm_errors`, with a few tiny tables and one healthy view
(`witness`) that every failed CREATE must leave alone; its views are kept in a catalog table of
their own (`spark.ivm.catalog`), so SHOW INCREMENTAL VIEWS lists only them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import vacuum_change_feed

# End-to-end (see pyproject.toml): part of ./build.sh test; all runtime suites: ./build.sh test -m runtime
pytestmark = pytest.mark.runtime

import spark_ivm
from spark_ivm import (
    CatalogEntryError, IVMError, NonDeterministicError, ParseError, RefreshError, UnknownColumnError, UnknownTableError,
    UnknownViewError, UnsupportedQueryError, ViewExistsError,
)

DB = "ivm_errors"
CATALOG_CONF = "spark.ivm.catalog"
CODEGEN_CONF = "spark.ivm.codegen"
WITNESS_QUERY = "SELECT g, COUNT(*) AS n, SUM(v) AS s FROM base GROUP BY g"


def row_key(row: tuple) -> tuple:
    """Sort key of a row: NULLs first in every column, then the values."""
    return tuple((v is not None, v) for v in row)


def rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=row_key)


def schema(df):
    return [(f.name, f.dataType) for f in df.schema.fields]


def assert_view_is_query(spark, view: str, query: str) -> list[tuple]:
    got, want = spark.table(view), spark.sql(query)
    assert schema(got) == schema(want)
    got_rows = rows(got)
    assert got_rows == rows(want)
    return got_rows


def shown(spark) -> dict[str, object]:
    return {r["name"]: r for r in spark.sql("SHOW INCREMENTAL VIEWS").collect()}


@pytest.fixture(scope="module")
def db(spark):
    spark_ivm.enable(spark)
    previous = spark.conf.get(CATALOG_CONF, None)
    spark.sql(f"CREATE DATABASE {DB}")
    spark.conf.set(CATALOG_CONF, f"{DB}.views")
    spark.sql(f"USE {DB}")
    spark.sql("CREATE TABLE t (g STRING, v INT) USING delta")
    spark.sql("CREATE TABLE u (g STRING, w INT) USING delta")
    spark.sql("INSERT INTO t VALUES ('a', 1), ('b', 2)")
    spark.sql("INSERT INTO u VALUES ('a', 10)")
    spark.sql("CREATE TABLE base (g STRING, v INT) USING delta")
    spark.sql("INSERT INTO base VALUES ('x', 1), ('y', 2), (NULL, 3)")
    spark.sql(f"CREATE INCREMENTAL VIEW witness AS {WITNESS_QUERY}")
    yield DB
    spark.sql("USE default")
    if previous is None:
        spark.conf.unset(CATALOG_CONF)
    else:
        spark.conf.set(CATALOG_CONF, previous)


@pytest.fixture
def ivm(spark, db):
    spark.sql(f"USE {db}")
    yield spark
    spark.sql("USE default")


def assert_nothing_left(spark, name: str) -> None:
    """A failed CREATE of `name` left no trace, and the witness view is still listed and healthy."""
    assert not spark.catalog.tableExists(name), f"{name} was left behind"
    assert not spark.catalog.tableExists(f"{name}__ivm_maps"), f"{name}__ivm_maps was left behind"
    warehouse = spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:")
    assert not (Path(warehouse) / f"{DB}.db" / f"{name}__ivm_maps").exists()
    listed = shown(spark)
    assert f"{DB}.{name}" not in listed
    assert listed[f"{DB}.witness"]["state"] == "ok"


def refresh_fails(spark, view: str):
    """REFRESH of the view fails with a RefreshError and commits nothing to its map store."""
    store = f"{view}__ivm_maps"
    version = spark.sql(f"DESCRIBE HISTORY {store} LIMIT 1").collect()[0]["version"]
    with pytest.raises(RefreshError) as info:
        spark.sql(f"REFRESH INCREMENTAL VIEW {view}")
    assert spark.sql(f"DESCRIBE HISTORY {store} LIMIT 1").collect()[0]["version"] == version, \
        f"the failed refresh of {view} committed to its map store"
    return info


def create_fails(spark, name: str, query: str, error: type[Exception]) -> Exception:
    with pytest.raises(error) as info:
        spark.sql(f"CREATE INCREMENTAL VIEW {name} AS {query}")
    assert isinstance(info.value, IVMError)
    assert_nothing_left(spark, name)
    return info.value


# -- CREATE ----------------------------------------------------------------------------------------
def test_unknown_table(ivm):
    e = create_fails(ivm, "bad", "SELECT g, SUM(v) AS s FROM nosuch GROUP BY g", UnknownTableError)
    assert "nosuch" in str(e)


def test_unknown_column(ivm):
    e = create_fails(ivm, "bad", "SELECT g, SUM(zz) AS s FROM t GROUP BY g", UnknownColumnError)
    assert "zz" in str(e)


def test_duplicate_view_name(ivm):
    spark = ivm
    with pytest.raises(ViewExistsError, match="witness"):
        spark.sql("CREATE INCREMENTAL VIEW witness AS SELECT g FROM t")
    assert spark.table("witness").columns == ["g", "n", "s"]  # still the first definition

    # a plain table of that name
    with pytest.raises(ViewExistsError, match=r"\bt\b"):
        spark.sql("CREATE INCREMENTAL VIEW t AS SELECT g, COUNT(*) AS n FROM u GROUP BY g")
    assert rows(spark.table("t")) == [("a", 1), ("b", 2)]
    assert not spark.catalog.tableExists("t__ivm_maps")

    # a plain Spark view of that name
    spark.sql("CREATE VIEW plain AS SELECT g FROM t")
    with pytest.raises(ViewExistsError, match="plain"):
        spark.sql("CREATE INCREMENTAL VIEW plain AS SELECT g, COUNT(*) AS n FROM u GROUP BY g")
    assert rows(spark.table("plain")) == [("a",), ("b",)]
    assert not spark.catalog.tableExists("plain__ivm_maps")
    listed = shown(spark)
    assert f"{DB}.t" not in listed and f"{DB}.plain" not in listed


def test_unknown_view(ivm):
    spark = ivm
    for statement in ("REFRESH INCREMENTAL VIEW nosuch", "REFRESH INCREMENTAL VIEW nosuch FULL",
                      "DROP INCREMENTAL VIEW nosuch", "EXPLAIN INCREMENTAL VIEW nosuch"):
        with pytest.raises(UnknownViewError, match="nosuch"):
            spark.sql(statement)
    spark.sql("DROP INCREMENTAL VIEW IF EXISTS nosuch")  # silent
    # a plain table is not an incremental view: not refreshed, not dropped
    with pytest.raises(UnknownViewError, match=r"\bt\b"):
        spark.sql("REFRESH INCREMENTAL VIEW t")
    with pytest.raises(UnknownViewError, match=r"\bt\b"):
        spark.sql("DROP INCREMENTAL VIEW t")
    assert spark.catalog.tableExists("t")


def test_syntax_error_has_a_position(ivm):
    e = create_fails(ivm, "bad", "SELECT g, SUM(v FROM t GROUP BY g", ParseError)
    assert isinstance(e.line, int) and isinstance(e.column, int)
    assert f"line {e.line}" in str(e) and f"column {e.column}" in str(e)


def test_syntax_error_position_is_in_the_statement(ivm):
    """Line and column count in the text given to spark.sql, not in the query after AS."""
    statement = ("CREATE INCREMENTAL VIEW bad AS\n"
                 "  SELECT g, SUM(v) AS s\n"
                 "  FROM t WHERE (v > 1 GROUP BY g")
    with pytest.raises(ParseError) as info:
        ivm.sql(statement)
    lines = statement.split("\n")
    assert info.value.line == 3, f"{info.value} points at line {info.value.line}: {lines[info.value.line - 1]!r}"
    assert 1 <= info.value.column <= len(lines[2]) + 1
    assert_nothing_left(ivm, "bad")


def test_syntax_error_found_only_by_spark_is_a_parse_error(ivm):
    """A query sqlglot accepts but Spark's parser rejects is still a spark_ivm.ParseError."""
    e = create_fails(ivm, "bad", "SELECT g,, SUM(v) AS s FROM t GROUP BY g", ParseError)
    assert e.line is not None and e.column is not None


@pytest.mark.parametrize("statement, message", [
    ("CREATE INCREMENTAL VIEW AS SELECT g FROM t", "CREATE INCREMENTAL VIEW"),
    ("CREATE INCREMENTAL VIEW bad WITH (colour = 1) AS SELECT g FROM t", "colour"),
    ("CREATE INCREMENTAL VIEW bad WITH (depth = x) AS SELECT g FROM t", "depth"),
    ("REFRESH INCREMENTAL VIEW", "REFRESH INCREMENTAL VIEW"),
    ("REFRESH INCREMENTAL VIEW witness PARTIAL", "PARTIAL"),
], ids=["no-name", "unknown-option", "bad-depth", "refresh-no-name", "refresh-bad-mode"])
def test_malformed_statements(ivm, statement, message):
    with pytest.raises(ParseError) as info:
        ivm.sql(statement)
    assert message in str(info.value)
    assert not ivm.catalog.tableExists("bad")


@pytest.mark.parametrize("query, construct", [
    ("SELECT g, SUM(v) OVER (PARTITION BY g) AS s FROM t", "window function"),
    ("SELECT t.g FROM t NATURAL JOIN u", "NATURAL JOIN"),
    ("SELECT g, v FROM t WHERE v > ALL (SELECT w FROM u)", "ALL subquery"),
    ("SELECT g, STDDEV(v) AS sd FROM t GROUP BY g", "STDDEV"),
], ids=["window", "natural-join", "all-subquery", "stddev"])
def test_unsupported_construct_is_named(ivm, query, construct):
    e = create_fails(ivm, "bad", query, UnsupportedQueryError)
    assert construct in e.construct
    assert construct in str(e)


def test_min_is_maintained_also_after_its_minimum_is_deleted(ivm):
    spark = ivm
    query = "SELECT g, MIN(v) AS m, COUNT(*) AS n FROM t GROUP BY g"
    spark.sql(f"CREATE INCREMENTAL VIEW mv AS {query}")
    try:
        assert_view_is_query(spark, "mv", query)
        spark.sql("INSERT INTO t VALUES ('a', 0), ('c', 4)")
        spark.sql("REFRESH INCREMENTAL VIEW mv")
        assert assert_view_is_query(spark, "mv", query) == [("a", 0, 2), ("b", 2, 1), ("c", 4, 1)]
        spark.sql("DELETE FROM t WHERE v = 0 OR g = 'c'")  # the minimum of a goes, c goes
        spark.sql("REFRESH INCREMENTAL VIEW mv")
        assert assert_view_is_query(spark, "mv", query) == [("a", 1, 1), ("b", 2, 1)]
    finally:
        spark.sql("DROP INCREMENTAL VIEW IF EXISTS mv")


def test_non_deterministic_function(ivm):
    e = create_fails(ivm, "bad", "SELECT g, SUM(v * rand()) AS s FROM t GROUP BY g", NonDeterministicError)
    assert "rand" in str(e)


def test_source_that_is_not_a_delta_table(ivm):
    spark = ivm
    spark.sql("CREATE TABLE pq (g STRING, v INT) USING parquet")
    spark.sql("INSERT INTO pq VALUES ('a', 1)")
    e = create_fails(spark, "bad", "SELECT g, SUM(v) AS s FROM pq GROUP BY g", IVMError)
    assert "pq" in str(e)
    assert rows(spark.table("pq")) == [("a", 1)]


# -- REFRESH ---------------------------------------------------------------------------------------
def test_refresh_after_a_column_was_added_goes_on(ivm):
    spark = ivm
    spark.sql("CREATE TABLE sa (g STRING, v INT) USING delta")
    spark.sql("INSERT INTO sa VALUES ('a', 1), ('b', 2)")
    query = "SELECT g, COUNT(*) AS n, SUM(v) AS total FROM sa GROUP BY g"
    spark.sql(f"CREATE INCREMENTAL VIEW sav AS {query}")
    spark.sql("ALTER TABLE sa ADD COLUMNS (x INT)")
    spark.sql("INSERT INTO sa VALUES ('a', 5, 7), ('c', NULL, 1)")
    assert spark.sql("REFRESH INCREMENTAL VIEW sav").collect()[0]["status"] == "refreshed"
    assert assert_view_is_query(spark, "sav", query) == [("a", 2, 6), ("b", 1, 2), ("c", 1, None)]
    spark.sql("DELETE FROM sa WHERE x = 7")
    assert spark.sql("REFRESH INCREMENTAL VIEW sav").collect()[0]["status"] == "refreshed"
    assert assert_view_is_query(spark, "sav", query) == [("a", 1, 1), ("b", 1, 2), ("c", 1, None)]
    spark.sql("DROP INCREMENTAL VIEW sav")


def test_refresh_after_a_column_the_view_reads_was_renamed_needs_full(ivm):
    spark = ivm
    spark.sql("CREATE TABLE s (g STRING, v INT) USING delta TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    spark.sql("INSERT INTO s VALUES ('a', 1), ('b', 2)")
    query = "SELECT g, COUNT(*) AS n, SUM(v) AS total FROM s GROUP BY g"
    spark.sql(f"CREATE INCREMENTAL VIEW sv AS {query}")
    spark.sql("ALTER TABLE s RENAME COLUMN v TO w")
    spark.sql("INSERT INTO s VALUES ('a', 5), ('c', NULL)")
    info = refresh_fails(spark, "sv")
    assert "FULL" in str(info.value) and "column v" in str(info.value)
    assert f"{DB}.s" in str(info.value)
    assert rows(spark.table("sv")) == [("a", 1, 1), ("b", 1, 2)]  # unchanged, still readable
    spark.sql("ALTER TABLE s RENAME COLUMN w TO v")  # what the view reads, as it was: a FULL rebuild works
    full = spark.sql("REFRESH INCREMENTAL VIEW sv FULL").collect()
    assert len(full) == 1 and full[0]["status"] == "rebuilt"
    assert assert_view_is_query(spark, "sv", query) == [("a", 2, 6), ("b", 1, 2), ("c", 1, None)]
    # incremental again after the rebuild
    spark.sql("DELETE FROM s WHERE g = 'b'")
    assert spark.sql("REFRESH INCREMENTAL VIEW sv").collect()[0]["status"] == "refreshed"
    assert assert_view_is_query(spark, "sv", query) == [("a", 2, 6), ("c", 1, None)]
    spark.sql("DROP INCREMENTAL VIEW sv")


@pytest.mark.parametrize("new_versions", [1, 3, 6], ids=["fewer versions", "as many versions", "more versions"])
def test_refresh_after_a_source_was_dropped_and_created_again_is_refused_under_incremental(ivm, new_versions):
    # The new table's versions count from 0 again, and may pass the ones the view applied: only its
    # Delta table id tells it from the old one. Its rows must never be taken for changes of the old. With
    # as many versions, the new table's latest commit file has the old one's name (see DeltaLogs._latest).
    spark = ivm
    rc, rcv = f"rc{new_versions}", f"rcv{new_versions}"
    spark.sql(f"CREATE TABLE {rc} (g STRING, v INT) USING delta")
    for i in range(3):
        spark.sql(f"INSERT INTO {rc} VALUES ('a', {i}), ('b', 1)")
    query = f"SELECT g, COUNT(*) AS n, SUM(v) AS total FROM {rc} GROUP BY g"
    # Under the default policy (auto) the view is rebuilt instead: tests/test_refresh_choice.py.
    spark.sql(f"CREATE INCREMENTAL VIEW {rcv} WITH (refresh = 'incremental') AS {query}")
    before = rows(spark.table(rcv))
    spark.sql(f"DROP TABLE {rc}")
    spark.sql(f"CREATE TABLE {rc} (g STRING, v INT) USING delta")
    for i in range(new_versions):
        spark.sql(f"INSERT INTO {rc} VALUES ('c', {i})")
    info = refresh_fails(spark, rcv)
    assert "dropped and created again" in str(info.value) and "FULL" in str(info.value)
    assert f"{DB}.{rc}" in str(info.value)
    assert rows(spark.table(rcv)) == before  # untouched
    result = spark.sql(f"REFRESH INCREMENTAL VIEW {rcv} FULL").collect()[0]
    assert (result["status"], result["policy"]) == ("rebuilt", "full (REFRESH … FULL)")
    assert_view_is_query(spark, rcv, query)
    spark.sql(f"INSERT INTO {rc} VALUES ('c', 9)")
    assert spark.sql(f"REFRESH INCREMENTAL VIEW {rcv}").collect()[0]["status"] == "refreshed"
    assert_view_is_query(spark, rcv, query)
    spark.sql(f"DROP INCREMENTAL VIEW {rcv}")


def test_not_null_columns_are_relied_on_until_their_constraint_is_dropped(ivm):
    """A SUM of a NOT NULL column counts its values with the rows (no map of its own); once the constraint
    is dropped the view cannot go on incrementally: under `incremental` REFRESH refuses, naming FULL, and
    under `auto` it rebuilds."""
    spark = ivm
    spark.sql("CREATE TABLE nn (g STRING NOT NULL, v INT NOT NULL, w INT) USING delta")
    spark.sql("INSERT INTO nn VALUES ('a', 1, NULL), ('b', 2, 5), ('a', 3, 7)")
    query = "SELECT g, COUNT(*) AS n, SUM(v) AS total, AVG(v) AS mean, SUM(w) AS ws FROM nn GROUP BY g"
    spark.sql(f"CREATE INCREMENTAL VIEW nnv WITH (refresh = 'incremental') AS {query}")
    spark.sql(f"CREATE INCREMENTAL VIEW nnw AS {query}")
    explained = spark.sql("EXPLAIN INCREMENTAL VIEW nnv").collect()[0][0]
    declared = [line for line in explained.splitlines() if line.startswith("DECLARE MAP")]
    assert len(declared) == 4, declared  # the row count, SUM(v), SUM(w) and w's count of non-NULL values
    spark.sql("INSERT INTO nn VALUES ('c', 4, NULL), ('a', 5, 1)")
    spark.sql("DELETE FROM nn WHERE v = 2")
    for view in ("nnv", "nnw"):
        assert spark.sql(f"REFRESH INCREMENTAL VIEW {view}").collect()[0]["status"] == "refreshed"
        assert_view_is_query(spark, view, query)
    spark.sql("ALTER TABLE nn ALTER COLUMN v DROP NOT NULL")
    spark.sql("INSERT INTO nn VALUES ('c', NULL, 2), ('d', NULL, NULL)")
    info = refresh_fails(spark, "nnv")
    assert "column v" in str(info.value) and "NOT NULL" in str(info.value) and "FULL" in str(info.value)
    result = spark.sql("REFRESH INCREMENTAL VIEW nnw").collect()[0]
    assert result["status"] == "rebuilt" and "no longer NOT NULL" in result["policy"], result
    assert_view_is_query(spark, "nnw", query)
    assert spark.sql("REFRESH INCREMENTAL VIEW nnv FULL").collect()[0]["status"] == "rebuilt"
    assert_view_is_query(spark, "nnv", query)
    spark.sql("INSERT INTO nn VALUES ('d', 6, NULL)")
    for view in ("nnv", "nnw"):
        assert spark.sql(f"REFRESH INCREMENTAL VIEW {view}").collect()[0]["status"] == "refreshed"
        assert_view_is_query(spark, view, query)
        spark.sql(f"DROP INCREMENTAL VIEW {view}")


def test_refresh_after_a_source_was_dropped_names_it(ivm):
    spark = ivm
    spark.sql("CREATE TABLE gone (g STRING, v INT) USING delta")
    spark.sql("INSERT INTO gone VALUES ('a', 1)")
    spark.sql("CREATE INCREMENTAL VIEW gv AS SELECT g, SUM(v) AS s FROM gone GROUP BY g")
    spark.sql("DROP TABLE gone")
    info = refresh_fails(spark, "gv")
    assert f"{DB}.gone" in str(info.value) and "no longer exists" in str(info.value)
    assert rows(spark.table("gv")) == [("a", 1)]
    spark.sql("DROP INCREMENTAL VIEW gv")


def test_refresh_after_change_feed_was_vacuumed_is_refused_under_incremental(ivm):
    spark = ivm
    spark.sql("CREATE TABLE f (g STRING, v INT) USING delta")
    spark.sql("INSERT INTO f VALUES ('a', 1), ('b', 2)")
    query = "SELECT g, SUM(v) AS s FROM f GROUP BY g"
    spark.sql(f"CREATE INCREMENTAL VIEW fv WITH (refresh = 'incremental') AS {query}")
    spark.sql("UPDATE f SET v = 10 WHERE g = 'a'")  # change rows go to _change_data files
    vacuum_change_feed(spark, "f")

    info = refresh_fails(spark, "fv")
    assert "FULL" in str(info.value)
    assert f"{DB}.f" in str(info.value)
    spark.sql("REFRESH INCREMENTAL VIEW fv FULL")
    assert assert_view_is_query(spark, "fv", query) == [("a", 10), ("b", 2)]
    spark.sql("DROP INCREMENTAL VIEW fv")


# -- catalog entries this version cannot read -------------------------------------------------------
def replace_entries(spark, catalog: str, entries: dict[str, str]) -> None:
    """Overwrite the stored entries of the named views (qualified names) with the given texts."""
    spark.createDataFrame(list(entries.items()), "name STRING, entry STRING").createOrReplaceTempView("new_entries")
    spark.sql(f"MERGE INTO {catalog} c USING new_entries n ON c.name = n.name "
              f"WHEN MATCHED THEN UPDATE SET entry = n.entry")


def test_an_entry_an_older_version_pickled_says_how_to_recover_and_drops(ivm):
    """Entries were pickled before catalog format 1. Such an entry is never unpickled: every statement on
    its view fails with an error naming the view and saying to drop it and create it again; the other views
    are listed and refreshed; DROP removes the view and its maps (from a store it shares too), and the view
    can then be created again. An entry of a format this version does not know is handled alike."""
    import base64
    import pickle

    from spark_ivm.runtime.catalog_format import entry_from_json
    from spark_ivm.runtime.engine import Engine
    from spark_ivm.runtime.mapstore import SEQUENCE_ID

    spark = ivm
    catalog = f"{DB}.old_catalog"  # its own, so that REFRESH INCREMENTAL VIEWS touches only these views
    queries = {"old_own": "SELECT g, SUM(v) AS s FROM t GROUP BY g",
               "old_shared": "SELECT g, COUNT(*) AS n FROM t GROUP BY g",
               "future": "SELECT g, MAX(v) AS m FROM t GROUP BY g",
               "kept": "SELECT g, SUM(w) AS s FROM u GROUP BY g"}
    options = {"old_own": "", "old_shared": "WITH (store = 'shared_maps') ", "future": "",
               "kept": "WITH (store = 'shared_maps') "}
    spark.conf.set(CATALOG_CONF, catalog)
    try:
        for view, query in queries.items():
            spark.sql(f"CREATE INCREMENTAL VIEW {view} {options[view]}AS {query}")
        stored = {r["name"]: r["entry"] for r in spark.table(catalog).collect()}
        old = {name: base64.b64encode(pickle.dumps(entry_from_json(stored[name], name))).decode()
               for name in (f"{DB}.old_own", f"{DB}.old_shared")}
        future = stored[f"{DB}.future"].replace('"format":1,', '"format":3,', 1)
        replace_entries(spark, catalog, {**old, f"{DB}.future": future})

        other = Engine(spark)  # a process started after the upgrade: nothing cached
        for view, detail in [("old_own", "pickled Python object"), ("future", "has format 3")]:
            for statement in (other.refresh, lambda name: other.refresh(name, "full"), other.explain):
                with pytest.raises(CatalogEntryError) as info:
                    statement(view)
                message = str(info.value)
                for fragment in (f"incremental view {DB}.{view} cannot be used", detail,
                                 f"DROP INCREMENTAL VIEW {DB}.{view}, then CREATE INCREMENTAL VIEW {DB}.{view}",
                                 f"SELECT sql FROM {catalog} WHERE name = '{DB}.{view}'"):
                    assert fragment in message, message
        listed = {r["name"]: r["state"] for r in other.show().collect()}
        assert listed[f"{DB}.kept"] == "ok" and listed[f"{DB}.old_shared"].startswith("error: incremental view")
        spark.sql("INSERT INTO u VALUES ('b', 5)")
        with pytest.raises(CatalogEntryError, match=r"old_own cannot be used.*the entries of .*old_shared.*future"):
            spark.sql("REFRESH INCREMENTAL VIEWS")
        assert_view_is_query(spark, "kept", queries["kept"])  # refreshed all the same
        # Neither the view's name nor its store's map ids can be taken while the entry is there.
        with pytest.raises(CatalogEntryError, match="old_own cannot be used"):
            spark.sql(f"CREATE INCREMENTAL VIEW old_own AS {queries['old_own']}")
        with pytest.raises(CatalogEntryError, match="old_shared cannot be used"):
            spark.sql(f"CREATE INCREMENTAL VIEW newcomer WITH (store = 'shared_maps') AS {queries['old_shared']}")
        assert not spark.catalog.tableExists("newcomer")

        for view in ("old_own", "old_shared", "future"):
            spark.sql(f"DROP INCREMENTAL VIEW {view}")
            assert not spark.catalog.tableExists(view)
        assert not spark.catalog.tableExists("old_own__ivm_maps") and not spark.catalog.tableExists("future__ivm_maps")
        assert set(shown(spark)) == {f"{DB}.kept"}
        kept_ids = set(spark._spark_ivm_engine.entry("kept").layout.map_ids)
        left = {r["map_id"] for r in spark.sql("SELECT DISTINCT map_id FROM shared_maps").collect()}
        left.discard(SEQUENCE_ID)
        assert left == kept_ids  # the dropped view's maps and progress are gone from the shared store

        for view in ("old_own", "old_shared", "future"):
            spark.sql(f"CREATE INCREMENTAL VIEW {view} {options[view]}AS {queries[view]}")
        spark.sql("INSERT INTO t VALUES ('c', 3)")
        spark.sql("REFRESH INCREMENTAL VIEWS")
        for view, query in queries.items():
            assert_view_is_query(spark, view, query)
        assert all(state == "ok" for state in (r["state"] for r in spark.sql("SHOW INCREMENTAL VIEWS").collect()))
    finally:
        for view in queries:
            spark.sql(f"DROP INCREMENTAL VIEW IF EXISTS {view}")
        spark.conf.set(CATALOG_CONF, f"{DB}.views")


# -- the other views ---------------------------------------------------------------------------------
def test_other_views_untouched_and_refreshable(ivm):
    """Runs last: after all the failures above, the witness view is intact and refreshes."""
    spark = ivm
    assert shown(spark)[f"{DB}.witness"]["state"] == "ok"
    assert_view_is_query(spark, "witness", WITNESS_QUERY)
    spark.sql("INSERT INTO base VALUES ('x', 4), (NULL, NULL)")
    spark.sql("DELETE FROM base WHERE g = 'y'")
    assert spark.sql("REFRESH INCREMENTAL VIEW witness").collect()[0]["status"] == "refreshed"
    assert assert_view_is_query(spark, "witness", WITNESS_QUERY) == sorted([(None, 2, 3), ("x", 2, 5)], key=row_key)


def test_refresh_runs_its_plans_as_codegen_is_set(ivm):
    """A refresh runs its plans compiled by default; spark.ivm.codegen = auto runs those of small tables
    interpreted, off all of them; any other value is an error naming the setting; and the session's own
    codegen settings are as they were after every refresh."""
    spark = ivm
    spark.sql("CREATE TABLE cg (g INT, v INT) USING delta")
    spark.sql("INSERT INTO cg VALUES (1, 1), (2, NULL)")
    query = "SELECT g, COUNT(*) AS n, SUM(v) AS s FROM cg GROUP BY g"
    spark.sql(f"CREATE INCREMENTAL VIEW cgv AS {query}")
    before = spark.conf.get("spark.sql.codegen.wholeStage")

    def refresh():
        return spark.sql("REFRESH INCREMENTAL VIEW cgv").collect()[0]

    try:
        for setting, execution, change in [(None, "compiled", "INSERT INTO cg VALUES (1, 5), (3, 3)"),
                                           ("auto", "interpreted", "DELETE FROM cg WHERE g = 1"),
                                           ("off", "interpreted", "UPDATE cg SET v = 7 WHERE v IS NULL"),
                                           ("on", "compiled", "INSERT INTO cg VALUES (5, 5)"),
                                           ("auto", "interpreted", "DELETE FROM cg WHERE g = 5")]:
            if setting:
                spark.conf.set(CODEGEN_CONF, setting)
            spark.sql(change)
            status = refresh()
            assert (status["status"], status["execution"]) == ("refreshed", execution), setting
            assert spark.conf.get("spark.sql.codegen.wholeStage") == before
            assert_view_is_query(spark, "cgv", query)
        assert refresh()["execution"] is None  # up to date: nothing ran
        spark.conf.set(CODEGEN_CONF, "fast")
        spark.sql("INSERT INTO cg VALUES (4, 4)")
        with pytest.raises(IVMError, match=r"spark\.ivm\.codegen must be auto, on or off, not 'fast'"):
            refresh()
    finally:
        spark.conf.unset(CODEGEN_CONF)
    assert refresh()["status"] == "refreshed"
    assert assert_view_is_query(spark, "cgv", query) == [(2, 1, 7), (3, 1, 3), (4, 1, 4)]
