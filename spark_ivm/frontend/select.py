"""One SELECT: its FROM clause (tables, joins, outer joins, derived tables, CTEs, UNION ALL) inlined
into a scope, its WHERE, and its select list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from sqlglot import exp

from spark_ivm.calculus.expressions import NULL, Expr, Var, lift, prod, rel, sum_
from spark_ivm.errors import UnknownColumnError, UnknownTableError
from spark_ivm.frontend.constructs import first_aggregate, reject_aggregates, set_operation_name
from spark_ivm.frontend.nested import NestedQueries
from spark_ivm.frontend.scope import FromItem, Scope, SourceColumn, Translation
from spark_ivm.frontend.source import DIALECT, SqlSource
from spark_ivm.frontend.values import ValueTranslator


@dataclass
class SelectItem:
    name: str  # the output column name Spark would give
    node: exp.Expression | None  # the select expression, without its alias
    star_column: tuple[FromItem, SourceColumn] | None = None  # set instead of node for `*` expansions
    aliased: bool = False


class SelectTranslator:
    """The FROM clause and WHERE of one SELECT, inlined into a scope, and its select list."""

    def __init__(self, translation: Translation, select: exp.Select, ctes: Mapping[str, tuple] | None = None,
                 outer: Scope | None = None):
        self.translation = translation
        self.source = translation.source
        self.select = select
        self.ctes = dict(ctes or {})
        self._define_ctes()
        self.scope = Scope(self.source, outer)
        self.nested = NestedQueries(self)
        self.values = ValueTranslator(self.source, self.scope.resolve, self.nested)
        self._inline_from()

    def _define_ctes(self) -> None:
        define_ctes(self.select, self.ctes)

    # -- FROM --------------------------------------------------------------------------------------

    def _inline_from(self) -> None:
        from_ = self.select.args.get("from_")
        if from_ is None:
            raise self.source.unsupported("SELECT without FROM", self.select, "SELECT")
        self._add_source(from_.this)
        for join in self.select.args.get("joins") or []:
            self._add_join(join)
        where = self.select.args.get("where")
        if where is not None:
            reject_aggregates(self.source, where.this, "aggregate in WHERE")
            self.scope.conditions.append(self.values.condition(where.this))

    def _add_join(self, join: exp.Join) -> None:
        side = str(join.args.get("side") or "").upper()
        if side:
            self._add_outer_join(join, side)
            return
        self._add_source(join.this)
        on = join.args.get("on")
        if on is not None:
            reject_aggregates(self.source, on, "aggregate in ON")
            self.scope.conditions.append(self.values.condition(on))

    def _add_source(self, node: exp.Expression) -> None:
        if isinstance(node, exp.Table):
            self._add_table(node)
        elif isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select):
            self._add_derived(node.this, node.alias_or_name, _alias_columns(node), node)
        elif isinstance(node, exp.Subquery) and isinstance(node.this, exp.SetOperation):
            self._add_derived_union(node.this, node.alias_or_name, _alias_columns(node), node)
        elif isinstance(node, exp.Subquery) and isinstance(node.this, (exp.Table, exp.Subquery)):
            self._add_source(node.this)  # a parenthesized join
        else:
            raise self.source.unsupported(f"FROM item {node.key.upper()}", node)

    def _add_table(self, table: exp.Table) -> None:
        if not isinstance(table.this, exp.Identifier):
            name = table.this.sql(dialect=DIALECT).split("(")[0].upper()
            raise self.source.unsupported(f"table function {name}", table)
        if table.args.get("version") or table.args.get("when"):
            raise self.source.unsupported("time travel", table)
        alias = table.alias or table.name
        cte = self.ctes.get(table.name.lower()) if not table.db else None
        if cte is not None:
            definition, visible_ctes = cte
            column_aliases = _alias_columns(table) or _alias_columns(definition)
            if isinstance(definition.this, exp.SetOperation):
                self._add_derived_union(definition.this, alias, column_aliases, table, visible_ctes)
            elif isinstance(definition.this, exp.Select):
                self._add_derived(definition.this, alias, column_aliases, table, visible_ctes)
            else:
                raise self.source.unsupported(f"CTE {definition.alias_or_name} that is not a SELECT", definition)
        else:
            self._add_base_table(table, alias)
        for join in table.args.get("joins") or []:
            self._add_join(join)

    def _add_base_table(self, table: exp.Table, alias: str) -> None:
        parts = [p for p in (table.catalog, table.db, table.name) if p]
        found = self.translation.catalog.lookup(parts)
        if found is None:
            raise self.source.located(UnknownTableError, f"unknown table {'.'.join(parts)}", table)
        key, column_names = found
        alias = alias.lower()
        column_aliases = _alias_columns(table)
        if column_aliases and len(column_aliases) != len(column_names):
            raise self.source.unsupported(
                f"{len(column_aliases)} column aliases for the {len(column_names)} columns of {key}", table)
        columns = [SourceColumn(c, var=self.translation.names.for_column(alias, c))
                   for c in column_aliases or column_names]
        atom = rel(key, *(c.var for c in columns))
        self.scope.items.append(FromItem(alias, columns, [atom], [], self.translation.names))
        self.translation.relations.append(key)

    def _add_outer_join(self, join: exp.Join, side: str) -> None:
        """`left {side} JOIN right ON φ`: the inner join plus, per outer side, its rows without a match
        (a nested count of matches that is 0), the other side's columns lifted to NULL. Everything
        joined so far is the left side, which then stands as one FROM block."""
        on = join.args.get("on")
        if on is None:
            raise self.source.unsupported(f"{side} JOIN without ON", join, side)
        nested = next(iter(on.find_all(exp.Subquery, exp.Exists)), None)
        if nested is not None:
            raise self.source.unsupported(f"subquery in the ON condition of a {side} JOIN", nested,
                                          "EXISTS" if isinstance(nested, exp.Exists) else None)
        reject_aggregates(self.source, on, "aggregate in ON")
        earlier = self.select.args.get("joins") or []
        earlier = earlier[:earlier.index(join)] if join in earlier else earlier
        if side != "LEFT" and any(str(j.args.get("kind") or "").upper() == "CROSS" for j in earlier):
            raise self.source.unsupported(f"{side} JOIN after a comma or CROSS JOIN", join, side)
        left_items = list(self.scope.items)
        left = self._collapse(left_items, self.scope.conditions)
        conditions_before = len(self.scope.conditions)
        self._add_source(join.this)
        right_items = self.scope.items[len(left_items):]
        right = self._collapse(right_items, self.scope.conditions[conditions_before:])
        del self.scope.conditions[:]
        match = self.values.condition(on)
        names = self.translation.names
        terms = [prod(left, right, match)]
        if side in ("LEFT", "FULL"):
            terms.append(prod(left, self.nested.no_match(prod(right, match), right), _null_lifts(right_items)))
        if side in ("RIGHT", "FULL"):
            terms.append(prod(right, self.nested.no_match(prod(left, match), left), _null_lifts(left_items)))
        self.scope.items.insert(0, FromItem("", [], [sum_(*terms)], [], names))

    @staticmethod
    def _collapse(items: list[FromItem], conditions: list[Expr]) -> Expr:
        """The product of FROM items and conditions, every computed column lifted inside it (a padded
        row's computed columns are NULL); the items stay for looking up columns."""
        for item in items:
            for column in item.columns:
                if column.value is not None:
                    item.variable(column)
        body = prod(*(r for item in items for r in item.relations), *(f for item in items for f in item.factors),
                    *conditions)
        for item in items:
            item.relations, item.factors = [], []
        return body

    def _add_derived(self, select: exp.Select, alias: str, column_aliases: list[str], node: exp.Expression,
                     ctes: Mapping[str, tuple] | None = None) -> None:
        if select.args.get("group") is not None or select.args.get("having") is not None or any(
                first_aggregate(e) is not None for e in select.expressions):
            self.scope.items.append(self.nested.grouped_item(
                select, alias.lower(), column_aliases, node, self.ctes if ctes is None else ctes))
            return
        inner = SelectTranslator(self.translation, select, self.ctes if ctes is None else ctes)
        outputs = inner.inlined_outputs()
        if column_aliases:
            if len(column_aliases) != len(outputs):
                raise self.source.unsupported(
                    f"{len(column_aliases)} column aliases for {len(outputs)} columns of {alias}", node)
            outputs = [(new_name, value) for new_name, (_, value) in zip(column_aliases, outputs)]
        columns = [SourceColumn(name, var=value.name) if isinstance(value, Var) else SourceColumn(name, value=value)
                   for name, value in outputs]
        self.scope.items.append(FromItem(alias.lower(), columns, inner.scope.relations(), inner.scope.factors(),
                                         self.translation.names))

    def _add_derived_union(self, union: exp.SetOperation, alias: str, column_aliases: list[str],
                           node: exp.Expression, ctes: Mapping[str, tuple] | None = None) -> None:
        """A UNION ALL as a FROM item: the sum of its operands' bodies, each lifting the item's column
        variables to its own select list. Other set operations are not sums, so not inlined."""
        ctes = dict(self.ctes if ctes is None else ctes)
        define_ctes(union, ctes)
        operands = union_all_operands(self.source, union, "in a derived table")
        sides = []
        for operand in operands:
            inner = SelectTranslator(self.translation, operand, ctes)
            sides.append((inner, inner.inlined_outputs()))
        names = [name for name, _ in sides[0][1]]
        check_widths(self.source, union, [len(outputs) for _, outputs in sides])
        if column_aliases:
            if len(column_aliases) != len(names):
                raise self.source.unsupported(
                    f"{len(column_aliases)} column aliases for {len(names)} columns of {alias}", node)
            names = column_aliases
        alias = alias.lower()
        columns = [SourceColumn(name, var=self.translation.names.for_column(alias, name)) for name in names]
        body = sum_(*(prod(*inner.scope.relations(), *inner.scope.factors(),
                           *(lift(column.var, value) for column, (_, value) in zip(columns, outputs)))
                      for inner, outputs in sides))
        self.scope.items.append(FromItem(alias, columns, [], [body], self.translation.names))

    def inlined_outputs(self, context: str = "a derived table", distinct: bool = False) -> list[tuple[str, Expr]]:
        """The select list of a derived table, CTE or set operand inlined into the query: (name, value)
        per column. SELECT DISTINCT is refused unless `distinct` (the caller reads it)."""
        for clause, construct, keyword in (("group", "aggregate", "GROUP"), ("having", "aggregate", "HAVING"),
                                           ("limit", "LIMIT", "LIMIT"), ("offset", "OFFSET", "OFFSET")):
            if self.select.args.get(clause) is not None:
                raise self.source.unsupported(f"{construct} in {context}", self.select.args[clause], keyword)
        if self.select.args.get("distinct") is not None and not distinct:
            raise self.source.unsupported(f"SELECT DISTINCT in {context}", self.select, "DISTINCT", where="inside")
        for node in self.select.expressions:
            reject_aggregates(self.source, node, f"aggregate in {context}")
        return [(item.name, self.item_value(item)) for item in self.select_items()]

    # -- select list -------------------------------------------------------------------------------

    def select_items(self) -> list[SelectItem]:
        items: list[SelectItem] = []
        for node in self.select.expressions:
            star_qualifier = _star_qualifier(node)
            if star_qualifier is not None:
                items += [SelectItem(column.name, None, (item, column))
                          for item, column in self.scope.star(star_qualifier or None, node)]
            elif isinstance(node, exp.Alias):
                items.append(SelectItem(node.alias, node.this, aliased=True))
            else:
                items.append(SelectItem(self.output_name(node), node))
        return items

    def item_value(self, item: SelectItem) -> Expr:
        if item.star_column is not None:
            from_item, column = item.star_column
            return from_item.variable(column)
        return self.values.value(item.node)

    def output_name(self, node: exp.Expression) -> str:
        """The column name Spark gives an unaliased select expression (best effort for computed ones)."""
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            try:
                return self.scope.lookup(node)[1].name
            except UnknownColumnError:
                return node.name  # reported when the column is translated
        return spark_auto_name(node)


def define_ctes(query: exp.Query, ctes: dict[str, tuple]) -> None:
    """Add the CTEs of a query's WITH to `ctes`: name → (definition, the CTEs it sees)."""
    with_ = query.args.get("with_")
    for cte in (with_.expressions if with_ else []):
        # A CTE sees the CTEs defined before it.
        ctes[cte.alias_or_name.lower()] = (cte, dict(ctes))


def unwrapped(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Subquery) and isinstance(node.this, exp.Query) and not node.alias:
        node = node.this
    return node


def union_all_operands(source: SqlSource, union: exp.SetOperation, context: str) -> list[exp.Select]:
    """The SELECTs of a chain of UNION ALLs, in order; any other set operation is refused."""
    node = unwrapped(union)
    if isinstance(node, exp.Select):
        return [node]
    if not (isinstance(node, exp.Union) and node.args.get("distinct") is False):
        name = set_operation_name(node) if isinstance(node, exp.SetOperation) else node.key.upper()
        keyword = name.split()[0]
        raise source.unsupported(f"{name} {context}", node, keyword, where="inside")
    reject_set_operation_clauses(source, node, context)
    return (union_all_operands(source, node.this, context)
            + union_all_operands(source, node.expression, context))


def reject_set_operation_clauses(source: SqlSource, node: exp.SetOperation, context: str) -> None:
    """LIMIT and OFFSET of an inner set operation pick rows; its ORDER BY alone changes nothing."""
    for clause, construct, keyword in (("limit", "LIMIT", "LIMIT"), ("offset", "OFFSET", "OFFSET")):
        if node.args.get(clause) is not None:
            raise source.unsupported(f"{construct} of a set operation {context}", node.args[clause], keyword)


def check_widths(source: SqlSource, node: exp.SetOperation, widths: list[int]) -> None:
    if len(set(widths)) > 1:
        raise source.unsupported(
            f"{set_operation_name(node)} of SELECTs with {widths[0]} and "
            f"{next(w for w in widths if w != widths[0])} columns", node,
            set_operation_name(node).split()[0], where="inside")


def _null_lifts(items: list[FromItem]) -> Expr:
    """The columns of the items bound to NULL (the padding of an outer join's unmatched rows)."""
    return prod(*(lift(c.var, NULL) for item in items for c in item.columns if c.var is not None))


def _star_qualifier(node: exp.Expression) -> str | None:
    """'' for `*`, the qualifier for `t.*`, None for anything else."""
    if isinstance(node, exp.Star):
        return ""
    if isinstance(node, exp.Column) and isinstance(node.this, exp.Star):
        return node.table
    return None


def _alias_columns(node: exp.Expression) -> list[str]:
    alias = node.args.get("alias")
    return [c.name for c in alias.columns] if isinstance(alias, exp.TableAlias) else []


def spark_auto_name(node: exp.Expression) -> str:
    """Spark's name for an unaliased expression, best effort: `sum(a)`, `count(1)`, `(a + b)`."""

    def plain(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
            return exp.column(n.name)
        if isinstance(n, exp.Count) and isinstance(n.this, exp.Star):
            return exp.Anonymous(this="count", expressions=[exp.Literal.number(1)])
        return n

    text = node.transform(plain).sql(dialect=DIALECT, normalize_functions="lower")
    return f"({text})" if isinstance(node, exp.Binary) else text
