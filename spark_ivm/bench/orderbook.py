"""The order-book queries of the DBToaster finance benchmark over `bids` and `asks`, and a random
order-book stream to run them on.

    stream = OrderBookStream(seed=7)
    book = stream.initial_book(orders=20)          # {table: [rows]}
    load_orderbook(spark, book, "orderbook")        # Delta tables with the change data feed on
    events = stream.next_batch()                    # adds, cancels and amendments of orders
    run_events(spark, events, "orderbook")          # as INSERT, DELETE and UPDATE statements

Both tables hold orders `(t, id, broker_id, volume, price)`: a timestamp, the order's id, its broker,
and DECIMAL volume and price, so that sums compare exactly. The stream adds new orders (sometimes
the same row twice, sometimes with a NULL broker, volume or price), cancels live ones (every row of
the order's id) and amends the volume or price of a live order. `OrderBookStream.book` is the bag
the tables hold after the events so far, and `net_change` turns a batch of events into the
per-table `{row: ±multiplicity}` changes that the reference evaluator applies.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from spark_ivm.bench.tpch import Query, read_query as _read_query

TABLES = ("bids", "asks")
QUERIES = ("vwap", "bsp", "axf", "psp", "bsv")

COLUMN_TYPES = (("t", "BIGINT"), ("id", "BIGINT"), ("broker_id", "BIGINT"),
                ("volume", "DECIMAL(10,2)"), ("price", "DECIMAL(10,2)"))
SCHEMAS = {table: [name for name, _ in COLUMN_TYPES] for table in TABLES}
TABLE_PROPERTIES = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}

# The queries of this repository (sql/orderbook/<name>.sql), present in a source checkout.
QUERY_DIR = Path(__file__).resolve().parents[2] / "sql" / "orderbook"

# Volumes span five orders of magnitude so that "more than a small fraction of the total volume"
# (PSP) and "a quarter of the total volume" (VWAP) select some orders and not others. Every value is
# a binary fraction: sums and products stay exact in floating point too (for engines without DECIMAL).
VOLUMES = tuple(Decimal(v) for v in ("0.25", "0.50", "2", "10", "75", "400", "2500"))
PRICES = tuple(Decimal(98) + Decimal(i) / 4 for i in range(21))  # 98.00 … 103.00 by 0.25
BROKERS = (1, 2, 3, 4)
NULL_RATE = 0.08


def ddl(table: str, database: str | None = None) -> str:
    """CREATE TABLE for `bids` or `asks` as a Delta table with the change data feed on."""
    if table not in TABLES:
        raise ValueError(f"unknown order-book table {table!r}; known: {', '.join(TABLES)}")
    columns = ", ".join(f"{name} {sql_type}" for name, sql_type in COLUMN_TYPES)
    properties = ", ".join(f"'{k}' = '{v}'" for k, v in TABLE_PROPERTIES.items())
    return f"CREATE TABLE {_qualified(table, database)} ({columns}) USING delta TBLPROPERTIES ({properties})"


def read_query(name: str, folder: str | Path = QUERY_DIR) -> Query:
    """sql/orderbook/<name>.sql, its leading comment split off as the title."""
    return _read_query(name, folder)


# -- the stream ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Insert:
    table: str
    rows: tuple[tuple, ...]


@dataclass(frozen=True)
class Cancel:
    """Every row of the order `order_id` leaves the book."""

    table: str
    order_id: int


@dataclass(frozen=True)
class Amend:
    """The order `order_id` gets a new volume or price (a partial fill or a price change)."""

    table: str
    order_id: int
    column: str
    value: object


Event = Insert | Cancel | Amend


class OrderBookStream:
    """A seeded random stream of order-book events; `book` follows the tables' contents."""

    def __init__(self, seed: int | str = 0):
        self.rng = random.Random(seed)
        self.book: dict[str, dict[tuple, int]] = {table: {} for table in TABLES}
        self.clock = 0
        self.next_id = 1

    def initial_book(self, orders: int = 20) -> dict[str, list[tuple]]:
        """About `orders` new orders per table, added to `book` and returned as rows per table."""
        rows = {table: [] for table in TABLES}
        for table in TABLES:
            for _ in range(orders):
                rows[table].extend(self._new_order_rows())
        for table, added in rows.items():
            for row in added:
                _add(self.book[table], row, 1)
        return rows

    def next_batch(self, adds: int = 3, cancels: int = 2, amends: int = 1) -> list[Event]:
        """Up to `adds` additions, `cancels` cancellations and `amends` amendments per table, in a
        random order (an order added in the batch may be cancelled or amended in the same batch)."""
        events: list[Event] = []
        for table in TABLES:
            kinds = (["add"] * self.rng.randint(0, adds) + ["cancel"] * self.rng.randint(0, cancels)
                     + ["amend"] * self.rng.randint(0, amends))
            self.rng.shuffle(kinds)
            for kind in kinds:
                event = self._event(kind, table)
                if event is not None:
                    events.append(event)
                    apply_event(self.book, event)
        return events

    def _event(self, kind: str, table: str) -> Event | None:
        if kind == "add":
            return Insert(table, tuple(self._new_order_rows()))
        live_ids = sorted({row[1] for row in self.book[table]})
        if not live_ids:
            return None
        order_id = self.rng.choice(live_ids)
        if kind == "cancel":
            return Cancel(table, order_id)
        column = self.rng.choice(["volume", "price"])
        return Amend(table, order_id, column, self._value(column))

    def _new_order_rows(self) -> list[tuple]:
        """One order's rows: usually one, sometimes the same row twice (a duplicate in the feed)."""
        if self.rng.random() < 0.7:  # orders often share a timestamp: x.t > y.t must see ties
            self.clock += 1
        row = (self.clock, self.next_id, self._value("broker_id"), self._value("volume"), self._value("price"))
        self.next_id += 1
        return [row, row] if self.rng.random() < 0.15 else [row]

    def _value(self, column: str):
        if self.rng.random() < NULL_RATE:
            return None
        choices = {"broker_id": BROKERS, "volume": VOLUMES, "price": PRICES}[column]
        return self.rng.choice(choices)


