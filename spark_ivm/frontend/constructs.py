"""Constructs refused wherever they appear (non-deterministic functions, window functions, LATERAL,
PIVOT, subqueries nested too deeply …), and aggregates and Python functions where they cannot stand."""

from __future__ import annotations

from sqlglot import exp

from spark_ivm import heuristics
from spark_ivm.errors import NonDeterministicError, UnsupportedQueryError
from spark_ivm.frontend.source import SqlSource, own_text_span
from spark_ivm.udfs.registry import UDFS


_NONDETERMINISTIC_CLASSES = tuple(getattr(exp, name) for name in (
    "Rand", "Randn", "Randstr", "Uniform", "Uuid", "Shuffle", "CurrentDate", "CurrentTimestamp",
    "CurrentTime", "CurrentDatetime", "Localtimestamp", "Localtime", "CurrentTimezone", "CurrentUser",
    "SessionUser", "CurrentSchema", "CurrentCatalog", "CurrentDatabase",
) if hasattr(exp, name))

_NONDETERMINISTIC_NAMES = frozenset({
    "rand", "random", "randn", "randstr", "uniform", "uuid", "shuffle", "now", "curdate", "current_date",
    "current_timestamp", "current_timezone", "localtimestamp", "unix_timestamp", "current_user", "user",
    "session_user", "current_database", "current_schema", "current_catalog", "monotonically_increasing_id",
    "spark_partition_id", "input_file_name", "input_file_block_start", "input_file_block_length",
    "reflect", "java_method", "try_reflect",
})

_MAINTAINED_AGGREGATES = (exp.Sum, exp.Count, exp.Avg, exp.Min, exp.Max)

_SET_OPERATIONS = {exp.Union: "UNION", exp.Except: "EXCEPT", exp.Intersect: "INTERSECT"}

_CLAUSES = {
    exp.Qualify: "QUALIFY", exp.Sort: "SORT BY", exp.Distribute: "DISTRIBUTE BY", exp.Cluster: "CLUSTER BY",
    exp.TableSample: "TABLESAMPLE", exp.Values: "VALUES", exp.GroupingSets: "GROUPING SETS",
    exp.Rollup: "ROLLUP", exp.Cube: "CUBE",
}


def reject_unsupported_constructs(source: SqlSource) -> None:
    """Raise for the construct that comes first in the text among those no context makes maintainable."""
    problems = [p for node in source.statement.walk() if (p := _construct_problem(source, node))]
    if problems:
        raise min(problems, key=lambda e: (e.line is None, e.line or 0, e.column or 0))


def _construct_problem(source: SqlSource, node: exp.Expression) -> UnsupportedQueryError | None:
    if isinstance(node, exp.Func) and _is_nondeterministic(source, node):
        return _nondeterministic_error(source, node)
    if isinstance(node, exp.Window):
        function = node.this
        name = source.function_name(function).upper() if isinstance(function, exp.Func) else "?"
        return source.unsupported(f"window function {name}", node)
    if isinstance(node, exp.AggFunc) and not isinstance(node, _MAINTAINED_AGGREGATES):
        return source.unsupported(f"aggregate function {source.function_name(node).upper()}", node)
    if isinstance(node, exp.Distinct):
        return _distinct_problem(source, node)
    if isinstance(node, exp.Join):
        return _join_problem(source, node)
    if isinstance(node, exp.SetOperation):
        return _set_operation_problem(source, node)
    if isinstance(node, exp.Subquery):
        return _subquery_problem(source, node)
    if isinstance(node, exp.Exists) and _subquery_level(node) > heuristics.MAX_SUBQUERY_LEVELS:
        return _nesting_problem(source, node, "EXISTS")
    if isinstance(node, exp.Lateral):
        return source.unsupported("LATERAL VIEW" if node.args.get("view") else "LATERAL", node, "LATERAL")
    if isinstance(node, exp.Pivot):
        construct = "UNPIVOT" if node.args.get("unpivot") else "PIVOT"
        return source.unsupported(construct, node, construct)
    if isinstance(node, exp.With) and node.args.get("recursive"):
        return source.unsupported("recursive CTE", node, "RECURSIVE")
    if isinstance(node, exp.Filter):
        return source.unsupported("aggregate FILTER", node, "FILTER", where="inside")
    if isinstance(node, exp.All):
        return source.unsupported("ALL subquery", node, "ALL")
    construct = _CLAUSES.get(type(node))
    if construct:
        return source.unsupported(construct, node, construct)
    return None


def _is_nondeterministic(source: SqlSource, node: exp.Func) -> bool:
    return isinstance(node, _NONDETERMINISTIC_CLASSES) or source.function_name(node) in _NONDETERMINISTIC_NAMES


def _nondeterministic_error(source: SqlSource, node: exp.Func) -> NonDeterministicError:
    # A call sqlglot made up (unix_timestamp() becomes unix_timestamp(current_timestamp())) has no
    # position: name the enclosing call the user wrote.
    written = node
    while own_text_span(written) is None and isinstance(written.parent, exp.Func):
        written = written.parent
    name = source.function_name(written)
    return NonDeterministicError(f"non-deterministic function {name}",
                                 *source.position(written, name.upper()))


