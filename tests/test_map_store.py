"""The map store's write path on Spark: appends that sum per key, compaction, the guarded commit that
makes a write exactly once, cached catalog entries checked against the store, and a store laid out by key
so that a refresh reads only the files of the keys its batches touch, and copies only those keys' rows."""

from __future__ import annotations

import random
from collections import Counter

import pytest

import spark_ivm
from spark_ivm.runtime import refresh, run
from spark_ivm.runtime.deltalog import ConcurrentCommitError
from spark_ivm.runtime.engine import COMPACT_CONF, Engine
from spark_ivm.runtime.key_conditions import all_of
from spark_ivm.runtime.mapstore import SEQUENCE, SEQUENCE_ID, bookkeeping_metadata, bookkeeping_sql
from spark_ivm.runtime.statements import parse_statement

pytestmark = pytest.mark.runtime

QUERY = ("SELECT s.g, SUM(r.x * s.y) AS total, COUNT(*) AS n, MIN(r.x) AS low "
         "FROM r JOIN s ON r.k = s.k GROUP BY s.g")


def _value(rng: random.Random) -> str:
    return "NULL" if rng.random() < 0.2 else str(rng.randint(0, 3))


def _change(spark, rng: random.Random) -> None:
    for table in ("r", "s"):
        arity = 2 if table == "r" else 3
        rows = ", ".join("(" + ", ".join(_value(rng) for _ in range(arity)) + ")" for _ in range(rng.randint(1, 4)))
        spark.sql(f"INSERT INTO {table} VALUES {rows}")
        spark.sql(f"DELETE FROM {table} WHERE k = {rng.randint(0, 3)}")


def _bag(df) -> Counter:
    return Counter(tuple(row) for row in df.collect())


@pytest.fixture
def ivm(spark, fresh_db):
    spark_ivm.enable(spark)
    spark.sql("CREATE TABLE r (k INT, x INT) USING delta")
    spark.sql("CREATE TABLE s (k INT, y INT, g INT) USING delta")
    yield spark
    spark.conf.unset(COMPACT_CONF)


def _assert_one_live_row_per_key(maps) -> None:
    """Compacted map rows: some, one per map and key, none whose values are all 0."""
    keys = [c for c in maps.columns if c == "map_id" or c.startswith("k_")]
    assert maps.count() == maps.select(*keys).distinct().count() > 0
    values = [c for c in maps.columns if c.startswith("v_")]
    assert maps.where(" AND ".join(f"COALESCE({c}, 0) = 0" for c in values)).count() == 0


def test_appends_and_compactions_keep_the_view_equal_to_its_query(ivm):
    spark = ivm
    rng = random.Random(7)
    spark.conf.set(COMPACT_CONF, "3")
    spark.sql("INSERT INTO r VALUES (1, 2), (NULL, 1), (2, 3), (2, 3)")
    spark.sql("INSERT INTO s VALUES (1, 2, 1), (2, NULL, NULL), (NULL, 1, 0)")
    spark.sql(f"CREATE INCREMENTAL VIEW v AS {QUERY}")
    store = "v__ivm_maps"
    for round_no in range(1, 5):  # compacted after the 3rd, and refreshed on from the compacted store
        _change(spark, rng)
        spark.sql("INSERT INTO s VALUES (3, 3, 3)")
        spark.sql("DELETE FROM s WHERE k = 3")
        status = spark.sql("REFRESH INCREMENTAL VIEW v").collect()[0]["status"]
        assert status == "refreshed"
        assert _bag(spark.table("v")) == _bag(spark.sql(QUERY)), f"round {round_no}"
        sequence = {(r["map_id"], r["src"]): r["src_version"] for r in spark.sql(bookkeeping_sql(store)).collect()}
        assert sequence[(SEQUENCE_ID, SEQUENCE)] == round_no
        if round_no % 3 == 0:
            _assert_one_live_row_per_key(spark.sql(f"SELECT * FROM {store} WHERE map_id >= 0"))
    assert spark.sql("REFRESH INCREMENTAL VIEW v").collect()[0]["status"] == "up to date"


