"""The order-book queries of the DBToaster finance benchmark (VWAP, broker spread, axfinder, price
spread, broker variance) as incremental views.

Pure Python: each query compiles at depth 1 and unlimited; its translation gives the rows sqlite3
gives; on a random order book with a stream of adds, cancels and amendments (duplicates and NULLs
included), running the plan's triggers keeps every map equal to its definition evaluated from
scratch, and the view read from the maintained maps equal to the query run by sqlite3.

On Spark (part of ./build.sh test): the five queries as incremental views at both depths, in two groups
with a shared map store each, equal their queries run by Spark when created and after each of
SPARK_ROUNDS rounds of changes and REFRESH INCREMENTAL VIEWS. CI runs one round;
SPARK_IVM_ORDERBOOK_ROUNDS=N runs N (each round costs minutes on 2 cores).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sqlite3
from collections import Counter
from decimal import Decimal

import pyarrow as pa
import pytest

from spark_ivm import compile_view
from spark_ivm.bench.orderbook import (
    QUERIES, SCHEMAS, TABLES, OrderBookStream, ddl, event_sql, load_orderbook, net_change, read_query, run_events,
)
from spark_ivm.calculus.evaluator import Database, apply_batch, evaluate_map, initial_maps
from spark_ivm.calculus.expressions import MapRef
from spark_ivm.frontend.translate import translate

from test_sql_frontend import normalized, to_sqlite, view_rows
from test_sqlgen import Checker, DuckDatabase, _arrow_type, run_scenario

DEPTHS = {"depth1": 1, "unlimited": None}
BATCHES = 6


def book_database(stream: OrderBookStream) -> Database:
    return Database({table: dict(rows) for table, rows in stream.book.items()})


def sqlite_rows(sql: str, book: dict[str, dict[tuple, int]]) -> list[tuple]:
    """The query run by sqlite3 on the book (decimals as floats: every value is a binary fraction)."""
    db = sqlite3.connect(":memory:")
    for table, rows in book.items():
        columns = SCHEMAS[table]
        db.execute(f"CREATE TABLE {table} ({', '.join(columns)})")
        copies = [tuple(float(v) if isinstance(v, Decimal) else v for v in row)
                  for row, n in rows.items() for _ in range(n)]
        db.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(columns))})", copies)
    return db.execute(to_sqlite(sql)).fetchall()


def maintained_view_rows(plan, db: Database) -> list[tuple]:
    """The view's rows read from the maintained root maps (`q_<aggregate>`) instead of from definitions."""
    query = plan.query
    from_maps = tuple(dataclasses.replace(a, definition=MapRef(f"q_{a.name}", plan.map(f"q_{a.name}").keys))
                      for a in query.aggregates)
    return view_rows(dataclasses.replace(query, aggregates=from_maps), db)


def test_queries_are_the_five_of_the_benchmark():
    for name in QUERIES:
        query = read_query(name)
        assert query.title and query.sql.upper().startswith("SELECT")
        assert set(translate(query.sql, SCHEMAS).relations) <= set(TABLES)


@pytest.mark.parametrize("depth", DEPTHS.values(), ids=DEPTHS.keys())
@pytest.mark.parametrize("name", QUERIES)
def test_query_compiles(name, depth):
    plan = compile_view(read_query(name).sql, SCHEMAS, depth=depth)
    assert plan.maps and plan.triggers
    assert set(plan.relations) == set(plan.query.relations)


@pytest.mark.parametrize("name", QUERIES)
def test_translation_gives_the_rows_sqlite_gives(name):
    sql = read_query(name).sql
    stream = OrderBookStream(seed=f"translate-{name}")
    stream.initial_book(orders=12)
    expected = sqlite_rows(sql, stream.book)
    assert normalized(view_rows(translate(sql, SCHEMAS), book_database(stream)), False) == normalized(expected, False)