def _distinct_problem(source: SqlSource, distinct: exp.Distinct) -> UnsupportedQueryError | None:
    """SELECT DISTINCT and DISTINCT in MIN, MAX, COUNT, SUM and AVG of one value are read elsewhere."""
    parent = distinct.parent
    if distinct.args.get("on") is not None:
        return source.unsupported("DISTINCT ON", parent, "DISTINCT")
    if isinstance(parent, exp.Select):
        return None
    if isinstance(parent, exp.Func):
        name = source.function_name(parent).upper()
        if not isinstance(parent, _MAINTAINED_AGGREGATES):
            return source.unsupported(f"{name}(DISTINCT)", parent)
        if len(distinct.expressions) != 1:
            return source.unsupported(f"{name}(DISTINCT) of several expressions", parent)
        return None
    return source.unsupported("DISTINCT", distinct, "DISTINCT")


def set_operation_name(node: exp.SetOperation) -> str:
    """UNION, UNION ALL, EXCEPT, EXCEPT ALL, INTERSECT or INTERSECT ALL."""
    name = _SET_OPERATIONS.get(type(node), node.key.upper())
    return f"{name} ALL" if node.args.get("distinct") is False else name


def _set_operation_problem(source: SqlSource, node: exp.SetOperation) -> UnsupportedQueryError | None:
    """A set operation is the view query itself or a FROM item (a derived table or a CTE); whether its
    kind is maintainable there is known when it is translated."""
    keyword = _SET_OPERATIONS.get(type(node), node.key.upper())
    if node.args.get("by_name"):
        return source.unsupported(f"{set_operation_name(node)} BY NAME", node, keyword, where="inside")
    context = node.parent
    while isinstance(context, (exp.Subquery, exp.SetOperation)):
        if isinstance(context, exp.Subquery) and isinstance(context.parent, (exp.From, exp.Join)):
            return None
        context = context.parent
    if context is None or isinstance(context, exp.CTE):
        return None
    return source.unsupported(set_operation_name(node), node, keyword, where="inside")


def _join_problem(source: SqlSource, join: exp.Join) -> UnsupportedQueryError | None:
    side, kind, method = (str(join.args.get(k) or "").upper() for k in ("side", "kind", "method"))
    if method == "NATURAL":
        return source.unsupported("NATURAL JOIN", join, "NATURAL")
    if kind in ("SEMI", "ANTI"):
        return source.unsupported(f"{side} {kind} JOIN".strip(), join, side or kind)
    if join.args.get("using"):
        return source.unsupported("JOIN … USING", join, "USING", where="inside")
    return None


def _subquery_problem(source: SqlSource, subquery: exp.Subquery) -> UnsupportedQueryError | None:
    """A subquery is a FROM item, a scalar subquery, or the set of an IN or EXISTS test; whether it is
    maintainable where it stands is known when it is translated. ANY and ALL are refused."""
    parent = subquery.parent
    if isinstance(parent, (exp.Any, exp.All)):
        return source.unsupported(f"{parent.key.upper()} subquery", subquery, "SELECT")
    if _in_expression(subquery) and _subquery_level(subquery) > heuristics.MAX_SUBQUERY_LEVELS:
        return _nesting_problem(source, subquery, "SELECT")
    return None


def _in_expression(node: exp.Expression) -> bool:
    """Whether a subquery or EXISTS stands in an expression (a scalar, IN or EXISTS test), not in FROM."""
    return isinstance(node, exp.Exists) or (
        isinstance(node, exp.Subquery) and not isinstance(node.parent, (exp.From, exp.Join)))


def _subquery_level(node: exp.Expression) -> int:
    """How many subqueries in expressions hold the node, itself included."""
    level = 0
    while node is not None:
        level += _in_expression(node)
        node = node.parent
    return level


def _nesting_problem(source: SqlSource, node: exp.Expression, keyword: str) -> UnsupportedQueryError:
    return source.unsupported(
        f"subqueries in expressions nested more than {heuristics.MAX_SUBQUERY_LEVELS} levels deep", node, keyword,
        where="inside" if keyword == "SELECT" else "before",
        detail="the changes of each level are derived from those of all the levels inside it; write an inner "
               "level as a join with a derived table (a subquery in FROM), which may nest deeper")


def first_aggregate(node: exp.Expression) -> exp.AggFunc | None:
    """The first aggregate call of the expression's own query (those of its subqueries are theirs)."""
    nested_query = lambda n: n is not node and isinstance(n, (exp.Query, exp.Subquery, exp.Exists))  # noqa: E731
    return next((n for n in node.walk(prune=nested_query) if isinstance(n, exp.AggFunc)), None)


def reject_aggregates(source: SqlSource, node: exp.Expression, construct: str) -> None:
    aggregate = first_aggregate(node)
    if aggregate is not None:
        raise source.unsupported(construct, aggregate)


def reject_python_calls_when_read(source: SqlSource, tree: exp.Expression | None) -> None:
    """A Python function left in SQL that runs when the view is read: over aggregates, or in ORDER BY."""
    for node in tree.find_all(exp.Func) if tree is not None else ():
        name = source.function_name(node)
        if name in UDFS:
            raise source.unsupported(
                f"Python function {name} applied to aggregates or in ORDER BY", node,
                detail="the view is a Spark view, which cannot call a function of one session; use it inside "
                       "the aggregates, in WHERE or GROUP BY, or on the view's columns when reading it")