def _store_files(spark, store: str) -> dict[str, int]:
    """The store's files as of its latest version, with the rows each holds."""
    rows = spark.sql(f"SELECT input_file_name() AS f, COUNT(*) AS n FROM {store} GROUP BY 1").collect()
    return {r["f"]: r["n"] for r in rows}


def _compactions_on_driver(monkeypatch) -> list:
    """Records, per compaction, what the driver's compaction gave (None: Spark compacted)."""
    by_driver = []
    compact_on_driver = refresh.compact_on_driver
    monkeypatch.setattr(refresh, "compact_on_driver",
                        lambda *a: by_driver.append(compact_on_driver(*a)) or by_driver[-1])
    return by_driver


def _view_over_rows(spark, rows: int) -> str:
    """View v over `rows` rows of r and of s; its store's name."""
    spark.sql(f"INSERT INTO r SELECT CAST(id AS INT), CAST(id % 7 AS INT) FROM range({rows})")
    spark.sql(f"INSERT INTO s SELECT CAST(id AS INT), CAST(id % 5 AS INT), CAST(id % 3 AS INT) FROM range({rows})")
    spark.sql(f"CREATE INCREMENTAL VIEW v AS {QUERY}")
    return "v__ivm_maps"


@pytest.mark.parametrize("by", ["driver", "spark"])
def test_compactions_rewrite_the_small_files_and_every_few_the_whole_store(ivm, monkeypatch, by):
    from spark_ivm import heuristics

    spark = ivm
    rng = random.Random(11)
    # Files of 50 rows (the default is sized for millions of map rows); every refresh compacts, every 3rd
    # compaction the whole store.
    monkeypatch.setitem(refresh.STORE_WRITE_SETTINGS, "spark.sql.files.maxRecordsPerFile", "50")
    monkeypatch.setattr(heuristics, "STORE_FILE_ROWS", 50)
    monkeypatch.setattr(heuristics, "WHOLE_STORE_COMPACTION_EVERY", 3)
    if by == "spark":  # more rows than the driver compacts
        monkeypatch.setattr(heuristics, "DRIVER_WRITE_ROWS", 0)
    by_driver = _compactions_on_driver(monkeypatch)
    spark.conf.set(COMPACT_CONF, "1")
    store = _view_over_rows(spark, 200)
    for round_no in range(1, 4):
        before = _store_files(spark, store)
        _change(spark, rng)  # NULLs, duplicates and deletes among the keys of the full files
        spark.sql(f"DELETE FROM r WHERE k = {rng.randint(0, 199)}")
        assert spark.sql("REFRESH INCREMENTAL VIEW v").collect()[0]["status"] == "refreshed"
        assert _bag(spark.table("v")) == _bag(spark.sql(QUERY)), f"round {round_no}"
        after = _store_files(spark, store)
        full = {f for f, n in before.items() if n >= 50}
        if round_no < 3:
            # Compacted: the full files are kept, the small ones replaced by files of one row per map and key.
            assert full and full <= set(after), f"round {round_no}"
            assert not (set(before) - full) & set(after), f"round {round_no}"
            _assert_one_live_row_per_key(spark.read.parquet(*(set(after) - set(before))).where("map_id >= 0"))
        else:
            assert not set(before) & set(after), f"round {round_no}"  # the whole store rewritten
            _assert_one_live_row_per_key(spark.sql(f"SELECT * FROM {store} WHERE map_id >= 0"))
    # Every compaction by the driver where asked, the whole store's too: it is small.
    assert [rows is not None for rows in by_driver] == [by == "driver"] * 3


