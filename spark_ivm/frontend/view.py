"""The top SELECT as the view: group keys, the aggregates the view maintains, and the Spark SQL over
them that reads its columns, HAVING and ORDER BY."""

from __future__ import annotations

import re
from typing import Callable, Mapping

from sqlglot import exp

from spark_ivm.calculus.analysis import rename
from spark_ivm.calculus.expressions import ZERO, Expr, Var, aggsum, lift, prod
from spark_ivm.errors import UnknownColumnError, UnsupportedQueryError
from spark_ivm.frontend.constructs import first_aggregate, reject_aggregates, reject_python_calls_when_read
from spark_ivm.frontend.scope import PLACEHOLDER, Translation
from spark_ivm.frontend.select import SelectItem, SelectTranslator
from spark_ivm.frontend.source import DIALECT, SqlSource
from spark_ivm.frontend.values import is_not_null, not_null_variables, summed
from spark_ivm.frontend.view_query import ROW_COUNT, Aggregate, OutputColumn, ViewQuery
from spark_ivm.udfs.registry import UDFS


# ---------------------------------------------------------------------------------------------------
# Aggregates


# The name stem of each aggregate read from a multiset of values, as `min_1`, `cntd_2`…
_REDUCED_STEMS = {"min": "min", "max": "max", "count_distinct": "cntd", "sum_distinct": "sumd",
                  "avg_distinct": "avgd"}


class Aggregates:
    """The sums, non-NULL counts and multisets of values the view's columns ask for, named once the
    body is known. Every value is numbered once: SUM(a), AVG(a), MIN(a) are `sum_1`, `nn_1`, `min_1`."""

    def __init__(self):
        self.arguments: list[Expr] = []
        self._wanted: dict[Expr, set[str]] = {}
        self._value_variables: dict[Expr, tuple[str, bool]] = {}  # value → (variable, bound by a lift)

    def sum(self, value: Expr, register: bool = True) -> tuple[str, str]:
        return self._ask(value, "sum", register), self._ask(value, "nn", register)

    def non_null_count(self, value: Expr, register: bool = True) -> str:
        return self._ask(value, "nn", register)

    def reduced(self, value: Expr, reduce: str, register: bool, variable: Callable[[], tuple[str, bool]]) -> str:
        """An aggregate read as `reduce` over the multiset of the value per group; `variable` gives the
        variable the multiset is keyed by, and whether a lift binds it to the value."""
        name = self._ask(value, reduce, register)
        if value not in self._value_variables:
            self._value_variables[value] = variable()
        return name

    def _ask(self, value: Expr, kind: str, register: bool) -> str:
        if value not in self._wanted:
            if not register:
                raise LookupError(kind)
            self.arguments.append(value)
            self._wanted[value] = set()
        wanted = self._wanted[value]
        if kind not in wanted:
            if not register:
                raise LookupError(kind)
            wanted.add(kind)
        return self.placeholder(value, kind)

    def placeholder(self, value: Expr, kind: str) -> str:
        return f"{PLACEHOLDER}{kind}{self.arguments.index(value)}"

    def definitions(self, keys: tuple[str, ...], body: Expr, variable_names: Mapping[str, str],
                    not_null: frozenset[str] = frozenset()) -> tuple[list[Aggregate], dict[str, str]]:
        """The aggregates in order (row count first) and each placeholder's final name; an aggregate
        whose definition equals an earlier one is that one (`not_null`: the body's variables that hold
        no NULL, whose counts of non-NULL values are the row count)."""
        aggregates = [Aggregate(ROW_COUNT, aggsum(keys, body))]
        name_of: dict[tuple[Expr, str | None], str] = {(aggregates[0].definition, None): ROW_COUNT}
        names: dict[str, str] = {}
        number = 0
        for value in self.arguments:
            final_value = rename(value, variable_names)
            candidates = []  # (kind, definition, value keys, reduce)
            for kind in ("sum", "nn"):
                if kind in self._wanted[value]:
                    factor = summed(final_value) if kind == "sum" else is_not_null(final_value, not_null)
                    candidates.append((kind, aggsum(keys, prod(body, factor)), (), None))
            for reduce in _REDUCED_STEMS:
                if reduce in self._wanted[value]:
                    variable, lifted = self._value_variables[value]
                    x = variable_names[variable]
                    multiset = aggsum(keys + (x,), prod(body, lift(x, final_value)) if lifted else body)
                    candidates.append((_REDUCED_STEMS[reduce], multiset, (x,), reduce))
            if any((d, r) not in name_of for _, d, _, r in candidates):
                number += 1
            for kind, definition, value_keys, reduce in candidates:
                if (definition, reduce) not in name_of:
                    name_of[definition, reduce] = f"{kind}_{number}"
                    aggregates.append(Aggregate(name_of[definition, reduce], definition, value_keys, reduce))
                names[self.placeholder(value, reduce or kind)] = name_of[definition, reduce]
        return aggregates, names


