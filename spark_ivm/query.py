"""A view's query as the front end hands it to the compiler: calculus aggregates plus how to read them.

Every aggregate of the view is one calculus expression `AggSum(keys, …)` over the same group keys.
The first aggregate is always the row count of each group (`COUNT(*)`), which tells a live group from
a dead one (a group whose SUM is 0 still exists while its count is not 0). The view's rows are then
computed, when the view is read, by the SQL expressions of `columns` over the keys and aggregates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spark_ivm.calculus import Expr
from spark_ivm.printer import to_text

ROW_COUNT = "count"


@dataclass(frozen=True)
class Aggregate:
    """One maintained aggregate: `name` (a SQL identifier) and its definition `AggSum(keys, …)`."""

    name: str
    definition: Expr


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
    bag: bool = False  # no aggregates: each row appears `count` times
    relations: tuple[str, ...] = field(default=())  # base relations read, in order of first use

    def explain(self) -> str:
        lines = [f"keys: [{', '.join(self.keys)}]"]
        lines += [f"{a.name} := {to_text(a.definition)}" for a in self.aggregates]
        lines += [f"column {c.name} = {c.sql}" for c in self.columns]
        if self.having:
            lines.append(f"having {self.having}")
        if self.order_by:
            lines.append(f"order by {', '.join(self.order_by)}")
        if self.limit is not None:
            lines.append(f"limit {self.limit}")
        return "\n".join(lines)
