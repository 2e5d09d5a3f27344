"""What the whole query shares while it is read (its tables, its variables' names) and the scope of one
SELECT: its FROM items, their columns, and its ON/WHERE conditions."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from sqlglot import exp

from spark_ivm.calculus.expressions import Expr, Rel, Var, lift
from spark_ivm.errors import UnknownColumnError
from spark_ivm.frontend.source import DIALECT, SqlSource
from spark_ivm.frontend.view_query import ROW_COUNT


# ---------------------------------------------------------------------------------------------------
# Tables and variables


class Catalog:
    """Tables by case-insensitive name: the schema key and its column names in order, and the positions
    of its columns declared NOT NULL."""

    def __init__(self, schemas: Mapping[str, Sequence[object]]):
        self._tables = {key.lower(): (key, tuple(_column_name(c) for c in columns))
                        for key, columns in schemas.items()}
        self._not_null = {key: frozenset(i for i, c in enumerate(columns) if _declared_not_null(c))
                          for key, columns in schemas.items()}

    def not_null(self, key: str) -> frozenset[int]:
        """The positions of the columns of the table (by schema key) that hold no NULL."""
        return self._not_null.get(key, frozenset())

    def lookup(self, parts: Sequence[str]) -> tuple[str, tuple[str, ...]] | None:
        """The table named by qualified `parts` (catalog, db, table): the longest name present wins."""
        for i in range(len(parts)):
            found = self._tables.get(".".join(parts[i:]).lower())
            if found:
                return found
        return None


def _declared_not_null(column: object) -> bool:
    """A column given as (name, type, nullable) with nullable false, or as an object whose `nullable` is
    false (a Spark StructField)."""
    if isinstance(column, (tuple, list)):
        return len(column) > 2 and column[2] is False
    return getattr(column, "nullable", True) is False


def _column_name(column: object) -> str:
    if isinstance(column, str):
        return column
    if isinstance(column, (tuple, list)):
        return str(column[0])
    return str(getattr(column, "name"))


PLACEHOLDER = "\x00"  # prefix of names not settled yet; no SQL identifier holds it
_AGGREGATE_NAME = re.compile(rf"^({ROW_COUNT}|{ROW_COUNT}_r\d*|(sum|nn|min|max|cntd|sumd|avgd)_\d+)$")


class VariableNames:
    """Hands out placeholder variables while the query is read and settles their names at the end."""

    def __init__(self):
        self._columns: list[tuple[str, str, str]] = []  # (placeholder, FROM item alias, column)
        self._generated: list[tuple[str, str]] = []  # (placeholder, stem)
        self._copies: list[tuple[str, str]] = []  # (placeholder, placeholder of the original)

    def for_column(self, alias: str, column: str) -> str:
        placeholder = self._next()
        self._columns.append((placeholder, _identifier(alias), _identifier(column)))
        return placeholder

    def generated(self, stem: str = "g") -> str:
        """A variable of no column: `g1`, `g2`… (computed keys), `x1`… (aggregated values), `u1`…
        (the columns of a set operation), numbered per stem."""
        placeholder = self._next()
        self._generated.append((placeholder, stem))
        return placeholder

    def copy(self, original: str) -> str:
        """A variable for the same column in a renamed copy of a body (an outer join's match count):
        named after the original, `b_2`, `b_3`…"""
        placeholder = self._next()
        self._copies.append((placeholder, original))
        return placeholder

    def _next(self) -> str:
        return f"{PLACEHOLDER}v{len(self._columns) + len(self._generated) + len(self._copies)}"

    def final_names(self) -> dict[str, str]:
        owners = Counter(column for _, _, column in self._columns)
        taken: set[str] = set()
        names = {}
        for placeholder, alias, column in self._columns:
            unique = owners[column] == 1 and not _AGGREGATE_NAME.match(column)
            names[placeholder] = _fresh(column if unique else f"{alias}_{column}", taken)
        numbers: Counter[str] = Counter()
        for placeholder, stem in self._generated:
            numbers[stem] += 1
            while f"{stem}{numbers[stem]}" in taken:
                numbers[stem] += 1
            names[placeholder] = _fresh(f"{stem}{numbers[stem]}", taken)
        for placeholder, original in self._copies:  # an original comes before its copies
            names[placeholder] = _fresh(names[original], taken)
        return names


def _identifier(name: str) -> str:
    """A lowercase name the calculus text can carry: letters, digits and underscores."""
    text = re.sub(r"[^a-z0-9_]", "_", name.lower())
    return f"_{text}" if not text or text[0].isdigit() else text


def _fresh(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken or _AGGREGATE_NAME.match(candidate):
        n += 1
        candidate = f"{name}_{n}"
    taken.add(candidate)
    return candidate


@dataclass
class Translation:
    """What the whole query shares while it is read."""

    source: SqlSource
    catalog: Catalog
    names: VariableNames = field(default_factory=VariableNames)
    relations: list[str] = field(default_factory=list)  # base relations read, in FROM order


# ---------------------------------------------------------------------------------------------------
# FROM items and the scope of one SELECT


@dataclass
class SourceColumn:
    """A column a FROM item offers: a variable, or a computed value bound by a lift when first used."""

    name: str
    var: str | None = None
    value: Expr | None = None


@dataclass
class FromItem:
    alias: str  # lowercase; a table without alias goes by its own name
    columns: list[SourceColumn]
    relations: list[Rel]
    factors: list[Expr]  # a derived table's conditions, then the lifts of its computed columns
    names: VariableNames

    def variable(self, column: SourceColumn) -> Var:
        if column.var is None:
            column.var = self.names.for_column(self.alias, column.name)
            self.factors.append(lift(column.var, column.value))
        return Var(column.var)


class Scope:
    """The FROM items of one SELECT and its ON/WHERE conditions.

    The scope of a subquery has the enclosing query's scope as `outer`: a column that no FROM item of
    the subquery has is looked up there, and its variable is a correlation variable of the subquery.
    """

    def __init__(self, source: SqlSource, outer: "Scope | None" = None):
        self.source = source
        self.items: list[FromItem] = []
        self.conditions: list[Expr] = []
        self.outer = outer
        self.correlated: list[str] = []  # variables of enclosing queries used here, in order of use

    def relations(self) -> list[Rel]:
        return [r for item in self.items for r in item.relations]

    def factors(self) -> list[Expr]:
        return [f for item in self.items for f in item.factors] + self.conditions

    def resolve(self, column: exp.Column) -> Expr:
        if self.outer is not None and not self._matches(column) and self.outer.knows(column):
            value = self.outer.resolve(column)
            if value.name not in self.correlated:
                self.correlated.append(value.name)
            return value
        item, source_column = self.lookup(column)
        return item.variable(source_column)

    def knows(self, column: exp.Column) -> bool:
        """Whether this scope or an enclosing one has the column."""
        return bool(self._matches(column)) or (self.outer is not None and self.outer.knows(column))

    def _matches(self, column: exp.Column) -> list[tuple[FromItem, SourceColumn]]:
        name = column.name.lower()
        items = [i for i in self.items if i.alias == column.table.lower()] if column.table else self.items
        return [(item, c) for item in items for c in item.columns if c.name.lower() == name]

    def lookup(self, column: exp.Column) -> tuple[FromItem, SourceColumn]:
        name = column.name.lower()
        items = self._items_named(column.table, column) if column.table else self.items
        matches = [(item, c) for item in items for c in item.columns if c.name.lower() == name]
        if not matches:
            raise self.source.located(UnknownColumnError, f"unknown column {column.sql(dialect=DIALECT)}", column)
        if len(matches) > 1:
            owners = " and ".join(dict.fromkeys(item.alias for item, _ in matches))
            raise self.source.located(
                UnknownColumnError, f"ambiguous column {column.sql(dialect=DIALECT)} (in {owners})", column)
        return matches[0]

    def _items_named(self, qualifier: str, column: exp.Column) -> list[FromItem]:
        items = [item for item in self.items if item.alias == qualifier.lower()]
        if not items:
            raise self.source.located(
                UnknownColumnError, f"unknown column {column.sql(dialect=DIALECT)} (no FROM item {qualifier})",
                column)
        return items

    def star(self, qualifier: str | None, node: exp.Expression) -> list[tuple[FromItem, SourceColumn]]:
        items = self._items_named(qualifier, node) if qualifier else self.items
        return [(item, c) for item in items for c in item.columns]
