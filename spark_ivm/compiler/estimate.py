"""Estimates of a map's rows from its relations' statistics, for the materialization policy
(heuristics.materializes): a map extracted from a delta is kept only where it is no larger than what it
saves reading.

The estimate is the textbook one of query optimizers (System R's): the product of the relations' rows,
divided, for each variable that joins k relations, by the k - 1 largest of their distinct counts of it;
a comparison with a constant keeps 1/distinct rows for `=` and a third for others; a comparison of two
variables keeps a third. The map's rows are that join's rows or the product of its keys' distinct
counts, whichever is fewer.

>>> from spark_ivm.calculus.parser import parse
>>> stats = Statistics.of({"O": 1500, "L": 6000}, {"O": {"ok": 1500, "ck": 100}, "L": {"ok": 1500}},
...                       {"O": ["ok", "ck"], "L": ["ok", "pk"]})
>>> estimated_rows(parse("AggSum([c], O(o, c) * L(o, p))"), stats)
100
>>> estimated_rows(parse("AggSum([c, p], O(o, c) * L(o, p))"), stats)
6000
>>> source_rows(parse("AggSum([c, p], O(o, c) * L(o, p))"), stats)
7500
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from spark_ivm.calculus.analysis import factors_of
from spark_ivm.calculus.expressions import AggSum, Cmp, Const, Expr, Rel, Sum, Var

__all__ = ["RelationStats", "Statistics", "estimated_rows", "source_rows"]

# A comparison other than `=` with a constant, or of two variables, keeps this share of the rows.
_RANGE_SELECTIVITY = 1 / 3


@dataclass(frozen=True)
class RelationStats:
    """A relation's rows and the distinct values of some of its columns, by position (a column not
    given counts as distinct in every row)."""

    rows: int
    distinct: Mapping[int, int] = field(default_factory=dict)

    def distinct_at(self, position: int) -> int:
        return max(1, min(self.rows, self.distinct.get(position, self.rows)))


@dataclass(frozen=True)
class Statistics:
    """Statistics of the relations a plan reads, by relation name."""

    relations: Mapping[str, RelationStats]

    @classmethod
    def of(cls, rows: Mapping[str, int], distinct: Mapping[str, Mapping[str, int]],
           schemas: Mapping[str, Sequence[str]]) -> Statistics:
        """From rows per relation and distinct counts per relation and column name."""
        relations = {}
        for name, count in rows.items():
            columns = list(schemas.get(name, ()))
            by_position = {columns.index(c): n for c, n in distinct.get(name, {}).items() if c in columns}
            relations[name] = RelationStats(int(count), by_position)
        return cls(relations)


def estimated_rows(definition: Expr, stats: Statistics) -> int | None:
    """The estimated rows of a map with this definition (an AggSum over base relations); None when a
    relation it reads has no statistics."""
    if isinstance(definition, AggSum):
        keys, body = definition.group, definition.expr
    else:
        keys, body = (), definition
    if isinstance(body, Sum):
        parts = [estimated_rows(AggSum(keys, term), stats) for term in body.terms]
        return None if any(p is None for p in parts) else sum(parts)
    factors = factors_of(body)
    atoms = [f for f in factors if isinstance(f, Rel)]
    if any(a.name not in stats.relations for a in atoms):
        return None
    distinct: dict[str, list[int]] = {}
    for atom in atoms:
        for position, var in enumerate(atom.vars):
            distinct.setdefault(var, []).append(stats.relations[atom.name].distinct_at(position))
    log_rows = sum(math.log(stats.relations[a.name].rows or 1) for a in atoms)
    for counts in distinct.values():
        log_rows -= sum(math.log(n) for n in sorted(counts, reverse=True)[:-1])
    for f in factors:
        if isinstance(f, Cmp):
            log_rows += math.log(_selectivity(f, distinct))
    log_groups = 0.0
    for key in keys:
        if key not in distinct:
            log_groups = math.inf  # a key bound by something other than a relation: no bound from it
            break
        log_groups += math.log(min(distinct[key]))
    return max(1, round(math.exp(min(log_rows, log_groups))))


def source_rows(definition: Expr, stats: Statistics) -> int | None:
    """The rows of the relations the definition reads, together (None: one has no statistics)."""
    atoms = [x for x in definition.walk() if isinstance(x, Rel)]
    if any(a.name not in stats.relations for a in atoms):
        return None
    return sum(stats.relations[name].rows for name in dict.fromkeys(a.name for a in atoms))


def _selectivity(cmp: Cmp, distinct: Mapping[str, list[int]]) -> float:
    sides = (cmp.left, cmp.right)
    var = next((s.name for s in sides if isinstance(s, Var) and s.name in distinct), None)
    if cmp.op == "=" and var is not None and any(isinstance(s, Const) for s in sides):
        return 1 / min(distinct[var])
    return _RANGE_SELECTIVITY