@pytest.mark.parametrize("by", ["driver", "spark"])
def test_a_compaction_rewrites_the_files_appended_since_the_last_one_however_large(ivm, monkeypatch, by):
    """Files a refresh appends are compacted at the next compaction even when they hold as many rows as a
    full file (a large batch): the rows of a key inserted and deleted again do not pile up until a
    compaction of the whole store. The build's full files stay."""
    from spark_ivm import heuristics

    spark = ivm
    monkeypatch.setattr(heuristics, "STORE_FILE_ROWS", 1)  # no file is small: only appends are compacted
    if by == "spark":
        monkeypatch.setattr(heuristics, "DRIVER_WRITE_ROWS", 0)
    spark.conf.set(COMPACT_CONF, "3")
    store = _view_over_rows(spark, 100)
    built = set(_store_files(spark, store))
    appended = set()
    for round_no in range(1, 4):  # the 3rd refresh compacts
        before = set(_store_files(spark, store))
        statement = "INSERT INTO s VALUES (7, 2, 9), (8, NULL, 9)" if round_no % 2 else "DELETE FROM s WHERE g = 9"
        spark.sql(statement)
        assert spark.sql("REFRESH INCREMENTAL VIEW v").collect()[0]["status"] == "refreshed"
        assert _bag(spark.table("v")) == _bag(spark.sql(QUERY)), f"round {round_no}"
        after = set(_store_files(spark, store))
        if round_no < 3:
            appended |= after - before
    assert appended and built <= after and not appended & after
    # What replaced them: one row per map and key, none of a key whose values cancelled out.
    compacted = spark.read.parquet(*(after - built)).where("map_id >= 0")
    _assert_one_live_row_per_key(compacted)


def test_a_refresh_compacts_before_its_turn_where_the_appends_would_outgrow_the_drivers_compaction(ivm, monkeypatch):
    """Where the files appended since the last compaction and the refresh's rows fit DRIVER_WRITE_ROWS and
    another refresh's rows would not, the refresh compacts them on the driver, before compactEvery says:
    what appends pile up stays within what the driver compacts (and reads at a batch's keys)."""
    from spark_ivm import heuristics

    spark = ivm
    by_driver = _compactions_on_driver(monkeypatch)
    spark.conf.set(COMPACT_CONF, "100")
    store = _view_over_rows(spark, 100)
    # The driver compacts the store as built and a few refreshes' rows, not many.
    monkeypatch.setattr(heuristics, "DRIVER_WRITE_ROWS", spark.table(store).count() + 20)
    for round_no in range(1, 9):
        spark.sql(f"INSERT INTO s VALUES ({round_no}, {round_no}, {10 + round_no})")
        assert spark.sql("REFRESH INCREMENTAL VIEW v").collect()[0]["status"] == "refreshed"
        assert _bag(spark.table("v")) == _bag(spark.sql(QUERY)), f"round {round_no}"
    modes = [r["operationParameters"]["mode"] for r in spark.sql(f"DESCRIBE HISTORY {store}").collect()
             if r["operation"] == "WRITE"]
    assert "Overwrite" in modes and by_driver and all(rows is not None for rows in by_driver)
    _assert_one_live_row_per_key(spark.sql(f"SELECT * FROM {store} WHERE map_id >= 0"))


def _store_reads(spark, monkeypatch, store: str) -> list[tuple[int, int, int, int]]:
    """Records, for each refresh that reads the store once, (rows it copies, files it reads, the store's
    rows, the store's files), the store taken as first created. Counted while the refresh runs: the
    condition refers to the refresh's own batches."""
    read = []

    def spy(run, table, rows, kept=None, map_ids=None):
        assert table.endswith(store)
        before = spark.read.format("delta").option("versionAsOf", 0).table(table)
        needed = before.where(str(all_of(rows, kept)))  # as the refresh reads it
        read.append((needed.count(), len(needed.inputFiles()), before.count(), len(before.inputFiles())))
        return real(run, table, rows, kept, map_ids)

    real = run.RefreshRun.read_store_once
    monkeypatch.setattr(run.RefreshRun, "read_store_once", spy)
    return read