# ---------------------------------------------------------------------------------------------------
# The view: keys, aggregates and the Spark SQL that reads them


def quoted_column(name: str) -> exp.Column:
    return exp.column(name, quoted=True)


class ViewTranslator:
    """The top SELECT: group keys, aggregates, output columns, HAVING, ORDER BY and LIMIT."""

    def __init__(self, translation: Translation, select: exp.Select, ignore_group: bool = False):
        self.translation = translation
        self.source = translation.source
        self.select = select
        self.ignore_group = ignore_group  # SELECT DISTINCT of group keys only: the GROUP BY changes nothing
        self.from_ = SelectTranslator(translation, select)
        self.values = self.from_.values
        self.items = self.from_.select_items()
        self.keys: list[str] = []
        self.key_of_value: dict[Expr, str] = {}
        self.key_lifts: list[Expr] = []
        self.aggregates = Aggregates()
        self.aliases: dict[str, exp.Expression] = {}  # select alias → its rewritten SQL, for HAVING

    def view(self) -> ViewQuery:
        grouped = self._is_grouped() and not self.ignore_group
        distinct = self.select.args.get("distinct") is not None
        if grouped:
            self._group_keys()
            outputs = [(item.name, self._rewrite_item(item)) for item in self.items]
        else:
            outputs = [(item.name, quoted_column(self._add_key(self.from_.item_value(item)))) for item in self.items]
        if grouped and distinct and not self._rows_are_distinct(outputs):
            if self._has_aggregates() or self.select.args.get("having") is not None:
                raise self.source.unsupported("SELECT DISTINCT over aggregates", self.select, "DISTINCT",
                                              where="inside", detail="the select list leaves out a group key")
            # Only group keys: the distinct rows are those of the select list over the ungrouped rows.
            return ViewTranslator(Translation(self.source, self.translation.catalog), self.select, True).view()
        self.aliases = {name.lower(): tree for (name, tree), item in zip(outputs, self.items) if item.aliased}
        having = self.select.args.get("having")
        having_tree = self.rewrite(having.this, use_aliases=True) if having is not None else None
        for tree in [t for _, t in outputs] + [having_tree]:
            reject_python_calls_when_read(self.source, tree)
        order_by = self._order_by(outputs)
        return self._finish(outputs, having_tree, order_by, bag=not grouped, distinct=distinct and not grouped)

    def _rows_are_distinct(self, outputs: list[tuple[str, exp.Expression]]) -> bool:
        """Whether every group key is an output column, so that groups have different rows."""
        shown = {tree.name for _, tree in outputs if isinstance(tree, exp.Column) and not tree.table}
        return set(self.keys) <= shown

    def _has_aggregates(self) -> bool:
        nodes = [item.node for item in self.items if item.node is not None] + [self.select.args.get("having")]
        return any(first_aggregate(node) is not None for node in nodes if node is not None)

    def _is_grouped(self) -> bool:
        having = self.select.args.get("having")
        return (self.select.args.get("group") is not None or having is not None
                or any(first_aggregate(item.node) is not None for item in self.items if item.node is not None))

    # -- keys --------------------------------------------------------------------------------------

    def _group_keys(self) -> None:
        group = self.select.args.get("group")
        for node in (group.expressions if group is not None else []):
            reject_aggregates(self.source, node, "aggregate in GROUP BY")
            self._add_key(self._group_value(node))

    def _group_value(self, node: exp.Expression) -> Expr:
        """GROUP BY accepts select-list positions and aliases as Spark does (a column name wins)."""
        if isinstance(node, exp.Literal) and not node.is_string and re.fullmatch(r"\d+", node.this):
            return self.from_.item_value(self._item_at(int(node.this), node))
        if isinstance(node, exp.Column) and not node.table:
            try:
                return self.values.value(node)
            except UnknownColumnError:
                aliased = [i for i in self.items if i.aliased and i.name.lower() == node.name.lower()]
                if not aliased:
                    raise
                reject_aggregates(self.source, aliased[0].node, "aggregate in GROUP BY")
                return self.values.value(aliased[0].node)
        return self.values.value(node)

    def _item_at(self, position: int, node: exp.Expression) -> SelectItem:
        if not 1 <= position <= len(self.items):
            raise self.source.unsupported(f"position {position} that is not in the select list", node)
        return self.items[position - 1]

    def _add_key(self, value: Expr) -> str:
        if value not in self.key_of_value:
            if isinstance(value, Var):
                key = value.name
            else:
                key = self.translation.names.generated()
                self.key_lifts.append(lift(key, value))
            self.keys.append(key)
            self.key_of_value[value] = key
        return self.key_of_value[value]

    # -- select list, HAVING, ORDER BY as Spark SQL over keys and aggregates -----------------------

    def _rewrite_item(self, item: SelectItem) -> exp.Expression:
        if item.node is not None:
            return self.rewrite(item.node)
        value = self.from_.item_value(item)
        if value not in self.key_of_value:
            raise self.source.unsupported(f"column {item.name} that is neither grouped nor aggregated",
                                          self.select, "*", where="inside")
        return quoted_column(self.key_of_value[value])

    def rewrite(self, node: exp.Expression, register: bool = True, use_aliases: bool = False) -> exp.Expression:
        """The expression with aggregate calls replaced by aggregate names and group keys by key names."""

        def visit(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Subquery):
                return self._subquery_sql(n)
            if isinstance(n, exp.AggFunc):
                return self._aggregate_sql(n, register)
            if isinstance(n, exp.Column):
                return self._column_sql(n, use_aliases)
            if self._python_call_of_keys(n):
                # Read as a key of its own (grouping by a function of the keys changes no group): a
                # Spark view cannot call a Python function, which lives in one session only.
                return quoted_column(self._add_key(self.values.value(n)))
            if _has_column(n) and first_aggregate(n) is None:
                key = self._key_for(n)
                if key is not None:
                    return quoted_column(key)
            return n

        return node.transform(visit)

    def _python_call_of_keys(self, node: exp.Expression) -> bool:
        if not (isinstance(node, exp.Func) and self.source.function_name(node) in UDFS):
            return False
        if first_aggregate(node) is not None or self.select.args.get("group") is None:
            return False
        try:
            return all(self.values.value(c) in self.key_of_value for c in node.find_all(exp.Column))
        except (UnknownColumnError, UnsupportedQueryError):
            return False

    def _subquery_sql(self, node: exp.Subquery) -> exp.Expression:
        """A scalar subquery outside the aggregates of a grouped view: a function of the group keys (or
        a constant), so grouping by it too changes no group; it is read as that key."""
        if self.select.args.get("group") is None:
            raise self.source.unsupported("scalar subquery in an aggregate view without GROUP BY", node, "SELECT",
                                          detail="the view's single row would depend on it")
        return quoted_column(self._add_key(self.values.value(node)))

    def _key_for(self, node: exp.Expression) -> str | None:
        try:
            value = self.values.value(node)
        except UnsupportedQueryError:
            return None  # not a calculus value, so not a key: its parts may still be
        return self.key_of_value.get(value)

    def _column_sql(self, column: exp.Column, use_aliases: bool) -> exp.Expression:
        alias = self.aliases.get(column.name.lower()) if use_aliases and not column.table else None
        try:
            key = self.key_of_value.get(self.values.value(column))
        except UnknownColumnError:
            if alias is None:
                raise
            return alias.copy()
        if key is not None:
            return quoted_column(key)
        if alias is not None:
            return alias.copy()
        raise self.source.unsupported(f"column {column.sql(dialect=DIALECT)} that is neither grouped nor aggregated",
                                      column)

    def _aggregate_sql(self, call: exp.AggFunc, register: bool) -> exp.Expression:
        try:
            if isinstance(call, (exp.Min, exp.Max)) or isinstance(call.this, exp.Distinct):
                return self._reduced_sql(call, register)
            if isinstance(call, exp.Count):
                return self._count_sql(call, register)
            argument = self._argument(call.this)
            if is_not_null(argument) == ZERO:
                return exp.Null()
            if argument == ZERO:  # SUM(0), SUM(a * 0): a sum of 0 has no map, its definition is 0
                total: exp.Expression = exp.Literal.number(0)
                non_null_name = self.aggregates.non_null_count(argument, register)
            else:
                sum_name, non_null_name = self.aggregates.sum(argument, register)
                total = quoted_column(sum_name)
        except LookupError:
            raise self.source.unsupported("ORDER BY an expression that is not in the select list", call) from None
        if isinstance(call, exp.Avg):
            return exp.Paren(this=exp.Div(this=total, expression=exp.Nullif(
                this=quoted_column(non_null_name), expression=exp.Literal.number(0))))
        # SUM over no non-NULL value is NULL, not 0.
        return exp.Case(ifs=[exp.If(this=exp.EQ(this=quoted_column(non_null_name), expression=exp.Literal.number(0)),
                                    true=exp.Null())], default=total)

    def _reduced_sql(self, call: exp.AggFunc, register: bool) -> exp.Expression:
        """MIN, MAX and the DISTINCT aggregates are read from the multiset of the value per group."""
        node = call.this
        if isinstance(node, exp.Distinct):
            if len(node.expressions) != 1:
                name = self.source.function_name(call).upper()
                raise self.source.unsupported(f"{name}(DISTINCT) of several expressions", call)
            node = node.expressions[0]
        if isinstance(call, exp.Count) and call.expressions:
            raise self.source.unsupported("COUNT of several expressions", call)
        reduce = ("min" if isinstance(call, exp.Min) else "max" if isinstance(call, exp.Max)
                  else "count_distinct" if isinstance(call, exp.Count)
                  else "sum_distinct" if isinstance(call, exp.Sum) else "avg_distinct")
        argument = self._argument(node)
        if is_not_null(argument) == ZERO:
            return exp.Literal.number(0) if reduce == "count_distinct" else exp.Null()
        name = self.aggregates.reduced(argument, reduce, register, lambda: self._value_variable(argument))
        return quoted_column(name)

    def _value_variable(self, value: Expr) -> tuple[str, bool]:
        """The variable a multiset of the value is keyed by: the value's own variable when it is a
        column that is not a group key, else a fresh one bound by a lift."""
        if isinstance(value, Var) and value.name not in self.keys:
            return value.name, False
        return self.translation.names.generated("x"), True

    def _count_sql(self, call: exp.Count, register: bool) -> exp.Expression:
        if call.expressions:
            raise self.source.unsupported("COUNT of several expressions", call)
        if call.this is None or isinstance(call.this, exp.Star):
            return quoted_column(ROW_COUNT)
        argument = self._argument(call.this)
        if is_not_null(argument) == ZERO:
            return exp.Literal.number(0)
        return quoted_column(self.aggregates.non_null_count(argument, register))

    def _argument(self, node: exp.Expression) -> Expr:
        nested = first_aggregate(node)
        if nested is not None:
            raise self.source.unsupported("nested aggregate", nested)
        return self.values.value(node)

    def _order_by(self, outputs: list[tuple[str, exp.Expression]]) -> tuple[str, ...]:
        order = self.select.args.get("order")
        sorts = []
        for ordered in (order.expressions if order is not None else []):
            target = self._order_target(ordered.this, outputs)
            reject_python_calls_when_read(self.source, target)
            sorts.append(exp.Ordered(this=target, desc=ordered.args.get("desc"),
                                     nulls_first=ordered.args.get("nulls_first")).sql(dialect=DIALECT))
        return tuple(sorts)

    def _order_target(self, node: exp.Expression, outputs: list[tuple[str, exp.Expression]]) -> exp.Expression:
        """ORDER BY refers to output columns by position, by name, or by an expression of them."""
        names = [name for name, _ in outputs]
        if isinstance(node, exp.Literal) and not node.is_string and re.fullmatch(r"\d+", node.this):
            self._item_at(int(node.this), node)
            return quoted_column(names[int(node.this) - 1])
        if isinstance(node, exp.Column) and not node.table:
            named = [n for n in names if n.lower() == node.name.lower()]
            if named:
                return quoted_column(named[0])
        tree = self.rewrite(node, register=False)
        by_sql = {t: name for name, t in reversed(outputs)}
        output_references: list[exp.Expression] = []

        def to_output(n: exp.Expression) -> exp.Expression:
            if n not in by_sql:
                return n
            output_references.append(quoted_column(by_sql[n]))
            return output_references[-1]

        tree = tree.transform(to_output)
        if any(all(c is not r for r in output_references) for c in tree.find_all(exp.Column)):
            raise self.source.unsupported("ORDER BY an expression that is not in the select list", node)
        return tree

    # -- settling names ----------------------------------------------------------------------------

    def _finish(self, outputs, having_tree, order_by, bag: bool, distinct: bool) -> ViewQuery:
        limit = limit_of(self.source, self.select)
        scope = self.from_.scope
        body = prod(*scope.relations(), *scope.factors(), *self.key_lifts)
        if body == ZERO:  # WHERE FALSE, WHERE NULL, WHERE 1 = 0: no map to maintain
            where = self.select.args.get("where")
            raise self.source.unsupported("a query that selects no row whatever the data", where or self.select,
                                          "WHERE" if where is not None else None, where="inside",
                                          detail="its WHERE is always false or NULL")
        variable_names = self.translation.names.final_names()
        keys = tuple(variable_names[k] for k in self.keys)
        body = rename(body, variable_names)
        not_null = not_null_variables(body, self.translation.catalog.not_null)
        aggregates, aggregate_names = self.aggregates.definitions(keys, body, variable_names, not_null)
        names = {**variable_names, **aggregate_names}
        return ViewQuery(
            sql=self.source.text,
            keys=keys,
            aggregates=tuple(aggregates),
            columns=tuple(OutputColumn(name, _render(tree, names)) for name, tree in outputs),
            having=_render(having_tree, names) if having_tree is not None else None,
            order_by=order_by,
            limit=limit,
            bag=bag,
            relations=tuple(dict.fromkeys(self.translation.relations)),
            distinct=distinct,
        )


def limit_of(source: SqlSource, query: exp.Query) -> int | None:
    if query.args.get("offset") is not None:
        raise source.unsupported("OFFSET", query.args["offset"], "OFFSET")
    limit = query.args.get("limit")
    if limit is None:
        return None
    count = limit.expression
    if not (isinstance(count, exp.Literal) and not count.is_string and re.fullmatch(r"\d+", count.this)):
        raise source.unsupported("LIMIT that is not a whole number", limit, "LIMIT")
    return int(count.this)


def _render(tree: exp.Expression, names: Mapping[str, str]) -> str:
    def settle(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Identifier) and n.this in names:
            return exp.to_identifier(names[n.this], quoted=True)
        return n

    return tree.transform(settle).sql(dialect=DIALECT)


def _has_column(node: exp.Expression) -> bool:
    return any(isinstance(n, exp.Column) for n in node.walk())