def apply_event(book: dict[str, dict[tuple, int]], event: Event) -> None:
    """Change the bag of rows per table as the event's SQL statement changes the table."""
    rows = book[event.table]
    if isinstance(event, Insert):
        for row in event.rows:
            _add(rows, row, 1)
        return
    matching = {row: n for row, n in rows.items() if row[1] == event.order_id}
    for row, n in matching.items():
        _add(rows, row, -n)
        if isinstance(event, Amend):
            i = SCHEMAS[event.table].index(event.column)
            _add(rows, row[:i] + (event.value,) + row[i + 1:], n)


def net_change(book: dict[str, dict[tuple, int]], events: list[Event]) -> dict[str, dict[tuple, int]]:
    """Per table, the rows the events add (+n) and remove (−n), starting from `book` (left unchanged)."""
    after = {table: dict(rows) for table, rows in book.items()}
    for event in events:
        apply_event(after, event)
    change = {}
    for table in book:
        rows = {row: after[table].get(row, 0) - book[table].get(row, 0)
                for row in set(book[table]) | set(after[table])}
        change[table] = {row: n for row, n in rows.items() if n}
    return change


def _add(rows: dict[tuple, int], row: tuple, n: int) -> None:
    total = rows.get(row, 0) + n
    if total:
        rows[row] = total
    else:
        rows.pop(row, None)


# -- Spark -----------------------------------------------------------------------------------------------
def load_orderbook(spark, rows: dict[str, list[tuple]], database: str = "orderbook") -> dict[str, int]:
    """Create `database.bids` and `database.asks` (replacing them) and insert the given rows.
    Returns the row count of each table."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
    counts = {}
    for table in TABLES:
        spark.sql(f"DROP TABLE IF EXISTS {_qualified(table, database)}")
        spark.sql(ddl(table, database))
        if rows.get(table):
            spark.sql(_insert_sql(Insert(table, tuple(rows[table])), database))
        counts[table] = len(rows.get(table, ()))
    return counts


def event_sql(event: Event, database: str | None = None) -> str:
    """The event as one Spark SQL statement on its table."""
    table = _qualified(event.table, database)
    if isinstance(event, Insert):
        return _insert_sql(event, database)
    if isinstance(event, Cancel):
        return f"DELETE FROM {table} WHERE id = {event.order_id}"
    return f"UPDATE {table} SET {event.column} = {_literal(event.value)} WHERE id = {event.order_id}"


def run_events(spark, events: list[Event], database: str | None = None) -> None:
    for event in events:
        spark.sql(event_sql(event, database))


def _insert_sql(event: Insert, database: str | None) -> str:
    values = ", ".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in event.rows)
    return f"INSERT INTO {_qualified(event.table, database)} VALUES {values}"


def _literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, Decimal):
        return f"CAST({value} AS DECIMAL(10,2))"
    return str(value)


def _qualified(table: str, database: str | None) -> str:
    return f"{database}.{table}" if database else table
