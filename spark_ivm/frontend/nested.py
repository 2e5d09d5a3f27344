"""Subqueries and outer joins as nested aggregates, for the SQL front end (`spark_ivm.frontend`).

A nested aggregate is a lift `(z ^= AggSum([c…], body))` that binds a fresh variable `z` to a sum over
the subquery's body, grouped by its correlation variables `c…` (the variables of the enclosing query
the body uses, bound before the lift). The enclosing query then uses `z` as a value:

- scalar subquery: COUNT is the sum itself; SUM(e) is `case({n = 0}, NULL, s)` with `s` the sum of e
  and `n` the count of its non-NULL values (SQL's SUM over nothing is NULL); AVG(e) is `s / n`;
- MIN(e)/MAX(e) are not sums, but a comparison with them is a test of counts: `x > MIN(e)` holds when
  some e is below x, `x = MIN(e)` when some e equals x and none is below, and so on;
- EXISTS: `{z > 0}` with z the count of the subquery's rows; NOT EXISTS: `{z = 0}`;
- x IN (SELECT y …): `{z > 0}` with z the count of rows with y = x; x NOT IN (SELECT y …) is true when
  the subquery is empty, or when x is not NULL and no y equals x or is NULL;
- outer join: the rows of one side whose count of matches on the other side is 0, padded with NULLs;
- a grouped derived table: `Exists(AggSum([k…], body))` enumerates its groups, and each aggregate is
  a lift correlated by the group keys.

The delta of such a lift restricts itself to the keys whose nested value changed (`spark_ivm.calculus.delta`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from spark_ivm.calculus.analysis import all_vars, rename
from spark_ivm.calculus.expressions import (
    FLIPPED_CMP, NULL, ONE, ZERO, Expr, Var, aggsum, cmp, exists, fn, lift, prod, sum_,
)
from spark_ivm.frontend.constructs import first_aggregate
from spark_ivm.frontend.scope import FromItem, SourceColumn
from spark_ivm.frontend.values import is_not_null

if TYPE_CHECKING:  # select.py imports this module; a SelectTranslator is only passed in
    from spark_ivm.frontend.select import SelectTranslator

__all__ = ["NestedQueries"]


class NestedQueries:
    """The subqueries of one SELECT (its `owner`), translated once each into lifts that are added to
    the owner's conditions, so that they come after the FROM items that bind their correlation."""

    def __init__(self, owner: "SelectTranslator"):
        self.owner = owner
        self._translated: dict[tuple, Expr] = {}
        self._lifted: dict[tuple, Var] = {}

    @property
    def source(self):
        return self.owner.source

    # -- scalar subqueries -------------------------------------------------------------------------

    def scalar(self, node: exp.Subquery) -> Expr:
        key = ("scalar", node.sql(dialect="spark"))
        if key not in self._translated:
            self._translated[key] = self._scalar(node)
        return self._translated[key]

    def _scalar(self, node: exp.Subquery) -> Expr:
        select = self._select(node, "scalar subquery")
        self._reject_clauses(select, "a scalar subquery", grouping=True)
        expression = self._single_expression(select, node, "scalar subquery")
        if first_aggregate(expression) is None:
            raise self.source.unsupported("scalar subquery without an aggregate", node, "SELECT",
                                          detail="a subquery's single row is an aggregate over its rows")
        inner = self._inner(select)
        aggregates = NestedAggregates(self, inner, ONE, (), self.owner.scope.conditions)
        inner.values.aggregate = aggregates
        value = inner.values.value(expression)
        local = set(all_vars(value)) - aggregates.variables - set(inner.scope.correlated)
        if local:
            raise self.source.unsupported("column outside an aggregate in a scalar subquery", expression)
        return value

    # -- comparisons with MIN and MAX of a subquery ------------------------------------------------

    def extreme_comparison(self, op: str, left: exp.Expression, right: exp.Expression) -> Expr | None:
        """`x op (SELECT MIN(e) …)` (or MAX, either side) as tests of counts; None for other comparisons."""
        if op in ("is", "is not"):
            return None
        for sub, other, oriented in ((right, left, op), (left, right, FLIPPED_CMP[op])):
            while isinstance(sub, exp.Paren):
                sub = sub.this
            if not isinstance(sub, exp.Subquery):
                continue
            select = _unwrapped_select(sub)
            if select is None or len(select.expressions) != 1:
                continue
            call = _unaliased(select.expressions[0])
            if isinstance(call, (exp.Min, exp.Max)):
                key = ("extreme", oriented, other.sql(dialect="spark"), sub.sql(dialect="spark"))
                if key not in self._translated:
                    self._translated[key] = self._extreme(oriented, other, select, call)
                return self._translated[key]
        return None

    def _extreme(self, op: str, other: exp.Expression, select: exp.Select, call: exp.Min | exp.Max) -> Expr:
        self._reject_clauses(select, "a scalar subquery", grouping=True)
        x = self.owner.values.value(other)
        inner = self._inner(select)
        argument = call.this.expressions[0] if isinstance(call.this, exp.Distinct) else call.this
        e = inner.values.value(argument)
        minimum = isinstance(call, exp.Min)
        # Seen from MIN: `below` are the values that would make a smaller minimum than x.
        op = op if minimum else FLIPPED_CMP[op]
        below, at_or_below = ("<", "<=") if minimum else (">", ">=")

        def count(condition: Expr) -> Var:
            return self._count(inner, condition, all_vars(x))

        def test(kind: str) -> Expr:
            if kind == "=":
                return prod(cmp(">", count(cmp("=", e, x)), ZERO), cmp("=", count(cmp(below, e, x)), ZERO))
            if kind == ">":
                return cmp(">", count(cmp(below, e, x)), ZERO)
            if kind == ">=":
                return cmp(">", count(cmp(at_or_below, e, x)), ZERO)
            beaten = cmp(at_or_below if kind == "<" else below, e, x)
            return prod(cmp("is not", x, NULL), cmp(">", count(cmp("is not", e, NULL)), ZERO),
                        cmp("=", count(beaten), ZERO))

        if op == "!=":
            return sum_(test("<"), test(">"))
        return test(op)

    # -- EXISTS and IN -----------------------------------------------------------------------------

    def exists(self, node: exp.Exists, negated: bool) -> Expr:
        key = ("exists", node.sql(dialect="spark"))
        if key not in self._translated:
            select = self._select(node.this, "EXISTS subquery")
            self._reject_clauses(select, "an EXISTS subquery", grouping=False)
            if select.args.get("having") is not None:
                raise self.source.unsupported("HAVING in an EXISTS subquery", select.args["having"], "HAVING")
            self._translated[key] = self._count(self._inner(select), ONE, ())
        return cmp("=" if negated else ">", self._translated[key], ZERO)

    def in_subquery(self, node: exp.In, negated: bool) -> Expr:
        key = ("in", negated, node.sql(dialect="spark"))
        if key not in self._translated:
            self._translated[key] = self._in(node, negated)
        return self._translated[key]

    def _in(self, node: exp.In, negated: bool) -> Expr:
        query = node.args["query"]
        select = self._select(query, "IN subquery")
        self._reject_clauses(select, "an IN subquery", grouping=False)
        y_node = self._single_expression(select, query, "IN subquery")
        x = self.owner.values.value(node.this)
        inner = self._inner(select)
        if _is_grouped(select):
            return self._in_groups(select, inner, y_node, x, negated, node)
        y = inner.values.value(y_node)
        if not negated:
            return cmp(">", self._count(inner, cmp("=", y, x), all_vars(x)), ZERO)
        rows = self._count(inner, ONE, ())
        equal_or_null = self._count(inner, sum_(cmp("=", y, x), cmp("is", y, NULL)), all_vars(x))
        return sum_(cmp("=", rows, ZERO),
                    prod(cmp(">", rows, ZERO), cmp("is not", x, NULL), cmp("=", equal_or_null, ZERO)))

    def _in_groups(self, select, inner, y_node, x: Expr, negated: bool, node: exp.In) -> Expr:
        """x IN (SELECT k FROM … GROUP BY k HAVING …): the group of key x exists and passes HAVING."""
        group = select.args.get("group")
        keys = group.expressions if group is not None else []
        if negated or len(keys) != 1 or keys[0] != y_node or first_aggregate(y_node) is not None:
            raise self.source.unsupported(
                "NOT IN of a grouped subquery" if negated else "IN subquery of something else than its one group key",
                node, "IN", where="inside")
        restriction = cmp("=", inner.values.value(y_node), x)
        tests = [cmp(">", self._count(inner, restriction, all_vars(x)), ZERO)]
        having = select.args.get("having")
        if having is not None:
            inner.values.aggregate = NestedAggregates(self, inner, restriction, all_vars(x),
                                                      self.owner.scope.conditions)
            tests.append(inner.values.condition(having.this))
        return prod(*tests)

    # -- outer joins -------------------------------------------------------------------------------

    def no_match(self, matched: Expr, counted: Expr) -> Expr:
        """`{z = 0}` with z the number of rows of `counted` that `matched` (their join with the ON
        condition) pairs with the current row, counted over a renamed copy of `counted`."""
        names = self.owner.translation.names
        local = all_vars(counted)
        copy = rename(matched, {v: names.copy(v) for v in local})
        correlation = [v for v in all_vars(matched) if v not in local]
        z, binding = self._new_lift(copy, correlation)
        return prod(binding, cmp("=", z, ZERO))

    # -- grouped derived tables --------------------------------------------------------------------

    def grouped_item(self, select: exp.Select, alias: str, column_aliases: list[str], node: exp.Expression,
                     ctes) -> "FromItem":
        """A derived table with GROUP BY or aggregates: its groups enumerated by `Exists(AggSum(keys, …))`
        (one row without GROUP BY), each aggregate a lift correlated by the keys, HAVING a condition."""
        for clause, keyword in (("limit", "LIMIT"), ("offset", "OFFSET")):
            if select.args.get(clause) is not None:
                raise self.source.unsupported(f"{keyword} in a derived table", select.args[clause], keyword)
        if select.args.get("distinct") is not None:
            raise self.source.unsupported("SELECT DISTINCT in a grouped derived table", select, "DISTINCT",
                                          where="inside")
        inner = type(self.owner)(self.owner.translation, select, ctes)
        names = self.owner.translation.names
        group = select.args.get("group")
        keys: list[str] = []
        key_of: dict[Expr, str] = {}
        key_lifts: list[Expr] = []
        for g in (group.expressions if group is not None else []):
            if isinstance(g, exp.Literal):
                raise self.source.unsupported("GROUP BY position in a derived table", g)
            value = inner.values.value(g)
            if value in key_of:
                continue
            if isinstance(value, Var):
                key = value.name
            else:
                key = names.generated("g")
                key_lifts.append(lift(key, value))
            keys.append(key)
            key_of[value] = key
        factors: list[Expr] = []
        if group is not None:
            factors.append(exists(aggsum(keys, prod(*inner.scope.relations(), *inner.scope.factors(),
                                                     *key_lifts))))
        inner.values.aggregate = NestedAggregates(self, inner, prod(*key_lifts), tuple(keys), factors)
        outputs = []
        for item in inner.select_items():
            if item.node is None:
                raise self.source.unsupported("* in a grouped derived table", select, "*", where="inside")
            value = inner.values.value(item.node)
            if first_aggregate(item.node) is None:
                if value not in key_of:
                    raise self.source.unsupported(
                        f"column {item.name} that is neither grouped nor aggregated", item.node)
                value = Var(key_of[value])
            outputs.append((item.name, value))
        having = select.args.get("having")
        if having is not None:
            factors.append(inner.values.condition(having.this))
        if column_aliases:
            if len(column_aliases) != len(outputs):
                raise self.source.unsupported(
                    f"{len(column_aliases)} column aliases for {len(outputs)} columns of {alias}", node)
            outputs = [(new, value) for new, (_, value) in zip(column_aliases, outputs)]
        columns = [SourceColumn(name, var=value.name) if isinstance(value, Var) else SourceColumn(name, value=value)
                   for name, value in outputs]
        return FromItem(alias, columns, [], factors, names)

    # -- shared --------------------------------------------------------------------------------------

    def _count(self, inner: "SelectTranslator", condition: Expr, outer_vars) -> Var:
        body = prod(*inner.scope.relations(), *inner.scope.factors(), condition)
        return self._lift(body, list(inner.scope.correlated) + list(outer_vars), self.owner.scope.conditions)

    def _lift(self, body: Expr, candidates, target: list) -> Var:
        """A variable bound to the nested sum of `body`, its lift added to `target` once per sum."""
        key = (_nested_sum(body, candidates), id(target))
        if key not in self._lifted:
            z, binding = self._new_lift(body, candidates)
            target.append(binding)
            self._lifted[key] = z
        return self._lifted[key]

    def _new_lift(self, body: Expr, candidates) -> tuple[Var, Expr]:
        """`(z ^= AggSum(correlation, body))` for a fresh z."""
        z = self.owner.translation.names.generated("z")
        return Var(z), lift(z, _nested_sum(body, candidates))

    def _inner(self, select: exp.Select) -> "SelectTranslator":
        return type(self.owner)(self.owner.translation, select, self.owner.ctes, outer=self.owner.scope)

    def _select(self, node: exp.Expression, construct: str) -> exp.Select:
        select = _unwrapped_select(node)
        if select is None:
            raise self.source.unsupported(f"{construct} that is not a SELECT", node)
        return select

    def _single_expression(self, select: exp.Select, node: exp.Expression, construct: str) -> exp.Expression:
        if len(select.expressions) != 1 or isinstance(_unaliased(select.expressions[0]), exp.Star):
            raise self.source.unsupported(f"{construct} of several columns", node, "SELECT")
        return _unaliased(select.expressions[0])

    def _reject_clauses(self, select: exp.Select, context: str, grouping: bool) -> None:
        clauses = [("limit", "LIMIT"), ("offset", "OFFSET")]
        if grouping:
            clauses += [("group", "GROUP BY"), ("having", "HAVING")]
        for clause, keyword in clauses:
            if select.args.get(clause) is not None:
                raise self.source.unsupported(f"{keyword} in {context}", select.args[clause], keyword.split()[0])


