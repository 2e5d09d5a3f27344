"""The SQL front end: a Spark SQL query → `ViewQuery` (calculus aggregates and how to read them).

    translate("SELECT SUM(a) FROM R, S WHERE R.b = S.b", {"R": ["a", "b"], "S": ["b", "c"]})

The FROM clause, derived tables and CTEs included, becomes one product: the relation atoms first, in
FROM order, then the condition factors (those of derived tables and the lifts of their computed
columns, ON, WHERE, then the lifts of computed group keys), so that every variable is bound before it
is used. A condition is a 0/1 factor: AND is a product, OR is inclusion–exclusion `A + B − A*B` (of up
to four conditions; a longer OR of conditions on the row's values is one test, see values.disjunction_of), NOT
is pushed down to the comparisons. The row count, sums and non-NULL counts are `AggSum`s of that body
over the group keys; the view's columns, HAVING and ORDER BY are Spark SQL over keys and aggregates.

Chains (a + b - c …, a || b …, AND, OR, UNION ALL …) are read in loops, and a chain of more than
heuristics.LONGEST_NESTED_CHAIN terms becomes a balanced tree, so that a thousand terms cost no deep
recursion here or in the compiler; nesting that exhausts Python's recursion (parentheses, function calls,
CASE, subqueries, a few dozen levels deep) is an UnsupportedQueryError (source.nested_too_deeply).

MIN, MAX and COUNT/SUM/AVG(DISTINCT e) are not functions of sums: each keeps the multiset of its value
per group, `AggSum(keys + (x,), body)` with x the value's column variable, or a fresh `x1`, `x2`… bound
by a lift `(x ^= e)` appended to the body, and the runtime reduces the values of positive multiplicity
when the view is read (`min_N`, `max_N`, `cntd_N`, `sumd_N`, `avgd_N`). SELECT DISTINCT without
aggregates is a bag query read once per live row (`distinct`); over groups it changes nothing when every
group key is shown and is refused otherwise.

A set operation as the view query (UNION [ALL], EXCEPT/MINUS [ALL], INTERSECT [ALL], chains and mixes)
keys the view by fresh variables `u1`, `u2`… that each operand lifts to its select list, so rows compare
NULL-safely. Operands that are summed (UNION ALL) share one count; otherwise each operand has a count of
its own (`count`, `count_r`, `count_r2`… from left to right) and the view's `multiplicity` combines them,
e.g. GREATEST(`count` - `count_r`, 0) for EXCEPT ALL. UNION ALL is also a FROM item: the Sum of its
operands' bodies, each lifting the item's column variables.

A variable stands for a column of a FROM item: the bare lowercase column name when no other FROM item
of the whole query has a column of that name, else `{alias}_{column}`; computed keys are `g1`, `g2`…
Whether a name is unique is only known once the whole query is read, so translation works with
placeholder names that are settled at the end.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from sqlglot import exp

from spark_ivm.frontend.constructs import reject_unsupported_constructs
from spark_ivm.frontend.scope import Catalog, Translation
from spark_ivm.frontend.set_operations import SetOperationTranslator
from spark_ivm.frontend.source import SqlSource, nested_too_deeply
from spark_ivm.frontend.view import ViewTranslator
from spark_ivm.frontend.view_query import ViewQuery

__all__ = ["translate"]


def translate(sql: str, schemas: Mapping[str, Sequence[object]]) -> ViewQuery:
    """The view query of a Spark SQL SELECT over tables with the given columns, in order (names, or as
    `compile_view` takes them: with their types and whether they are nullable)."""
    try:
        return _translate(sql, schemas)
    except RecursionError:
        raise nested_too_deeply() from None


def _translate(sql: str, schemas: Mapping[str, Sequence[object]]) -> ViewQuery:
    source = SqlSource(sql)
    statement = source.statement
    while isinstance(statement, exp.Subquery) and isinstance(statement.this, exp.Query):
        statement = statement.this
    if not isinstance(statement, (exp.Select, exp.SetOperation)):
        raise source.unsupported(f"{statement.key.upper()} statement", statement, statement.key.upper())
    reject_unsupported_constructs(source)
    translation = Translation(source, Catalog(schemas))
    if isinstance(statement, exp.SetOperation):
        return SetOperationTranslator(translation, statement).view()
    return ViewTranslator(translation, statement).view()
