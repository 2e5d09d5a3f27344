"""Conditions on a store's columns that bound the map rows a refresh reads (see view_work.map_bounds).

A condition is built from a map's id, the value column of a map that shares its rows with others, the
range of a batch's values in a key column and the list of them, joined by AND and OR. It holds Python
values, not SQL text, so that one condition serves three readers:
- Spark: it prints as the SQL of a WHERE clause (str());
- the Delta log: `could_hold(stats)` says from a file's statistics whether any row of the file can hold it,
  so that a read skips the file without opening it;
- pyarrow: `arrow(types)` is the same filter as a pyarrow expression, so that the driver reads the rows of a
  small store itself (driver_files.store_rows), without a Spark job.

Keys are joined NULL-safely, so a NULL key can join any batch: every key condition holds for NULL.
"""

from __future__ import annotations

import bisect
import datetime
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from spark_ivm.heuristics import SQL_KEY_VALUES_MAX
from spark_ivm.runtime.sqlgen import literal_sql


class Condition:
    """A condition on a store's columns (see the module's docstring)."""

    def __str__(self) -> str:
        return self.sql()

    def __format__(self, spec: str) -> str:
        return format(self.sql(), spec)

    def sql(self) -> str:
        raise NotImplementedError

    def could_hold(self, stats: dict | None) -> bool:
        """False only where no row of a file with these statistics (a Delta AddFile's `stats`, numbers
        parsed as Decimal or int; None: none) can hold the condition."""
        raise NotImplementedError

    def arrow(self, types: dict[str, pa.DataType]) -> pc.Expression | None:
        """The condition as a pyarrow filter over columns of these Arrow types; None where a value does not
        convert to its column's type exactly (the reader then leaves the rows to Spark)."""
        raise NotImplementedError


@dataclass(frozen=True)
class MapIs(Condition):
    """The rows of these maps."""
    map_ids: tuple[int, ...]

    def sql(self) -> str:
        if len(self.map_ids) == 1:
            return f"map_id = {self.map_ids[0]}"
        return f"map_id IN ({', '.join(map(str, self.map_ids))})"

    def could_hold(self, stats):
        low, high = _stat_range(stats, "map_id")
        return low is None or any(low <= i <= high for i in self.map_ids)

    def arrow(self, types):
        return pc.field("map_id").isin(pa.array(self.map_ids, types["map_id"]))


@dataclass(frozen=True)
class OtherMaps(Condition):
    """The rows of maps other than these (and of the store's bookkeeping, unless its id is among them)."""
    map_ids: tuple[int, ...]

    def sql(self) -> str:
        return f"map_id NOT IN ({', '.join(map(str, self.map_ids))})"

    def could_hold(self, stats):
        low, high = _stat_range(stats, "map_id")
        if low is None:
            return True
        # A file's ids span [low, high]: it can hold another map's rows unless every id there is one of these.
        return high - low + 1 > len(self.map_ids) or any(i not in self.map_ids for i in range(low, high + 1))

    def arrow(self, types):
        return ~pc.field("map_id").isin(pa.array(self.map_ids, types["map_id"]))


@dataclass(frozen=True)
class HoldsValue(Condition):
    """The rows with a value in this column: where maps share rows (mapstore.StoreLayout.shares_rows),
    the rows of the one map whose value the column holds (NULL there: no row of that map)."""
    column: str

    def sql(self) -> str:
        return f"{self.column} IS NOT NULL"

    def could_hold(self, stats):
        nulls, records = (stats or {}).get("nullCount", {}).get(self.column), (stats or {}).get("numRecords")
        return nulls is None or records is None or nulls < records

    def arrow(self, types):
        return pc.field(self.column).is_valid()


@dataclass(frozen=True)
class KeyRange(Condition):
    """A key between low and high, or NULL (low and high None: only NULL)."""
    column: str
    low: object
    high: object

    def sql(self) -> str:
        if self.low is None or self.high is None:
            return f"{self.column} IS NULL"
        return f"({self.column} IS NULL OR {self.column} BETWEEN {literal_sql(self.low)} AND {literal_sql(self.high)})"

    def could_hold(self, stats):
        if _may_have_nulls(stats, self.column):
            return True
        if self.low is None or self.high is None:
            return False
        low, high = _stat_range(stats, self.column, self.low)
        return low is None or (low <= self.high and self.low <= high)

    def arrow(self, types):
        key = pc.field(self.column)
        if self.low is None or self.high is None:
            return key.is_null()
        bounds = _arrow_values([self.low, self.high], types.get(self.column))
        return None if bounds is None else key.is_null() | ((key >= bounds[0]) & (key <= bounds[1]))