@pytest.mark.parametrize("depth", DEPTHS.values(), ids=DEPTHS.keys())
@pytest.mark.parametrize("name", QUERIES)
def test_triggers_keep_maps_and_view_equal_to_their_definitions(name, depth):
    sql = read_query(name).sql
    plan = compile_view(sql, SCHEMAS, depth=depth)
    stream = OrderBookStream(seed=f"{name}-{depth}")
    stream.initial_book(orders=8)
    db = book_database(stream)
    initial_maps(plan, db)
    for batch_no in range(BATCHES):
        events = stream.next_batch()
        for table, change in net_change(db.relations, events).items():
            apply_batch(plan, db, table, change)
        assert db.relations == stream.book
        for m in plan.maps:
            expected = evaluate_map(m.definition, m.keys, db)
            assert db.maps[m.name] == expected, f"{name}: map {m.name} after batch {batch_no}: {events}"
        view = normalized(maintained_view_rows(plan, db), False)
        assert view == normalized(sqlite_rows(sql, stream.book), False), f"{name}: view after batch {batch_no}"


# Base columns as DuckDB decimals of 38 digits: with the tables' DECIMAL(10,2) DuckDB overflows on BSV's
# product of four decimals (it does not widen a product past 18 digits as Spark does).
ARROW_TYPES = {"t": pa.int64(), "id": pa.int64(), "broker_id": pa.int64(),
               "volume": pa.decimal128(38, 2), "price": pa.decimal128(38, 2)}


DECIMAL_LITERAL = re.compile(r"\b(\d+(?:\.\d+)?)BD\b")


class OrderBookDuckDatabase(DuckDatabase):
    """Maps of products of volumes and prices hold decimals of more than 18 digits: give them 38.
    Spark's decimal literals (`0.25BD`) are DuckDB's plain ones."""

    def run(self, duck_sql: str, keys, stages=()) -> dict:
        return super().run(DECIMAL_LITERAL.sub(r"\1", duck_sql), keys, stages)

    def _register(self, name: str, columns, rows, types=None) -> None:
        if types is None:
            types = {c: _wide_type([r[i] for r in rows]) for i, c in enumerate(columns)}
        super()._register(name, columns, rows, types)


def _wide_type(values):
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, Decimal) for v in present):
        return pa.decimal128(38, max(-v.as_tuple().exponent for v in present))
    return _arrow_type(values)


@pytest.mark.parametrize("name", QUERIES)
def test_generated_sql_equals_the_reference_evaluator(name):
    """Every map definition and trigger statement of both depths' plans, as the runtime's Spark SQL run
    by DuckDB, gives what the reference evaluator gives, before and after each batch of the stream."""
    duck = OrderBookDuckDatabase(SCHEMAS, {table: ARROW_TYPES for table in TABLES})
    failures = []
    for label, depth in DEPTHS.items():
        plan = compile_view(read_query(name).sql, SCHEMAS, depth=depth)
        stream = OrderBookStream(seed=f"sqlgen-{name}-{label}")
        stream.initial_book(orders=6)
        relations = {table: dict(rows) for table, rows in stream.book.items()}
        batches = []
        for _ in range(3):
            before = {table: dict(rows) for table, rows in stream.book.items()}
            batches += [(table, change) for table, change in net_change(before, stream.next_batch()).items()]
        failures += [f"{label}: {f}" for f in run_scenario(plan, Checker(plan, duck), relations, batches)]
    assert not failures, "\n".join(failures[:5])


def test_stream_adds_cancels_and_amends_with_duplicates_and_nulls():
    stream = OrderBookStream(seed=3)
    stream.initial_book(orders=30)
    kinds = Counter()
    for _ in range(20):
        kinds.update(type(e).__name__ for e in stream.next_batch())
    assert kinds["Insert"] and kinds["Cancel"] and kinds["Amend"]
    rows = [row for table in TABLES for row in stream.book[table]]
    assert any(n > 1 for table in TABLES for n in stream.book[table].values()), "no duplicate rows"
    for i, column in enumerate(SCHEMAS["bids"]):
        if column in ("broker_id", "volume", "price"):
            assert any(row[i] is None for row in rows), f"no NULL {column}"