def test_a_refresh_reads_only_the_store_files_of_the_keys_its_batch_touches(ivm, monkeypatch):
    spark = ivm
    # Files of 50 rows, so that a small store has many (the default is sized for millions of map rows).
    monkeypatch.setitem(refresh.STORE_WRITE_SETTINGS, "spark.sql.files.maxRecordsPerFile", "50")
    read = _store_reads(spark, monkeypatch, "v__ivm_maps")
    spark.sql("INSERT INTO r SELECT CAST(id AS INT), CAST(id % 7 AS INT) FROM range(1000)")
    spark.sql("INSERT INTO s SELECT CAST(id AS INT), CAST(id % 5 AS INT), CAST(id % 3 AS INT) FROM range(1000)")
    spark.sql(f"CREATE INCREMENTAL VIEW v AS {QUERY}")
    # New keys and a deleted one at the top of the range, and a NULL key (which joins NULL-safely in
    # the maps).
    spark.sql("INSERT INTO r VALUES (990, 5), (995, 1), (NULL, 4)")
    spark.sql("INSERT INTO s VALUES (991, 2, 1), (NULL, 3, 3)")
    spark.sql("DELETE FROM s WHERE k = 980")
    assert spark.sql("REFRESH INCREMENTAL VIEW v").collect()[0]["status"] == "refreshed"
    assert _bag(spark.table("v")) == _bag(spark.sql(QUERY))
    # The maps keyed by k are read at the batches' keys (980…995 and NULL), not at all 1,000.
    (copied, files, rows, all_files), = read
    assert copied < 0.1 * rows
    assert files < 0.2 * all_files
    # Keys at both ends of the range: Delta skips no file, but only the rows of the batch's keys are
    # copied.
    spark.sql("INSERT INTO r VALUES (3, 5), (996, 1)")
    spark.sql("INSERT INTO s VALUES (2, 2, 1)")
    assert spark.sql("REFRESH INCREMENTAL VIEW v").collect()[0]["status"] == "refreshed"
    assert _bag(spark.table("v")) == _bag(spark.sql(QUERY))
    copied, files, rows, all_files = read[1]
    assert copied < 0.1 * rows


CHAIN = ("SELECT cu.ck, cu.name, SUM(li.price) AS total, COUNT(*) AS n "
         "FROM cu JOIN od ON cu.ck = od.ck JOIN li ON li.ok = od.ok GROUP BY cu.ck, cu.name")


def test_a_refresh_copies_the_rows_it_reaches_through_another_map_the_same_refresh_writes(ivm, monkeypatch):
    """New orders and their lineitems in one refresh: the lineitems' statements reach the customers' map
    through the orders' map, which the orders' batch writes first, at customers spread over all keys."""
    spark = ivm
    read = _store_reads(spark, monkeypatch, "chain__ivm_maps")
    spark.sql("CREATE TABLE cu (ck INT, name STRING) USING delta")
    spark.sql("CREATE TABLE od (ok INT, ck INT) USING delta")
    spark.sql("CREATE TABLE li (ok INT, price INT) USING delta")
    spark.sql("INSERT INTO cu SELECT CAST(id AS INT), CONCAT('c', id) FROM range(1000)")
    spark.sql("INSERT INTO od SELECT CAST(id AS INT), CAST(id * 37 % 1000 AS INT) FROM range(2000)")
    spark.sql("INSERT INTO li SELECT CAST(id % 2000 AS INT), CAST(id % 11 AS INT) FROM range(4000)")
    spark.sql(f"CREATE INCREMENTAL VIEW chain AS {CHAIN}")
    # Orders of customers at both ends of the key range and one without a customer, lineitems of new
    # and old orders, a deleted lineitem of an old order.
    spark.sql("INSERT INTO od VALUES (2000, 5), (2001, 995), (2002, 500), (2003, NULL)")
    spark.sql("INSERT INTO li VALUES (2000, 3), (2001, 4), (2001, 5), (2003, 1), (1999, 7)")
    spark.sql("DELETE FROM li WHERE ok = 1998 AND price = 1")
    assert spark.sql("REFRESH INCREMENTAL VIEW chain").collect()[0]["status"] == "refreshed"
    assert _bag(spark.table("chain")) == _bag(spark.sql(CHAIN))
    (copied, _, rows, _), = read
    assert copied < 0.02 * rows  # not the thousand rows of the customers' map
    spark.sql("INSERT INTO li VALUES (2002, 2), (2000, 6)")
    spark.sql("DELETE FROM od WHERE ok = 2000")
    assert spark.sql("REFRESH INCREMENTAL VIEW chain").collect()[0]["status"] == "refreshed"
    assert _bag(spark.table("chain")) == _bag(spark.sql(CHAIN))


