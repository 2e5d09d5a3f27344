"""A view's query as the front end hands it to the compiler: calculus aggregates plus how to read them.

Every aggregate of the view is one calculus expression `AggSum(keys, …)` over the same group keys.
The first aggregate is always the row count of each group (`COUNT(*)`), which tells a live group from
a dead one (a group whose SUM is 0 still exists while its count is not 0). The view's rows are then
computed, when the view is read, by the SQL expressions of `columns` over the keys and aggregates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spark_ivm.calculus.expressions import Expr
from spark_ivm.calculus.printer import to_text

ROW_COUNT = "count"


READ_REDUCERS = ("min", "max", "count_distinct", "sum_distinct", "avg_distinct")


@dataclass(frozen=True)
class Aggregate:
    """One maintained aggregate: `name` (a SQL identifier) and its definition `AggSum(keys, …)`.

    Aggregates that are not functions of sums (MIN, MAX, COUNT(DISTINCT …)) keep a multiset instead:
    the definition is `AggSum(keys + value_keys, …)`, the multiplicity of each value per group, and
    the aggregate is `reduce` (one of READ_REDUCERS) of `value_keys[0]` over the values whose
    multiplicity is positive, computed when the view is read. Deletes never rescan a base table.
    """

    name: str
    definition: Expr
    value_keys: tuple[str, ...] = ()
    reduce: str | None = None

    def __post_init__(self):
        if (self.reduce is None) != (not self.value_keys) or (self.reduce and self.reduce not in READ_REDUCERS):
            raise ValueError(f"aggregate {self.name}: reduce {self.reduce!r} needs exactly one value key")


@dataclass(frozen=True)
class OutputColumn:
    """A column of the view: its name and a Spark SQL expression over key variables and aggregates."""

    name: str
    sql: str


@dataclass(frozen=True)
class ViewQuery:
    sql: str
    keys: tuple[str, ...]  # group variables, shared by every aggregate (key columns of the view's maps)
    aggregates: tuple[Aggregate, ...]  # aggregates[0] is the row count, named ROW_COUNT
    columns: tuple[OutputColumn, ...]
    having: str | None = None  # Spark SQL predicate over keys and aggregates
    order_by: tuple[str, ...] = ()  # Spark SQL sort expressions over output column names
    limit: int | None = None
    bag: bool = False  # no aggregates: each row appears `multiplicity` times
    relations: tuple[str, ...] = field(default=())  # base relations read, in order of first use
    # Spark SQL over aggregates: how many copies of a group's row the view holds (bag queries) and
    # whether the group is live (> 0). Set operations use e.g. GREATEST(`count_l` - `count_r`, 0).
    multiplicity: str = f"`{ROW_COUNT}`"
    distinct: bool = False  # SELECT DISTINCT / UNION / EXCEPT / INTERSECT: one copy of each live row

    def explain(self) -> str:
        lines = [f"keys: [{', '.join(self.keys)}]"]
        for a in self.aggregates:
            read = f"  -- read as {a.reduce}({a.value_keys[0]}) over positive multiplicities" if a.reduce else ""
            lines.append(f"{a.name} := {to_text(a.definition)}{read}")
        if self.multiplicity != f"`{ROW_COUNT}`" or self.distinct:
            lines.append(f"multiplicity {self.multiplicity}{' (distinct)' if self.distinct else ''}")
        lines += [f"column {c.name} = {c.sql}" for c in self.columns]
        if self.having:
            lines.append(f"having {self.having}")
        if self.order_by:
            lines.append(f"order by {', '.join(self.order_by)}")
        if self.limit is not None:
            lines.append(f"limit {self.limit}")
        return "\n".join(lines)
