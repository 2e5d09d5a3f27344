"""Conditions on a store's columns (runtime/key_conditions.py): their SQL, whether a file's statistics allow
a row that holds them, and their pyarrow filter, which keeps the rows SQL's WHERE keeps (pure Python: the
reference here is SQL's three-valued logic written out row by row)."""

from __future__ import annotations

import datetime
import random
from decimal import Decimal

import pyarrow as pa

from spark_ivm.heuristics import SQL_KEY_VALUES_MAX
from spark_ivm.runtime.key_conditions import (
    AllOf, AnyOf, HoldsValue, KeyIn, KeyRange, MapIs, OtherMaps, all_of, any_of, key_values, map_conditions,
)

TYPES = {"map_id": pa.int32(), "k_a": pa.int64(), "k_d": pa.date32(), "k_s": pa.string(), "k_m": pa.decimal128(10, 2),
         "v_bigint__2": pa.int64()}


def test_conditions_print_as_sql_keeping_null_keys_which_join_null_safely():
    assert str(KeyRange("k_b", 1, 7)) == "(k_b IS NULL OR k_b BETWEEN 1 AND 7)"
    assert str(KeyRange("k_b", None, None)) == "k_b IS NULL"  # a batch with only NULLs in the column
    assert str(KeyIn("k_b", (1, 7))) == "(k_b IS NULL OR k_b IN (1, 7))"
    assert str(KeyIn("k_b", ())) == "k_b IS NULL"
    assert str(KeyRange("k_d", datetime.date(1995, 3, 1), datetime.date(1995, 3, 9))) == \
        "(k_d IS NULL OR k_d BETWEEN DATE '1995-03-01' AND DATE '1995-03-09')"
    assert str(MapIs((3,))) == "map_id = 3" and str(MapIs((3, 4))) == "map_id IN (3, 4)"
    assert str(HoldsValue("v_bigint__2")) == "v_bigint__2 IS NOT NULL"
    both = all_of(MapIs((3,)), KeyIn("k_b", ("it's",)))
    assert f"WHERE {both}" == "WHERE (map_id = 3) AND ((k_b IS NULL OR k_b IN ('it\\'s')))"
    assert key_values("k_b", [5, None, 2, 5]) == KeyIn("k_b", (2, 5))


def test_a_long_list_of_keys_is_written_into_sql_as_its_range_and_tested_value_by_value_elsewhere():
    many = KeyIn("k_a", tuple(range(0, 2 * (SQL_KEY_VALUES_MAX + 1), 2)))
    assert str(many) == f"(k_a IS NULL OR k_a BETWEEN 0 AND {2 * SQL_KEY_VALUES_MAX})"
    assert str(KeyIn("k_a", tuple(range(SQL_KEY_VALUES_MAX)))).startswith("(k_a IS NULL OR k_a IN (0, 1, ")
    # The Delta log's file skipping and the driver's read still test each value: a file of odd keys only
    # is skipped, and only the even keys are kept.
    assert not many.could_hold(_stats(3, 3)) and many.could_hold(_stats(3, 4))
    rows = pa.table({"k_a": pa.array([1, 2, 3, None], pa.int64())})
    assert rows.filter(many.arrow(TYPES)).column("k_a").to_pylist() == [2, None]


def test_all_of_and_any_of_flatten_and_drop_repeats():
    a, b, c = MapIs((1,)), KeyIn("k_a", (1,)), KeyRange("k_a", 0, 9)
    assert all_of(a, None) == a and all_of(None) is None
    assert all_of(all_of(a, b), c, b) == AllOf((a, b, c))
    assert any_of(a, any_of(a, b)) == AnyOf((a, b)) and any_of(c) == c


def test_map_conditions_read_a_map_whole_where_one_reference_fixes_no_key():
    a, b = KeyIn("k_a", (1,)), KeyRange("k_d", None, None)
    found = map_conditions([("m", [a]), ("m", [a, b]), ("n", [a]), ("n", [])])
    assert found == {"m": AnyOf((a, AllOf((a, b)))), "n": None}


def _stats(low, high, nulls=0, column="k_a"):
    return {"numRecords": 10, "minValues": {column: low}, "maxValues": {column: high}, "nullCount": {column: nulls}}


def test_a_file_is_skipped_only_where_its_statistics_rule_out_every_row():
    assert not KeyIn("k_a", (5, 50)).could_hold(_stats(10, 40))
    assert KeyIn("k_a", (5, 25, 50)).could_hold(_stats(10, 40))
    assert KeyIn("k_a", (5, 50)).could_hold(_stats(10, 40, nulls=1))  # a NULL key joins any batch
    assert not KeyRange("k_a", 41, 60).could_hold(_stats(10, 40))
    assert KeyRange("k_a", 40, 60).could_hold(_stats(10, 40))
    assert not KeyRange("k_a", None, None).could_hold(_stats(10, 40))
    assert KeyRange("k_a", 1, 2).could_hold({"numRecords": 10})  # says nothing
    assert KeyRange("k_a", 1, 2).could_hold(None)
    dates = _stats("1995-01-01", "1995-12-31", column="k_d")
    assert not KeyIn("k_d", (datetime.date(1996, 1, 1),)).could_hold(dates)
    assert KeyIn("k_d", (datetime.date(1995, 6, 1),)).could_hold(dates)
    money = _stats(Decimal("1.50"), Decimal("9.99"), column="k_m")
    assert not KeyRange("k_m", Decimal("10.00"), Decimal("20")).could_hold(money)
    # Strings are cut to a prefix in the statistics: never skipped by.
    assert KeyIn("k_s", ("zz",)).could_hold(_stats("a", "b", column="k_s"))
    maps = {"numRecords": 3, "minValues": {"map_id": 2}, "maxValues": {"map_id": 4}, "nullCount": {"map_id": 0}}
    assert MapIs((1, 3)).could_hold(maps) and not MapIs((1, 5)).could_hold(maps)
    assert not all_of(MapIs((3,)), KeyIn("k_a", (99,))).could_hold({**maps, **_merged(maps, _stats(1, 9))})
    assert any_of(MapIs((9,)), MapIs((3,))).could_hold(maps)
    # A file all of whose rows are NULL in a map's value column holds no row of that map.
    values = {"numRecords": 3, "nullCount": {"v_bigint__2": 3}}
    assert not HoldsValue("v_bigint__2").could_hold(values)
    assert HoldsValue("v_bigint__2").could_hold({"numRecords": 3, "nullCount": {"v_bigint__2": 2}})
    assert HoldsValue("v_bigint__2").could_hold({"numRecords": 3}) and HoldsValue("v_bigint__2").could_hold(None)