@dataclass(frozen=True)
class KeyIn(Condition):
    """A key among the values (sorted, no NULL), or NULL. In SQL, a long list is its range (see
    heuristics.SQL_KEY_VALUES_MAX): the rows it allows are a superset, as every reader of a bound expects."""
    column: str
    values: tuple

    def sql(self) -> str:
        if len(self.values) > SQL_KEY_VALUES_MAX:
            return KeyRange(self.column, self.values[0], self.values[-1]).sql()
        return key_set_sql(self.column, [literal_sql(v) for v in self.values])

    def could_hold(self, stats):
        if _may_have_nulls(stats, self.column):
            return True
        if not self.values:
            return False
        low, high = _stat_range(stats, self.column, self.values[0])
        return low is None or bisect.bisect_left(self.values, low) < bisect.bisect_right(self.values, high)

    def arrow(self, types):
        key = pc.field(self.column)
        if not self.values:
            return key.is_null()
        values = _arrow_values(self.values, types.get(self.column))
        return None if values is None else key.is_null() | key.isin(values)


@dataclass(frozen=True)
class AllOf(Condition):
    terms: tuple[Condition, ...]

    def sql(self) -> str:
        return " AND ".join(f"({t})" for t in self.terms)

    def could_hold(self, stats):
        return all(t.could_hold(stats) for t in self.terms)

    def arrow(self, types):
        return _combined([t.arrow(types) for t in self.terms], lambda a, b: a & b)


@dataclass(frozen=True)
class AnyOf(Condition):
    terms: tuple[Condition, ...]

    def sql(self) -> str:
        return " OR ".join(f"({t})" for t in self.terms)

    def could_hold(self, stats):
        return any(t.could_hold(stats) for t in self.terms)

    def arrow(self, types):
        return _combined([t.arrow(types) for t in self.terms], lambda a, b: a | b)


def all_of(*terms: Condition | None) -> Condition | None:
    """Every one of the conditions (None ones left out); None where none is given."""
    kept = tuple(dict.fromkeys(p for t in terms if t is not None for p in (t.terms if isinstance(t, AllOf) else (t,))))
    return None if not kept else kept[0] if len(kept) == 1 else AllOf(kept)


def any_of(*terms: Condition) -> Condition:
    """Any one of the conditions."""
    kept = tuple(dict.fromkeys(p for t in terms for p in (t.terms if isinstance(t, AnyOf) else (t,))))
    return kept[0] if len(kept) == 1 else AnyOf(kept)


def map_conditions(references) -> dict[str, Condition | None]:
    """Per map, the condition on the store's columns that the rows any of its references can join hold
    for, from (map, [condition of each key the reference fixes]) per reference: the alternatives of the
    references, each all of its conditions. None where a reference fixes no key: the whole map is read."""
    alternatives: dict[str, list[Condition] | None] = {}
    for name, terms in references:
        if not terms:
            alternatives[name] = None
        elif alternatives.get(name, []) is not None:
            alternatives.setdefault(name, []).append(all_of(*terms))
    return {name: None if terms is None else any_of(*terms) for name, terms in alternatives.items()}


def key_set_sql(column: str, literals: list[str]) -> str:
    """SQL of a key among the literals (a set Spark tests by hashing), or NULL."""
    return f"({column} IS NULL OR {column} IN ({', '.join(literals)}))" if literals else f"{column} IS NULL"


def key_values(column: str, values) -> KeyIn:
    """A key among the values (any order, NULLs ignored), or NULL."""
    return KeyIn(column, tuple(sorted(v for v in set(values) if v is not None)))


def _combined(expressions, join):
    if any(e is None for e in expressions):
        return None
    combined = expressions[0]
    for e in expressions[1:]:
        combined = join(combined, e)
    return combined


def _arrow_values(values, arrow_type: pa.DataType | None) -> pa.Array | None:
    if arrow_type is None:
        return None
    try:
        return pa.array(list(values), arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None  # e.g. a decimal with more digits than the column's scale: SQL compares it, Arrow would not


def _may_have_nulls(stats: dict | None, column: str) -> bool:
    nulls = (stats or {}).get("nullCount", {}).get(column)
    return nulls is None or nulls > 0


def _stat_range(stats: dict | None, column: str, like=0) -> tuple:
    """(lowest, highest) of a column in a file's statistics, as values comparable with `like`; (None, None)
    where they do not say or are not exact (strings are cut to a prefix there)."""
    if not stats:
        return None, None
    low, high = stats.get("minValues", {}).get(column), stats.get("maxValues", {}).get(column)
    if low is None or high is None:
        return None, None
    if isinstance(like, bool) or not isinstance(like, (int, Decimal, datetime.date)) or isinstance(like, datetime.datetime):
        return None, None
    if isinstance(like, datetime.date):
        try:
            return datetime.date.fromisoformat(low), datetime.date.fromisoformat(high)
        except (TypeError, ValueError):
            return None, None
    return (low, high) if isinstance(low, (int, Decimal)) and isinstance(high, (int, Decimal)) else (None, None)