def test_events_are_sql_statements_on_their_table():
    stream = OrderBookStream(seed=5)
    stream.initial_book(orders=3)
    for event in stream.next_batch(adds=2, cancels=2, amends=2):
        statement = event_sql(event, "ob")
        assert f"ob.{event.table}" in statement
        assert statement.split()[0] in ("INSERT", "DELETE", "UPDATE")
    assert ddl("asks", "ob").startswith("CREATE TABLE ob.asks (t BIGINT, id BIGINT, broker_id BIGINT")


# ---------------------------------------------------------------------------------------------------
# On Spark: the views equal their queries after every refresh

SPARK_ROUNDS = int(os.environ.get("SPARK_IVM_ORDERBOOK_ROUNDS", "1"))
# The self-joins and joins on the broker, and the queries with scalar subqueries (nested aggregates).
SPARK_GROUPS = {"joins": ("bsp", "axf", "bsv"), "nested": ("vwap", "psp")}


def _contents(spark, queries: dict[str, str]) -> dict[str, Counter]:
    """The bag of rows of each query, all read by one Spark query (rows as JSON: decimals exact)."""
    union = " UNION ALL ".join(
        f"SELECT '{name}' AS name, to_json(struct(*), map('ignoreNullFields', 'false')) AS row FROM ({sql}) AS q"
        for name, sql in queries.items())
    contents = {name: Counter() for name in queries}
    for r in spark.sql(union).collect():
        values = json.loads(r["row"], parse_float=Decimal).values()
        contents[r["name"]][tuple(Decimal(v).normalize() if isinstance(v, (int, Decimal)) and not isinstance(v, bool)
                                  else v for v in values)] += 1
    return contents


@pytest.fixture(scope="module")
def orderbook_views(spark, request):
    import spark_ivm

    spark_ivm.enable(spark)
    stream = OrderBookStream(seed=20261123)
    # A database per group, so that REFRESH INCREMENTAL VIEWS refreshes this group's views only.
    database = f"orderbook_{request.param[0]}"
    load_orderbook(spark, stream.initial_book(orders=15), database)
    spark.sql(f"USE {database}")
    views = {}
    for name in request.param:
        for label, depth in DEPTHS.items():
            view = f"{name}_{label}"
            options = ", ".join(["store = 'orderbook_maps'"] + ([] if depth is None else [f"depth = {depth}"]))
            spark.sql(f"CREATE INCREMENTAL VIEW {view} WITH ({options}) AS {read_query(name).sql}")
            views[view] = read_query(name).sql
    yield database, views, stream
    spark.sql("USE default")


@pytest.mark.runtime
@pytest.mark.parametrize("orderbook_views", SPARK_GROUPS.values(), indirect=True, ids=SPARK_GROUPS.keys())
def test_views_equal_their_queries_after_every_refresh(spark, orderbook_views):
    database, views, stream = orderbook_views
    spark.sql(f"USE {database}")
    failures = []
    for name, sql in views.items():
        view_columns = [(f.name, f.dataType.simpleString()) for f in spark.table(name).schema.fields]
        query_columns = [(f.name, f.dataType.simpleString()) for f in spark.sql(sql).schema.fields]
        if view_columns != query_columns:
            failures.append(f"{name}: view columns {view_columns}, query columns {query_columns}")
    for round_no in range(SPARK_ROUNDS + 1):
        if round_no:
            run_events(spark, stream.next_batch())
            statuses = {r["view"]: r["status"] for r in spark.sql("REFRESH INCREMENTAL VIEWS").collect()}
            assert set(statuses.values()) <= {"refreshed", "up to date"}, statuses
        got_all = _contents(spark, {name: f"SELECT * FROM {name}" for name in views})
        want_all = _contents(spark, views)
        for name, sql in views.items():
            if got_all[name] != want_all[name]:
                failures.append(f"round {round_no}, {name}:\n  view  {sorted(got_all[name].items(), key=repr)}\n"
                                f"  query {sorted(want_all[name].items(), key=repr)}")
    assert not failures, "\n".join(failures)