def _overlapping_files(spark, store: str) -> list[tuple]:
    """Pairs of the store's files whose ranges of one map's keys overlap: for each map, its first key
    column in the store's order (the one its rows are sorted by first; NULL keys left out)."""
    keys = [c for c in spark.table(store).columns if c.startswith("k_")]
    rows = spark.sql(f"SELECT input_file_name() AS f, * FROM {store} WHERE map_id >= 0").collect()
    by_map: dict[tuple[int, str], dict[str, list]] = {}
    for r in rows:
        used = next((k for k in keys if r[k] is not None), None)
        if used is not None:
            by_map.setdefault((r["map_id"], used), {}).setdefault(r["f"], []).append(r[used])
    overlapping = []
    for (map_id, key), files in by_map.items():
        ranges = sorted((min(v), max(v), f) for f, v in files.items())
        overlapping += [(map_id, key, a, b) for a, b in zip(ranges, ranges[1:]) if b[0] < a[1]]
    return overlapping


@pytest.mark.parametrize("write", ["build", "compaction"])
def test_a_store_written_by_many_tasks_has_each_key_range_in_one_file(ivm, monkeypatch, write):
    from spark_ivm import heuristics

    spark = ivm
    monkeypatch.setitem(refresh.STORE_WRITE_SETTINGS, "spark.sql.files.maxRecordsPerFile", "50")
    spark.sql("INSERT INTO r SELECT CAST(id AS INT), CAST(id % 7 AS INT) FROM range(1000)")
    spark.sql("INSERT INTO s SELECT CAST(id AS INT), CAST(id % 5 AS INT), CAST(id % 3 AS INT) FROM range(1000)")
    spark.sql("INSERT INTO r VALUES (NULL, 4), (NULL, 4), (7, NULL)")  # NULL keys, duplicates
    # A partition per 4 KB of what the write reads: the sources, or the store, of a few KB each.
    chosen = []

    def many():
        monkeypatch.setattr(heuristics, "STORE_WRITE_PARTITION_BYTES", 4096)
        real = heuristics.store_write_partitions
        monkeypatch.setattr(heuristics, "store_write_partitions", lambda *a: chosen.append(real(*a)) or chosen[-1])

    if write == "build":
        many()
    spark.sql(f"CREATE INCREMENTAL VIEW v AS {QUERY}")
    if write == "compaction":
        many()
        monkeypatch.setattr(heuristics, "WHOLE_STORE_COMPACTION_EVERY", 1)
        monkeypatch.setattr(heuristics, "DRIVER_WRITE_ROWS", 0)  # Spark's compaction, not the driver's
        spark.conf.set(COMPACT_CONF, "1")
        spark.sql("INSERT INTO r VALUES (990, 5), (3, 1)")
        spark.sql("DELETE FROM s WHERE k = 500")
        assert spark.sql("REFRESH INCREMENTAL VIEW v").collect()[0]["status"] == "refreshed"
    assert chosen and chosen[0] > 2  # the write ran in more tasks than the session's 2 partitions
    assert _bag(spark.table("v")) == _bag(spark.sql(QUERY))
    _assert_one_live_row_per_key(spark.sql("SELECT * FROM v__ivm_maps WHERE map_id >= 0"))
    assert not _overlapping_files(spark, "v__ivm_maps")
    # And a refresh after it reads only the files of its batch's keys.
    read = _store_reads(spark, monkeypatch, "v__ivm_maps")
    spark.sql("INSERT INTO r VALUES (995, 1)")
    assert spark.sql("REFRESH INCREMENTAL VIEW v").collect()[0]["status"] == "refreshed"
    assert _bag(spark.table("v")) == _bag(spark.sql(QUERY))
    if write == "build":  # the spy reads the store as first created
        (copied, files, rows, all_files), = read
        assert files < 0.2 * all_files