def _merged(a, b):
    return {k: {**a[k], **b[k]} if isinstance(a[k], dict) else a[k] for k in a}


def _sql_holds(condition, row) -> bool | None:
    """SQL's value of the condition on a row (None: unknown), written out from its definition."""
    def compare(value, test):
        return None if value is None else test(value)

    if isinstance(condition, MapIs):
        return row["map_id"] in condition.map_ids
    if isinstance(condition, HoldsValue):
        return row[condition.column] is not None
    if isinstance(condition, KeyRange):
        value = row[condition.column]
        if condition.low is None:
            return value is None
        return value is None or compare(value, lambda v: condition.low <= v <= condition.high)
    if isinstance(condition, KeyIn):
        value = row[condition.column]
        return value is None or value in condition.values
    parts = [_sql_holds(t, row) for t in condition.terms]
    if isinstance(condition, AllOf):
        return False if False in parts else None if None in parts else True
    return True if True in parts else None if None in parts else False


def _random_row(rng):
    def maybe(value):
        return None if rng.random() < 0.2 else value
    return {"map_id": rng.randint(1, 3), "k_a": maybe(rng.randint(0, 20)),
            "k_d": maybe(datetime.date(1995, 1, 1) + datetime.timedelta(days=rng.randint(0, 9))),
            "k_s": maybe(rng.choice(["a", "b", "it's", ""])), "k_m": maybe(Decimal(rng.randint(0, 400)) / 100),
            "v_bigint__2": maybe(rng.randint(-3, 3))}


def _random_condition(rng, depth=0):
    pick = rng.randint(0, 5 if depth < 2 else 3)
    if pick == 0:
        return MapIs(tuple(sorted(rng.sample([1, 2, 3], rng.randint(1, 2)))))
    if pick == 1:
        low = rng.randint(0, 20)
        return KeyRange("k_a", low, low + rng.randint(0, 5)) if rng.random() < 0.8 else KeyRange("k_a", None, None)
    if pick == 2:
        return key_values(rng.choice(["k_a", "k_s"]), rng.sample(range(20), 3) if rng.random() < 0.5
                          else rng.sample(["a", "it's", "zz"], 2)) if rng.random() < 0.5 else \
            key_values("k_d", [datetime.date(1995, 1, 1) + datetime.timedelta(days=d) for d in rng.sample(range(10), 3)])
    if pick == 3:
        return KeyRange("k_m", Decimal("0.5"), Decimal("2.25")) if rng.random() < 0.7 else HoldsValue("v_bigint__2")
    terms = [_random_condition(rng, depth + 1) for _ in range(rng.randint(2, 3))]
    return all_of(*terms) if pick == 4 else any_of(*terms)


def test_rows_of_other_maps_are_ruled_out_only_where_a_file_holds_no_id_but_these():
    others = OtherMaps((-2, -1, 0, 1, 3))
    assert str(others) == "map_id NOT IN (-2, -1, 0, 1, 3)"
    assert not others.could_hold(_stats(-1, 1, column="map_id"))
    assert others.could_hold(_stats(1, 3, column="map_id"))  # 2 may be there
    assert others.could_hold(_stats(0, 4, column="map_id"))
    assert others.could_hold(_stats(-2**31, 3, column="map_id"))  # a range wider than the ids
    assert others.could_hold({"numRecords": 10}) and others.could_hold(None)
    table = pa.Table.from_pylist([{"map_id": i} for i in (-2, 0, 2, 3, 4)], schema=pa.schema([("map_id", pa.int32())]))
    assert table.filter(others.arrow(TYPES)).column("map_id").to_pylist() == [2, 4]


def test_the_arrow_filter_keeps_the_rows_sql_keeps():
    rng = random.Random(7)
    for _ in range(200):
        rows = [_random_row(rng) for _ in range(40)]
        table = pa.Table.from_pylist(rows, schema=pa.schema(list(TYPES.items())))
        condition = _random_condition(rng)
        if isinstance(condition, KeyIn) and condition.column == "k_a" and isinstance(condition.values[0], str):
            continue  # a string list for an integer column: not a condition a refresh makes
        expression = condition.arrow(TYPES)
        if expression is None:  # e.g. strings against an integer column: left to Spark
            continue
        kept = table.filter(expression).to_pylist()
        assert kept == [r for r in rows if _sql_holds(condition, r)], condition


def test_a_value_that_does_not_fit_its_column_leaves_the_rows_to_spark():
    assert KeyIn("k_m", (Decimal("1.005"),)).arrow(TYPES) is None  # more digits than the column's scale
    assert KeyIn("k_a", ("x",)).arrow(TYPES) is None
    assert KeyRange("k_a", 1, 2**70).arrow(TYPES) is None
    assert KeyIn("k_other", (1,)).arrow(TYPES) is None  # a column the reader does not know
