"""Shared fixtures.

- ``spark``: one local Spark session (Delta Lake, Hive metastore) for the whole run,
  with its warehouse in a pytest temp folder.
- ``fresh_db``: a new, uniquely named database, made current (``USE``), for one test.

Tests that use ``spark`` (directly or through another fixture) are marked ``spark``
automatically, so ``pytest -m "not spark"`` runs only the pure-Python tests.
"""

from __future__ import annotations

import itertools
import re

from pathlib import Path

import pytest

import crash_chains as crash_chains_module  # tests/ is on the path of conftest.py

_db_counter = itertools.count(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
    # The crash chains run in the background from the first test on (crash_chains.py): the pure-Python
    # tests first, beside them, then those with Spark or processes of their own, and last the crash tests,
    # which read the chains' outcome. Otherwise in the order collected.
    items.sort(key=lambda item: 2 if Path(str(item.fspath)).name == crash_chains_module.MODULE
               else 1 if item.get_closest_marker("spark") or item.get_closest_marker("runtime") else 0)


@pytest.fixture(scope="session", autouse=True)
def crash_chains(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """The chains of test_crash_resume.py, started with the session's first test when any of its chain
    tests is selected (None otherwise); workers still running when the session ends are killed."""
    items = request.session.items
    steps = [s for s in crash_chains_module.crash_steps() if s in crash_chains_module.selected(items, "step")]
    ddl = bool(crash_chains_module.selected(items, "stage"))
    if not (steps or ddl):
        yield None
        return
    chains = crash_chains_module.Chains()
    chains.start(steps, ddl, tmp_path_factory.mktemp("crash_chains"))
    yield chains
    chains.stop()


@pytest.fixture(scope="session")
def spark_warehouse(tmp_path_factory: pytest.TempPathFactory):
    """The warehouse folder of the ``spark`` session."""
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="session")
def spark(spark_warehouse):
    from spark_ivm.session import session

    spark = session(warehouse=str(spark_warehouse), log_level="ERROR")
    yield spark
    spark.stop()


@pytest.fixture
def fresh_db(spark, request: pytest.FixtureRequest) -> str:
    """Create a database unique to this test, ``USE`` it, and return its name."""
    stem = re.sub(r"[^0-9a-z]+", "_", request.node.name.lower()).strip("_")[:40]
    name = f"t{next(_db_counter)}_{stem}"
    spark.sql(f"CREATE DATABASE {name}")
    spark.sql(f"USE {name}")
    yield name
    # Leave the tables: the warehouse is a temp folder, and dropping costs time.
    spark.sql("USE default")


def vacuum_change_feed(spark, table: str) -> None:
    """VACUUM the table with no retention, so that the change data files of its versions are gone (the test
    fails if VACUUM kept them: it would not test what it says)."""
    # Delta lists the table's folders in as many tasks as this parallelism (10,000 by default): most of a
    # VACUUM's time on a small local table.
    settings = {"spark.databricks.delta.retentionDurationCheck.enabled": "false",
                "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2"}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        spark.sql(f"VACUUM {table} RETAIN 0 HOURS")
    finally:
        for key in settings:
            spark.conf.unset(key)
    location = spark.sql(f"DESCRIBE DETAIL {table}").collect()[0]["location"].removeprefix("file:")
    cdc = Path(location) / "_change_data"
    kept = [p for p in cdc.rglob("*") if p.is_file()] if cdc.exists() else []
    assert not kept, f"VACUUM kept the change data files of {table}: {kept[:3]}"