class NestedAggregates:
    """Translates the aggregate calls of a subquery (select list, HAVING) into lifts of sums over its
    body times `restriction`, correlated by the subquery's correlation variables and `keys`."""

    def __init__(self, nested: NestedQueries, inner: "SelectTranslator", restriction: Expr, keys, target: list):
        self.nested = nested
        self.inner = inner
        self.restriction = restriction
        self.keys = tuple(keys)
        self.target = target
        self.variables: set[str] = set()

    def __call__(self, call: exp.AggFunc) -> Expr:
        source = self.nested.source
        name = source.function_name(call).upper()
        if isinstance(call.this, exp.Distinct):
            raise source.unsupported(f"{name}(DISTINCT) in a subquery", call)
        if isinstance(call, (exp.Min, exp.Max)):
            raise source.unsupported(f"{name} in a subquery", call,
                                     detail="a subquery's MIN or MAX can be compared: x = (SELECT MIN(…) …)")
        if not isinstance(call, (exp.Sum, exp.Count, exp.Avg)):
            raise source.unsupported(f"aggregate function {name}", call)
        if call.this is not None and first_aggregate(call.this) is not None:
            raise source.unsupported("nested aggregate", first_aggregate(call.this))
        if isinstance(call, exp.Count):
            if call.expressions:
                raise source.unsupported("COUNT of several expressions", call)
            if call.this is None or isinstance(call.this, exp.Star):
                return self._total(ONE)
            return self._total(is_not_null(self.inner.values.value(call.this)))
        argument = self.inner.values.value(call.this)
        total = self._total(argument)
        non_null = self._total(is_not_null(argument))
        if isinstance(call, exp.Avg):
            return fn("/", total, non_null)
        return fn("case", cmp("=", non_null, ZERO), NULL, total)  # SUM over no non-NULL value is NULL

    def _total(self, factor: Expr) -> Var:
        body = prod(*self.inner.scope.relations(), *self.inner.scope.factors(), self.restriction, factor)
        z = self.nested._lift(body, list(self.inner.scope.correlated) + list(self.keys), self.target)
        self.variables.add(z.name)
        return z


def _nested_sum(body: Expr, candidates) -> Expr:
    """AggSum of body grouped by the candidate correlation variables that body mentions."""
    mentioned = set(all_vars(body))
    return aggsum([v for v in dict.fromkeys(candidates) if v in mentioned], body)


def _is_grouped(select: exp.Select) -> bool:
    return (select.args.get("group") is not None or select.args.get("having") is not None
            or any(first_aggregate(e) is not None for e in select.expressions))


def _unwrapped_select(node: exp.Expression) -> exp.Select | None:
    while isinstance(node, (exp.Subquery, exp.Paren)):
        node = node.this
    return node if isinstance(node, exp.Select) else None


def _unaliased(node: exp.Expression) -> exp.Expression:
    return node.this if isinstance(node, exp.Alias) else node