def test_a_write_computed_from_an_older_store_version_is_refused(ivm):
    spark = ivm
    spark.sql("INSERT INTO r VALUES (1, 2)")
    spark.sql("INSERT INTO s VALUES (1, 5, 1)")
    spark.sql(f"CREATE INCREMENTAL VIEW v AS {QUERY}")
    engine: Engine = spark._spark_ivm_engine
    store = engine.entry("v").store
    before = engine.logs.snapshot(store)  # what another refresh starting now would compute from
    spark.sql("INSERT INTO r VALUES (1, 10)")
    assert spark.sql("REFRESH INCREMENTAL VIEW v").collect()[0]["status"] == "refreshed"
    expected = _bag(spark.sql(QUERY))
    assert _bag(spark.table("v")) == expected
    # That other refresh would write the same increments again: Delta must refuse its commit.
    again = spark.sql(f"SELECT * FROM {store} WHERE map_id >= 0")
    with pytest.raises(ConcurrentCommitError):
        engine.logs.append(before, again, bookkeeping_metadata({}))
    assert engine.store_version(store) == before.version + 1
    spark.sql("REFRESH INCREMENTAL VIEW v")
    assert _bag(spark.table("v")) == expected


def test_a_cached_entry_of_a_view_replaced_elsewhere_is_read_again(ivm):
    spark = ivm
    spark.sql("INSERT INTO r VALUES (1, 2), (2, 4)")
    spark.sql("INSERT INTO s VALUES (1, 5, 1), (2, 1, 2)")
    spark.sql(f"CREATE INCREMENTAL VIEW v AS {QUERY}")
    spark.sql("REFRESH INCREMENTAL VIEW v")  # this session's engine now holds v's entry
    other = Engine(spark)  # stands for another process using the same warehouse
    other.drop("v")
    other_query = "SELECT r.k, COUNT(*) AS n FROM r GROUP BY r.k"
    other.execute(parse_statement(f"CREATE INCREMENTAL VIEW v AS {other_query}"))
    spark.sql("INSERT INTO r VALUES (2, 8)")
    assert spark.sql("REFRESH INCREMENTAL VIEW v").collect()[0]["status"] == "refreshed"
    assert _bag(spark.table("v")) == _bag(spark.sql(other_query))


def test_an_engine_sees_a_refresh_made_by_another_after_its_own(ivm):
    # An engine reads a store's progress from its latest commit: after another process refreshed, the
    # progress that process left.
    spark = ivm
    spark.sql("INSERT INTO r VALUES (1, 2)")
    spark.sql("INSERT INTO s VALUES (1, 5, 1)")
    spark.sql(f"CREATE INCREMENTAL VIEW v AS {QUERY}")
    ours, other = spark._spark_ivm_engine, Engine(spark)
    for round_no, engine in enumerate([ours, ours, other, ours]):
        spark.sql(f"INSERT INTO r VALUES (1, {round_no})")
        assert engine.refresh("v")["status"] == "refreshed"
        assert _bag(spark.table("v")) == _bag(spark.sql(QUERY)), f"round {round_no}"



SHARING = ("SELECT s.g, SUM(r.x * s.y) AS total, COUNT(*) AS n, SUM(r.x) AS xs, COUNT(r.x) AS nx "
           "FROM r JOIN s ON r.k = s.k GROUP BY s.g")


def _map_lines(spark, view: str) -> list[str]:
    """EXPLAIN's lines of the view's maps (name, keys, rows, value type), without the view's name."""
    text = spark.sql(f"EXPLAIN INCREMENTAL VIEW {view}").collect()[0][0]
    return [line.split(" (in ")[0].replace(f"{view}_", "") for line in text.splitlines() if line.startswith("-- map ")]


def test_maps_of_one_product_share_rows_beside_maps_stored_one_per_row(ivm, monkeypatch):
    from spark_ivm import heuristics
    from spark_ivm.runtime.viewsql import view_maps

    spark = ivm
    rng = random.Random(11)
    spark.conf.set(COMPACT_CONF, "3")
    spark.sql("INSERT INTO r VALUES (1, 2), (NULL, 1), (2, 3), (2, 0)")
    spark.sql("INSERT INTO s VALUES (1, 2, 1), (2, NULL, NULL), (NULL, 1, 0), (2, 0, 5)")
    # One store: a view as views were stored before maps shared rows, and one whose maps share them.
    monkeypatch.setattr(heuristics, "MAPS_SHARE_ROWS", False)
    spark.sql(f"CREATE INCREMENTAL VIEW apart WITH (store = 'm') AS {SHARING}")
    monkeypatch.setattr(heuristics, "MAPS_SHARE_ROWS", True)
    spark.sql(f"CREATE INCREMENTAL VIEW shared WITH (store = 'm') AS {SHARING}")
    engine: Engine = spark._spark_ivm_engine
    apart, shared = engine.entry("apart"), engine.entry("shared")
    assert not any(apart.layout.shares_rows(m.name) for m in apart.layout.maps)
    family = view_maps(shared)  # the view's SUMs and COUNTs (all BIGINT), over one product per s.g
    assert len({m.map_id for m in family}) == 1 and len(family) >= 4
    assert sorted(m.value_column for m in family) == sorted(
        ["v_bigint"] + [f"v_bigint__{n}" for n in range(2, len(family) + 1)])
    rows_of = "SELECT COUNT(*) FROM m WHERE map_id = {} AND src IS NULL"
    for round_no in range(1, 5):  # compacted after the 3rd, and refreshed on from the compacted store
        _change(spark, rng)
        for view in ("apart", "shared"):
            assert spark.sql(f"REFRESH INCREMENTAL VIEW {view}").collect()[0]["status"] == "refreshed"
            assert _bag(spark.table(view)) == _bag(spark.sql(SHARING)), f"{view}, round {round_no}"
        # Each map holds the same keys and values stored either way.
        assert _map_lines(spark, "shared") == _map_lines(spark, "apart")
        assert "of the rows it shares with shared_" in spark.sql("EXPLAIN INCREMENTAL VIEW shared").collect()[0][0]
        if round_no % 3 == 0:  # compacted: one row per key for the whole family
            groups = apart.layout.map("apart_count").map_id  # the groups' count: every key of the family
            assert spark.sql(rows_of.format(family[0].map_id)).collect()[0][0] == \
                spark.sql(rows_of.format(groups)).collect()[0][0] > 0


def test_a_create_removes_rows_of_a_shared_store_that_belong_to_none_of_its_views(ivm, capsys):
    """Rows an unfinished CREATE left in a shared store (maps no catalog entry names) are removed by the next
    CREATE into that store, which finds them through the driver's read of the store's files; a store
    without such rows is left as it is."""
    spark = ivm
    spark.sql("INSERT INTO r VALUES (1, 2), (2, NULL)")
    spark.sql("INSERT INTO s VALUES (1, 3, 7), (2, 4, 8)")
    spark.sql(f"CREATE INCREMENTAL VIEW kept WITH (store = 'shared_maps') AS {QUERY}")
    spark.sql("CREATE INCREMENTAL VIEW clean WITH (store = 'shared_maps') AS SELECT k, COUNT(*) AS n FROM r GROUP BY k")
    assert "leftovers" not in capsys.readouterr().out
    columns = [f.name for f in spark.table("shared_maps").schema.fields]
    leftover = ", ".join("CAST(900 AS INT)" if c == "map_id" else "NULL" for c in columns)
    spark.sql(f"INSERT INTO shared_maps VALUES ({leftover})")
    spark.sql("CREATE INCREMENTAL VIEW after WITH (store = 'shared_maps') AS SELECT g, SUM(y) AS t FROM s GROUP BY g")
    assert "rows of the map store" in capsys.readouterr().out
    assert spark.sql("SELECT 1 FROM shared_maps WHERE map_id = 900").count() == 0
    spark.sql("INSERT INTO r VALUES (1, 5)")
    spark.sql("REFRESH INCREMENTAL VIEW kept")
    assert _bag(spark.table("kept")) == _bag(spark.sql(QUERY))
