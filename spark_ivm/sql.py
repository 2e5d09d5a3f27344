"""The SQL front end: a Spark SQL query → `ViewQuery` (calculus aggregates and how to read them).

    translate("SELECT SUM(a) FROM R, S WHERE R.b = S.b", {"R": ["a", "b"], "S": ["b", "c"]})

The FROM clause, derived tables and CTEs included, becomes one product: the relation atoms first, in
FROM order, then the condition factors (those of derived tables and the lifts of their computed
columns, ON, WHERE, then the lifts of computed group keys), so that every variable is bound before it
is used. A condition is a 0/1 factor: AND is a product, OR is inclusion–exclusion `A + B − A*B` (of up
to four conditions; a longer OR of conditions on the row's values is one test, see disjunction_of), NOT
is pushed down to the comparisons. The row count, sums and non-NULL counts are `AggSum`s of that body
over the group keys; the view's columns, HAVING and ORDER BY are Spark SQL over keys and aggregates.

Chains (a + b - c …, a || b …, AND, OR, UNION ALL …) are read in loops, and a chain of more than
LONGEST_NESTED_CHAIN terms becomes a balanced tree, so that a thousand terms cost no deep recursion here
or in the compiler; nesting that exhausts Python's recursion (parentheses, function calls, CASE,
subqueries, a few dozen levels deep) is an UnsupportedQueryError (nested_too_deeply).

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

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Callable, Mapping, Sequence

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError as SqlglotParseError
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from spark_ivm import functions
from spark_ivm.analysis import rename
from spark_ivm.calculus import (
    NEGATED_CMP, NULL, ONE, ZERO, AggSum, Const, DeltaRel, Exists, Expr, Lift, MapRef, Rel, Var, aggsum, cmp, fn,
    lift, neg, prod, rel, sum_,
)
from spark_ivm.errors import (
    NonDeterministicError, ParseError, UnknownColumnError, UnknownTableError, UnsupportedQueryError,
)
from spark_ivm.query import ROW_COUNT, Aggregate, OutputColumn, ViewQuery
from spark_ivm.udfs.registry import UDFS

__all__ = ["translate"]

DIALECT = "spark"


def translate(sql: str, schemas: Mapping[str, Sequence[object]]) -> ViewQuery:
    """The view query of a Spark SQL SELECT over tables with the given columns (names, in order)."""
    try:
        return _translate(sql, schemas)
    except RecursionError:
        raise nested_too_deeply() from None


def nested_too_deeply() -> UnsupportedQueryError:
    """The error for a query whose nesting exhausts Python's recursion: parsing, translating and compiling
    recurse once or more per level of parentheses, subqueries, function calls or CASE, not per term of a
    chain (a + b + c …, AND, OR: those are read in a loop)."""
    return UnsupportedQueryError(
        "expressions nested this deeply",
        detail="parentheses, subqueries, function calls or CASE nested a few dozen levels deep or more; "
               "write the expression with fewer levels (long chains of +, ||, AND, OR are fine)")


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


# ---------------------------------------------------------------------------------------------------
# Source text, parsing and positions


class SqlSource:
    """The query text, its tokens and its statement; tells where a node stands in the text."""

    def __init__(self, text: str):
        self.text = text
        self.tokens = self._tokenize()
        self._check_numbers()
        self.statement = self._parse()

    def _tokenize(self):
        tokenizer = Dialect.get_or_raise(DIALECT).tokenizer()
        try:
            return tokenizer.tokenize(self.text)
        except TokenError as e:
            # The tokenizer knows where the token it could not finish starts; the error only quotes context.
            offset = getattr(getattr(tokenizer, "_core", None), "_start", None)
            offset = e.start if offset is None else offset
            detail = re.sub(r" from \d+:\d+$", "", str(e.__cause__ or e))
            raise ParseError(f"cannot read the SQL: {detail}", *self.line_column(offset)) from None

    def _check_numbers(self) -> None:
        """Refuse, as Spark does, a number no Spark type holds: more than 38 digits (DECIMAL's most), or
        beyond DOUBLE's range."""
        for token in self.tokens:
            if token.token_type != TokenType.NUMBER:
                continue
            mantissa, _, exponent = token.text.lower().partition("e")
            digits = len(re.sub(r"\D", "", mantissa).lstrip("0"))
            if (digits > _MOST_DIGITS and not exponent) or (exponent and _out_of_double(token.text)):
                raise ParseError(f"the number {token.text[:40]}{'…' if len(token.text) > 40 else ''} is out of "
                                 f"range (at most {_MOST_DIGITS} digits, or a DOUBLE)", *self.line_column(token.start))

    def _parse(self) -> exp.Expression:
        try:
            statements = Dialect.get_or_raise(DIALECT).parser().parse(self.tokens, self.text)
        except SqlglotParseError as e:
            raise self._parse_error(e) from None
        except RecursionError:  # the parser recurses about twenty times per level of parentheses
            raise nested_too_deeply() from None
        except (ValueError, TypeError, ArithmeticError, AttributeError, IndexError, KeyError) as e:
            # sqlglot fails so on some malformed text (CAST of a number it cannot read, say)
            raise ParseError(f"cannot parse the SQL: {type(e).__name__} {str(e)[:80]}") from None
        statements = [s for s in statements if s is not None]
        if not statements:
            raise ParseError("the SQL text holds no statement")
        if len(statements) > 1:
            raise self.unsupported("several statements", statements[1], statements[1].key.upper())
        return statements[0]

    @staticmethod
    def _parse_error(e: SqlglotParseError) -> ParseError:
        if not e.errors:
            return ParseError(str(e))
        first = e.errors[0]
        line, column, highlight = first.get("line"), first.get("col"), first.get("highlight") or ""
        if column is not None and highlight and "\n" not in highlight:
            column = max(column - len(highlight) + 1, 1)  # sqlglot points at the token's last character
        description = first.get("description") or str(e)
        missing_part = re.match(r"Required keyword: '\w+' missing for <class '[\w.]*\.(\w+)'>", description)
        if missing_part:
            description = f"incomplete {missing_part[1].upper()}" + (f" at {highlight!r}" if highlight else "")
        return ParseError(description, line, column)

    def line_column(self, offset: int | None) -> tuple[int | None, int | None]:
        if offset is None:
            return None, None
        line = self.text.count("\n", 0, offset) + 1
        return line, offset - (self.text.rfind("\n", 0, offset) + 1) + 1

    def position(self, node: exp.Expression | None, keyword: str | None = None,
                 where: str = "before") -> tuple[int | None, int | None]:
        """(line, column) of a node: of `keyword` near it when given (`where` it is searched first:
        "before" the node's first located token or "inside" it), else of its first located token."""
        span = _span_near(node) if node is not None else None
        offset = self._keyword_offset(keyword, span, where) if keyword else None
        if offset is None and span is not None:
            offset = span[0]
        return self.line_column(offset)

    def _keyword_offset(self, keyword: str, span: tuple[int, int] | None, where: str) -> int | None:
        words = {keyword.upper(), keyword.split()[0].upper()}
        offsets = [t.start for t in self.tokens
                   if t.text.upper() in words and t.token_type not in (TokenType.STRING, TokenType.IDENTIFIER)]
        if not offsets:
            return None
        if span is None:
            return offsets[0]
        before = [o for o in offsets if o < span[0]][-1:]
        inside = [o for o in offsets if span[0] <= o <= span[1]][:1]
        after = [o for o in offsets if o > span[1]][:1]
        for candidates in ((before, inside) if where == "before" else (inside, before)) + (after,):
            if candidates:
                return candidates[0]
        return None

    def unsupported(self, construct: str, node: exp.Expression | None, keyword: str | None = None,
                    where: str = "before", detail: str = "") -> UnsupportedQueryError:
        return UnsupportedQueryError(construct, *self.position(node, keyword, where), detail=detail)

    def located(self, error_class: type[Exception], message: str, node: exp.Expression | None) -> Exception:
        line, column = self.position(node)
        where = f" at line {line}, column {column}" if line is not None else ""
        error = error_class(f"{message}{where}")
        error.line, error.column = line, column
        return error

    def function_name(self, node: exp.Func) -> str:
        """A function's name as written in the query, lowercase."""
        if isinstance(node, exp.Anonymous):
            return str(node.this).lower()
        meta = node._meta or {}
        if "start" in meta:
            return self.text[meta["start"]:meta["end"] + 1].lower()
        return node.sql_name().lower()


_MOST_DIGITS = 38


def _out_of_double(text: str) -> bool:
    try:
        return math.isinf(float(text))
    except (ValueError, OverflowError):  # not a plain number: sqlglot's NUMBER tokens include 1e5D, 10L …
        return False


def _own_span(node: exp.Expression) -> tuple[int, int] | None:
    meta = node._meta
    return (meta["start"], meta["end"]) if meta and "start" in meta else None


def _span(node: exp.Expression) -> tuple[int, int] | None:
    spans = [s for s in map(_own_span, node.walk()) if s]
    return (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None


def _span_near(node: exp.Expression) -> tuple[int, int] | None:
    """The text span of a node, or of its nearest ancestor when nothing in it carries a position."""
    while node is not None:
        span = _span(node)
        if span:
            return span
        node = node.parent
    return None


# ---------------------------------------------------------------------------------------------------
# Constructs refused wherever they appear


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
    if isinstance(node, exp.Exists) and _subquery_level(node) > MAX_SUBQUERY_LEVELS:
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
    while _own_span(written) is None and isinstance(written.parent, exp.Func):
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
    if _in_expression(subquery) and _subquery_level(subquery) > MAX_SUBQUERY_LEVELS:
        return _nesting_problem(source, subquery, "SELECT")
    return None


# Subqueries in expressions (scalar, IN, EXISTS) nested deeper than this are refused: the delta of each level
# holds the deltas of every level inside it, so that compiling takes several times longer per level.
MAX_SUBQUERY_LEVELS = 4


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
        f"subqueries in expressions nested more than {MAX_SUBQUERY_LEVELS} levels deep", node, keyword,
        where="inside" if keyword == "SELECT" else "before",
        detail="the changes of each level are derived from those of all the levels inside it; write an inner "
               "level as a join with a derived table (a subquery in FROM), which may nest deeper")


# ---------------------------------------------------------------------------------------------------
# Tables and variables


class Catalog:
    """Tables by case-insensitive name: the schema key and its column names in order."""

    def __init__(self, schemas: Mapping[str, Sequence[object]]):
        self._tables = {key.lower(): (key, tuple(_column_name(c) for c in columns))
                        for key, columns in schemas.items()}

    def lookup(self, parts: Sequence[str]) -> tuple[str, tuple[str, ...]] | None:
        """The table named by qualified `parts` (catalog, db, table): the longest name present wins."""
        for i in range(len(parts)):
            found = self._tables.get(".".join(parts[i:]).lower())
            if found:
                return found
        return None


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


# ---------------------------------------------------------------------------------------------------
# Values and conditions


_COMPARISONS = {exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
                exp.NullSafeEQ: "is", exp.NullSafeNEQ: "is not"}

_ARITHMETIC = {exp.Add: "+", exp.Sub: "-", exp.Div: "/", exp.Mod: "%", exp.IntDiv: "div", exp.DPipe: "||"}

_PATTERN_MATCHES = {exp.Like: "like", exp.ILike: "ilike", exp.RegexpLike: "rlike"}

# sqlglot class → (calculus function, allowed argument counts)
_FUNCTIONS = {
    exp.Upper: ("upper", (1,)), exp.Lower: ("lower", (1,)), exp.Length: ("length", (1,)),
    exp.Abs: ("abs", (1,)), exp.Year: ("year", (1,)), exp.Month: ("month", (1,)), exp.Day: ("day", (1,)),
    exp.DayOfMonth: ("day", (1,)), exp.Substring: ("substring", (2, 3)), exp.Coalesce: ("coalesce", None),
    exp.Concat: ("concat", None), exp.Round: ("round", (1, 2)), exp.Floor: ("floor", (1,)),
    exp.Ceil: ("ceil", (1,)), exp.Least: ("least", None), exp.Greatest: ("greatest", None),
    exp.DateDiff: ("datediff", (2,)), exp.AddMonths: ("add_months", (2,)), exp.Nullif: ("nullif", (2,)),
    exp.TsOrDsToDate: ("to_date", (1,)),
}

_CAST_TYPES = {
    "INT": "int", "BIGINT": "bigint", "SMALLINT": "smallint", "TINYINT": "tinyint", "DOUBLE": "double",
    "FLOAT": "float", "DECIMAL": "decimal", "TEXT": "string", "VARCHAR": "string", "CHAR": "string",
    "DATE": "date", "TIMESTAMP": "timestamp", "TIMESTAMPTZ": "timestamp",
}

_EXTRACT_FIELDS = {"YEAR": "year", "MONTH": "month", "DAY": "day"}

_INTERVAL_UNITS = {"DAY": ("days", 1), "WEEK": ("days", 7), "MONTH": ("months", 1), "YEAR": ("months", 12)}


class ValueTranslator:
    """SQL value expressions → calculus values; SQL predicates → 0/1 condition factors.

    `nested` translates the subqueries of the expressions (scalar, EXISTS, IN) into lifts of nested
    aggregates; `aggregate`, when set, translates aggregate calls (in a subquery's select list)."""

    def __init__(self, source: SqlSource, resolve: Callable[[exp.Column], Expr], nested=None):
        self.source = source
        self.resolve = resolve
        self.nested = nested
        self.aggregate: Callable[[exp.AggFunc], Expr] | None = None

    # -- values ------------------------------------------------------------------------------------

    def value(self, node: exp.Expression) -> Expr:
        if isinstance(node, exp.Paren):
            return self.value(node.this)
        if isinstance(node, exp.Column):
            if isinstance(node.this, exp.Star):
                raise self.source.unsupported("* outside SELECT list or COUNT(*)", node)
            return self.resolve(node)
        if isinstance(node, (exp.Literal, exp.Null, exp.Boolean)):
            return Const(self._literal(node))
        if isinstance(node, exp.Neg):
            return self._negation(node)
        if isinstance(node, exp.Mul):
            return prod(*(self.value(factor) for factor in _left_chain(node, exp.Mul)))
        if isinstance(node, (exp.Add, exp.Sub)) and _interval_operand(node):
            return self._date_arithmetic(node)
        if isinstance(node, (exp.Add, exp.Sub)):
            return self._sum_chain(node)
        if isinstance(node, exp.DPipe):
            return _chained("||", [self.value(part) for part in _left_chain(node, exp.DPipe)])
        if type(node) in _ARITHMETIC:
            return fn(_ARITHMETIC[type(node)], self.value(node.this), self.value(node.expression))
        if isinstance(node, (exp.Cast, exp.TryCast)):
            return self._cast(node)
        if isinstance(node, exp.Case):
            return self._case(node)
        if isinstance(node, exp.If):
            return self._if(node)
        if isinstance(node, exp.Subquery) and self.nested is not None:
            return self.nested.scalar(node)
        if isinstance(node, exp.AggFunc) and self.aggregate is not None:
            return self.aggregate(node)
        if isinstance(node, exp.AggFunc):
            raise self.source.unsupported(f"aggregate {self.source.function_name(node).upper()} here", node,
                                          detail="aggregates belong in the SELECT list or HAVING of the view")
        if isinstance(node, (exp.Predicate, exp.Connector, exp.Not)):
            raise self.source.unsupported("a condition used as a value", node,
                                          detail="use CASE WHEN … THEN 1 ELSE 0 END")
        if isinstance(node, exp.Func):
            return self._function(node)
        raise self.source.unsupported(f"expression {node.key.upper()}", node)

    def _sum_chain(self, node: exp.Add | exp.Sub) -> Expr:
        """a + b - c + …, its terms read in a loop."""
        signed = []  # (operator, term), right to left
        while isinstance(node, (exp.Add, exp.Sub)) and not _interval_operand(node):
            signed.append(("+" if isinstance(node, exp.Add) else "-", node.expression))
            node = node.this
        signed.append(("+", node))
        terms = [(op, self.value(term)) for op, term in reversed(signed)]
        if len(terms) <= LONGEST_NESTED_CHAIN:
            total = terms[0][1]
            for op, term in terms[1:]:
                total = fn(op, total, term)
            return total
        added = _chained("+", [term for op, term in terms if op == "+"])
        subtracted = [term for op, term in terms if op == "-"]
        return fn("-", added, _chained("+", subtracted)) if subtracted else added

    def _literal(self, node: exp.Expression) -> object:
        if isinstance(node, exp.Null):
            return None
        if isinstance(node, exp.Boolean):
            return 1 if node.this else 0
        if node.is_string:
            return node.this
        text = node.this
        try:
            if re.fullmatch(r"\d+", text):
                return int(text)
            if re.search(r"[eE]", text):
                return float(text)
            return Decimal(text)  # Spark types a literal with a decimal point as DECIMAL
        except (ValueError, ArithmeticError):  # decimal.InvalidOperation is an ArithmeticError
            raise ParseError(f"invalid number {text[:40]!r}", *self.source.position(node)) from None

    def _negation(self, node: exp.Neg) -> Expr:
        inner = self.value(node.this)
        if isinstance(inner, Const) and isinstance(inner.value, (int, float, Decimal)):
            return Const(-inner.value)
        return fn("neg", inner)

    def _cast(self, node: exp.Cast) -> Expr:
        if node.args.get("safe"):
            raise self.source.unsupported("TRY_CAST", node, "TRY_CAST")
        to = node.args["to"]
        type_name = to.this.name if isinstance(to.this, exp.DataType.Type) else str(to.this)
        target = _CAST_TYPES.get(type_name)
        if target is None:
            raise self.source.unsupported(f"CAST to {to.sql(dialect=DIALECT)}", node, "CAST")
        args = [self.value(node.this)]
        if target == "decimal":
            params = [int(p.this.this) for p in to.expressions]
            args += [Const(p) for p in (params + [10, 0][len(params):])[:2]]
        return self._fold(f"cast_{target}", args, node)

    def _fold(self, name: str, args: list[Expr], node: exp.Expression) -> Expr:
        """A call of constants is computed now: `DATE '1998-12-01'` is a date, not a cast. One Python cannot
        compute ('1994-01-01' + INTERVAL 1 YEAR: Spark casts the string) is left to Spark."""
        if not all(isinstance(a, Const) for a in args):
            return fn(name, *args)
        try:
            result = functions.call(name, [a.value for a in args])
        except (TypeError, ValueError, AttributeError, ArithmeticError):
            return fn(name, *args)
        if result is None and args[0].value is not None:
            raise ParseError(f"invalid literal {node.sql(dialect=DIALECT)}", *self.source.position(node))
        return Const(result)

    def _case(self, node: exp.Case) -> Expr:
        subject = self.value(node.this) if node.this is not None else None
        args: list[Expr] = []
        for branch in node.args.get("ifs") or []:
            if subject is None:
                args.append(self.condition(branch.this))
            else:
                args.append(comparison("=", subject, self.value(branch.this)))
            args.append(self.value(branch.args["true"]))
        default = node.args.get("default")
        if default is not None:
            args.append(self.value(default))
        return fn("case", *args)

    def _if(self, node: exp.If) -> Expr:
        args = [self.condition(node.this), self.value(node.args["true"])]
        if node.args.get("false") is not None:
            args.append(self.value(node.args["false"]))
        return fn("case", *args)

    def _date_arithmetic(self, node: exp.Add | exp.Sub) -> Expr:
        interval, date_node = _interval_operand(node)
        if isinstance(node, exp.Sub) and interval is node.this:
            raise self.source.unsupported("INTERVAL minus a value", node, "INTERVAL")
        amount, unit = self._interval(interval)
        if isinstance(node, exp.Sub):
            amount = -amount
        name = "date_add_days" if unit == "days" else "add_months"
        return self._fold(name, [self.value(date_node), Const(amount)], node)

    def _interval(self, node: exp.Interval) -> tuple[int, str]:
        unit = (node.unit.name if node.unit is not None else "").upper().rstrip("S")
        amount = node.this
        if unit not in _INTERVAL_UNITS:
            raise self.source.unsupported(f"INTERVAL … {unit or 'without a unit'}", node, "INTERVAL",
                                          detail="only DAY, WEEK, MONTH or YEAR intervals")
        if not isinstance(amount, exp.Literal) or not re.fullmatch(r"-?\d{1,9}", amount.this.strip()):
            raise self.source.unsupported("INTERVAL of something else than a whole number (of 9 digits at most)",
                                          node, "INTERVAL")
        kind, factor = _INTERVAL_UNITS[unit]
        return int(amount.this) * factor, kind

    def _function(self, node: exp.Func) -> Expr:
        name = self.source.function_name(node)
        if isinstance(node, exp.Extract):
            field_name = node.this.name.upper()
            if field_name not in _EXTRACT_FIELDS:
                raise self.source.unsupported(f"EXTRACT({field_name} …)", node)
            return fn(_EXTRACT_FIELDS[field_name], self.value(node.expression))
        if isinstance(node, exp.Trim):
            return self._trim(node)
        if isinstance(node, exp.TsOrDsAdd):
            return self._date_add(node, name)
        if name in UDFS:
            return fn(name, *(self.value(a) for a in _arguments(node)))
        known = _FUNCTIONS.get(type(node))
        if known is None and isinstance(node, exp.Anonymous):
            raise self.source.unsupported(
                f"function {name.upper()}", node,
                detail="not a built-in; a Python function must be declared with @spark_ivm.udf, and the module "
                       "that declares it imported, before a view uses it")
        if known is None or (isinstance(node, exp.TsOrDsToDate) and node.args.get("format")):
            raise self.source.unsupported(f"function {name.upper()}", node)
        calculus_name, arities = known
        args = _arguments(node)
        if arities is not None and len(args) not in arities:
            raise self.source.unsupported(f"function {name.upper()} with {len(args)} arguments", node)
        return fn(calculus_name, *(self.value(_unwrap_date_conversion(a)) for a in args))

    def _trim(self, node: exp.Trim) -> Expr:
        if node.args.get("expression") is not None:
            raise self.source.unsupported("TRIM of characters other than spaces", node, "TRIM")
        position = str(node.args.get("position") or "BOTH").upper()
        name = {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(position, "trim")
        return fn(name, self.value(node.this))

    def _date_add(self, node: exp.TsOrDsAdd, name: str) -> Expr:
        if str(node.args.get("unit") or "DAY").upper() != "DAY":
            raise self.source.unsupported(f"function {name.upper()} with a unit", node)
        date, days = self.value(node.this), node.expression
        # sqlglot reads date_sub(d, n) as date_add(d, n * -1)
        if name == "date_sub" and isinstance(days, exp.Mul) and self.value(days.expression) == Const(-1):
            return fn("date_sub", date, self.value(days.this))
        return fn("date_add", date, self.value(days))

    # -- conditions --------------------------------------------------------------------------------

    def condition(self, node: exp.Expression, negated: bool = False) -> Expr:
        """A 0/1 factor that is 1 where the predicate (or its negation) is true, 0 where false or NULL."""
        if isinstance(node, exp.Paren):
            return self.condition(node.this, negated)
        if isinstance(node, exp.Not):
            return self.condition(node.this, not negated)
        if isinstance(node, (exp.And, exp.Or)):
            parts = [self.condition(part, negated) for part in _connected(node)]
            if isinstance(node, exp.And) != negated:
                return prod(*parts)
            try:
                return disjunction_of(parts)
            except UnsupportedQueryError as e:
                raise self.source.unsupported(e.construct, node, "AND" if negated else "OR", where="inside") from None
        if type(node) in _COMPARISONS:
            op = NEGATED_CMP[_COMPARISONS[type(node)]] if negated else _COMPARISONS[type(node)]
            if self.nested is not None:
                extreme = self.nested.extreme_comparison(op, node.this, node.expression)
                if extreme is not None:
                    return extreme
            return comparison(op, self.value(node.this), self.value(node.expression))
        if isinstance(node, exp.Exists) and self.nested is not None:
            return self.nested.exists(node, negated)
        if isinstance(node, exp.Is):
            op = "is not" if negated else "is"
            return comparison(op, self.value(node.this), self.value(node.expression))
        if isinstance(node, exp.Between):
            return self._between(node, negated)
        if isinstance(node, exp.In):
            return self._in(node, negated)
        if isinstance(node, exp.Escape):
            raise self.source.unsupported("LIKE … ESCAPE", node, "ESCAPE", where="inside")
        if type(node) in _PATTERN_MATCHES:
            negated = negated != bool(node.args.get("negate"))
            test = fn(_PATTERN_MATCHES[type(node)], self.value(node.this), self.value(node.expression))
            return comparison("=", test, Const(0 if negated else 1))
        if isinstance(node, exp.Boolean):
            return ONE if bool(node.this) != negated else ZERO
        # A boolean-valued column or function: Spark compares TRUE = 1 and FALSE = 0.
        return comparison("=", self.value(node), Const(0 if negated else 1))

    def _between(self, node: exp.Between, negated: bool) -> Expr:
        x, low, high = self.value(node.this), self.value(node.args["low"]), self.value(node.args["high"])
        if not negated:
            return prod(comparison(">=", x, low), comparison("<=", x, high))
        below, above = comparison("<", x, low), comparison(">", x, high)
        if _ordered_constants(low, high):
            return sum_(below, above)  # both cannot hold at once
        return disjunction(below, above)

    def _in(self, node: exp.In, negated: bool) -> Expr:
        if node.args.get("query") is not None and self.nested is not None:
            return self.nested.in_subquery(node, negated)
        values = node.expressions
        if not values or node.args.get("unnest") or node.args.get("field"):
            raise self.source.unsupported("IN of something else than a value list", node, "IN", where="inside")
        test = fn("in", self.value(node.this), *(self.value(v) for v in values))
        return comparison("=", test, Const(0 if negated else 1))


def comparison(op: str, left: Expr, right: Expr) -> Expr:
    """`{left op right}`, computed now when both sides are constants."""
    if isinstance(left, Const) and isinstance(right, Const):
        folded = _compare_constants(op, left.value, right.value)
        if folded is not None:
            return ONE if folded else ZERO
    return cmp(op, left, right)


def _compare_constants(op: str, a: object, b: object) -> bool | None:
    if op in ("is", "is not"):
        same = a == b if a is not None and b is not None else a is b
        return same if op == "is" else not same
    if a is None or b is None:
        return False
    try:
        return {"=": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    except TypeError:
        return None


def disjunction(a: Expr, b: Expr) -> Expr:
    """A OR B for 0/1 conditions, by inclusion–exclusion: A + B − A·B."""
    if a == ZERO:
        return b
    if b == ZERO:
        return a
    return sum_(a, b, neg(prod(a, b)))


# An OR of n conditions by inclusion–exclusion has 2^n − 1 terms: longer ORs of conditions that read no
# relation become one test instead (see disjunction_of).
MOST_DISJUNCTS = 4


def disjunction_of(parts: Sequence[Expr]) -> Expr:
    """The OR of 0/1 conditions: by inclusion–exclusion when there are at most MOST_DISJUNCTS, which keeps
    a join condition (R.b = S.b OR …) usable as one; else those that read no relation become one condition,
    CASE WHEN c1 THEN 1 WHEN c2 THEN 1 … ELSE 0 END = 1, of as many terms as there are conditions. (A
    subquery's value is bound by a lift before the conditions, so that EXISTS (…) OR … reads no relation
    either: more than MOST_DISJUNCTS conditions that do are refused.)"""
    if len(parts) > MOST_DISJUNCTS:
        plain = [p for p in parts if not reads_relations(p)]
        reading = [p for p in parts if reads_relations(p)]
        if len(reading) > MOST_DISJUNCTS:
            raise UnsupportedQueryError(f"OR of more than {MOST_DISJUNCTS} conditions that read relations")
        if len(plain) > 1:
            parts = [cmp("=", fn("case", *(x for p in plain for x in (p, ONE)), ZERO), ONE)] + reading
    result = ZERO
    for part in parts:
        result = disjunction(result, part)
    return result


_READING = (Rel, DeltaRel, MapRef, AggSum, Exists, Lift)


def reads_relations(condition: Expr) -> bool:
    """Whether a condition reads a relation or binds a variable (a subquery's value), so that it cannot be
    computed from the row's values alone."""
    return any(isinstance(x, _READING) for x in condition.walk())


# Chains of + - || of at most this many terms keep the nesting SQL gives them, (a + b) + c; longer ones are
# nested as balanced trees, so that an expression of a thousand terms is ten levels deep, not a thousand
# (every pass over the calculus, compiling, evaluating, printing, recurses once per level).
LONGEST_NESTED_CHAIN = 16


def _chained(name: str, operands: Sequence[Expr]) -> Expr:
    """The operands combined by an associative function of two arguments, left to right: nested as
    written up to LONGEST_NESTED_CHAIN operands, as a balanced tree beyond."""
    if len(operands) <= LONGEST_NESTED_CHAIN:
        result = operands[0]
        for operand in operands[1:]:
            result = fn(name, result, operand)
        return result
    level = list(operands)
    while len(level) > 1:
        level = [fn(name, *level[i:i + 2]) if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
    return level[0]


def _left_chain(node: exp.Expression, kind: type) -> list[exp.Expression]:
    """The operands of a chain a op b op c …, which sqlglot nests to the left: ((a op b) op c), read in a
    loop so that a chain of a thousand terms costs no recursion."""
    operands = []
    while type(node) is kind:
        operands.append(node.expression)
        node = node.this
    operands.append(node)
    return operands[::-1]


def _connected(node: exp.And | exp.Or) -> list[exp.Expression]:
    """The operands of a chain of ANDs (or of ORs), parenthesized ones included, left to right."""
    operands, pending = [], [node]
    while pending:
        n = pending.pop()
        while isinstance(n, exp.Paren) and type(n.this) is type(node):
            n = n.this
        if type(n) is type(node):
            pending += [n.expression, n.this]
        else:
            operands.append(n)
    return operands


def _ordered_constants(low: Expr, high: Expr) -> bool:
    return isinstance(low, Const) and isinstance(high, Const) and bool(_compare_constants("<=", low.value, high.value))


def is_not_null(value: Expr) -> Expr:
    return comparison("is not", value, NULL)


def _interval_operand(node: exp.Add | exp.Sub) -> tuple[exp.Interval, exp.Expression] | None:
    if isinstance(node.expression, exp.Interval):
        return node.expression, node.this
    if isinstance(node.this, exp.Interval):
        return node.this, node.expression
    return None


def _arguments(node: exp.Func) -> list[exp.Expression]:
    args: list[exp.Expression] = []
    for key in node.arg_types:
        value = node.args.get(key)
        if isinstance(value, list):
            args.extend(v for v in value if isinstance(v, exp.Expression))
        elif isinstance(value, exp.Expression):
            args.append(value)
    return args


def _unwrap_date_conversion(node: exp.Expression) -> exp.Expression:
    """sqlglot wraps the date argument of year(d), datediff(a, b) … in a to_date the user did not write."""
    if isinstance(node, exp.TsOrDsToDate) and _span(node) == _span(node.this) and not node.args.get("format"):
        return node.this
    return node


# ---------------------------------------------------------------------------------------------------
# One SELECT: its FROM scope and select list


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
        from spark_ivm.sql_nested import NestedQueries

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
                _first_aggregate(e) is not None for e in select.expressions):
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


def _unwrapped(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Subquery) and isinstance(node.this, exp.Query) and not node.alias:
        node = node.this
    return node


def union_all_operands(source: SqlSource, union: exp.SetOperation, context: str) -> list[exp.Select]:
    """The SELECTs of a chain of UNION ALLs, in order; any other set operation is refused."""
    node = _unwrapped(union)
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


def _first_aggregate(node: exp.Expression) -> exp.AggFunc | None:
    """The first aggregate call of the expression's own query (those of its subqueries are theirs)."""
    nested_query = lambda n: n is not node and isinstance(n, (exp.Query, exp.Subquery, exp.Exists))  # noqa: E731
    return next((n for n in node.walk(prune=nested_query) if isinstance(n, exp.AggFunc)), None)


def reject_aggregates(source: SqlSource, node: exp.Expression, construct: str) -> None:
    aggregate = _first_aggregate(node)
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


def _has_column(node: exp.Expression) -> bool:
    return any(isinstance(n, exp.Column) for n in node.walk())


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

    def definitions(self, keys: tuple[str, ...], body: Expr,
                    variable_names: Mapping[str, str]) -> tuple[list[Aggregate], dict[str, str]]:
        """The aggregates in order (row count first) and each placeholder's final name; an aggregate
        whose definition equals an earlier one is that one."""
        aggregates = [Aggregate(ROW_COUNT, aggsum(keys, body))]
        name_of: dict[tuple[Expr, str | None], str] = {(aggregates[0].definition, None): ROW_COUNT}
        names: dict[str, str] = {}
        number = 0
        for value in self.arguments:
            final_value = rename(value, variable_names)
            candidates = []  # (kind, definition, value keys, reduce)
            for kind in ("sum", "nn"):
                if kind in self._wanted[value]:
                    factor = final_value if kind == "sum" else is_not_null(final_value)
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


def _quoted(name: str) -> exp.Column:
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
            outputs = [(item.name, _quoted(self._add_key(self.from_.item_value(item)))) for item in self.items]
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
        return any(_first_aggregate(node) is not None for node in nodes if node is not None)

    def _is_grouped(self) -> bool:
        having = self.select.args.get("having")
        return (self.select.args.get("group") is not None or having is not None
                or any(_first_aggregate(item.node) is not None for item in self.items if item.node is not None))

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
        return _quoted(self.key_of_value[value])

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
                return _quoted(self._add_key(self.values.value(n)))
            if _has_column(n) and _first_aggregate(n) is None:
                key = self._key_for(n)
                if key is not None:
                    return _quoted(key)
            return n

        return node.transform(visit)

    def _python_call_of_keys(self, node: exp.Expression) -> bool:
        if not (isinstance(node, exp.Func) and self.source.function_name(node) in UDFS):
            return False
        if _first_aggregate(node) is not None or self.select.args.get("group") is None:
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
        return _quoted(self._add_key(self.values.value(node)))

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
            return _quoted(key)
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
                total = _quoted(sum_name)
        except LookupError:
            raise self.source.unsupported("ORDER BY an expression that is not in the select list", call) from None
        if isinstance(call, exp.Avg):
            return exp.Paren(this=exp.Div(this=total, expression=exp.Nullif(
                this=_quoted(non_null_name), expression=exp.Literal.number(0))))
        # SUM over no non-NULL value is NULL, not 0.
        return exp.Case(ifs=[exp.If(this=exp.EQ(this=_quoted(non_null_name), expression=exp.Literal.number(0)),
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
        return _quoted(self.aggregates.reduced(argument, reduce, register, lambda: self._value_variable(argument)))

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
            return _quoted(ROW_COUNT)
        argument = self._argument(call.this)
        if is_not_null(argument) == ZERO:
            return exp.Literal.number(0)
        return _quoted(self.aggregates.non_null_count(argument, register))

    def _argument(self, node: exp.Expression) -> Expr:
        nested = _first_aggregate(node)
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
            return _quoted(names[int(node.this) - 1])
        if isinstance(node, exp.Column) and not node.table:
            named = [n for n in names if n.lower() == node.name.lower()]
            if named:
                return _quoted(named[0])
        tree = self.rewrite(node, register=False)
        by_sql = {t: name for name, t in reversed(outputs)}
        output_references: list[exp.Expression] = []

        def to_output(n: exp.Expression) -> exp.Expression:
            if n not in by_sql:
                return n
            output_references.append(_quoted(by_sql[n]))
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
        aggregates, aggregate_names = self.aggregates.definitions(keys, rename(body, variable_names),
                                                                  variable_names)
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


# ---------------------------------------------------------------------------------------------------
# A set operation as the view: counts of each row in its operands and the multiplicity they give


@dataclass
class _Count:
    """The number of copies of a row in a sum of operands: one aggregate, the AggSum of their bodies."""

    bodies: list[Expr]


@dataclass
class _Combined:
    """A multiplicity computed from others when the view is read: `template` formats their SQL."""

    template: str
    parts: list["_Count | _Combined"]


def _added(terms: list[_Count | _Combined]) -> _Count | _Combined:
    """The sum of multiplicities; the counts among them are added as one aggregate (a calculus Sum)."""
    merged = _Count([b for t in terms if isinstance(t, _Count) for b in t.bodies])
    parts: list[_Count | _Combined] = []
    for t in terms:  # the merged count where the first count stands, so that names go left to right
        if not isinstance(t, _Count):
            parts.append(t)
        elif all(p is not merged for p in parts):
            parts.append(merged)
    if len(parts) == 1:
        return parts[0]
    return _Combined("(" + " + ".join(f"{{{i}}}" for i in range(len(parts))) + ")", parts)


def _nonzero(term: _Count | _Combined) -> _Combined:
    return _Combined("CASE WHEN {0} > 0 THEN 1 ELSE 0 END", [term])


class SetOperationTranslator:
    """UNION [ALL], EXCEPT [ALL] and INTERSECT [ALL] of SELECTs as the view query.

    The keys are fresh variables `u1`…`un`, one per output column; each operand's body lifts them to
    its select list, so rows compare NULL-safely as set operations do. A sum of operands (UNION ALL)
    is one count; EXCEPT, INTERSECT and DISTINCT are not sums, so each of their operands is a count of
    its own (`count`, `count_r`, `count_r2`… from left to right) and the view's multiplicity combines
    them: GREATEST(`count` - `count_r`, 0) for EXCEPT ALL, LEAST(…) for INTERSECT ALL. The distinct
    kinds only tell whether a row is present; the view then holds each present row once."""

    def __init__(self, translation: Translation, node: exp.SetOperation):
        self.translation = translation
        self.source = translation.source
        self.node = node
        self.ctes: dict[str, tuple] = {}
        define_ctes(node, self.ctes)
        self.keys: list[str] = []
        self.names: list[str] = []
        self.widths: list[int] = []

    def view(self) -> ViewQuery:
        distinct = self.node.args.get("distinct") is not False
        term = self._term(self.node, exact=not distinct)
        check_widths(self.source, self.node, self.widths)
        counts: list[tuple[str, list[Expr]]] = []
        multiplicity = self._render(term, counts) if isinstance(term, _Combined) else None
        if multiplicity is None:
            counts.append((ROW_COUNT, term.bodies))
        variable_names = self.translation.names.final_names()
        keys = tuple(variable_names[k] for k in self.keys)
        aggregates = tuple(Aggregate(name, aggsum(keys, rename(sum_(*bodies), variable_names)))
                           for name, bodies in counts)
        if any(a.definition == ZERO for a in aggregates):  # an operand with WHERE FALSE: no map to maintain
            raise self.source.unsupported("an operand of a set operation that selects no row whatever the data",
                                          self.node, detail="its WHERE is always false or NULL")
        return ViewQuery(
            sql=self.source.text,
            keys=keys,
            aggregates=aggregates,
            columns=tuple(OutputColumn(name, _quoted(key).sql(dialect=DIALECT))
                          for name, key in zip(self.names, keys)),
            order_by=self._order_by(),
            limit=limit_of(self.source, self.node),
            bag=True,
            relations=tuple(dict.fromkeys(self.translation.relations)),
            multiplicity=multiplicity or f"`{ROW_COUNT}`",
            distinct=distinct,
        )

    def _term(self, node: exp.Expression, exact: bool) -> _Count | _Combined:
        """The multiplicity of a row in the operand; when not `exact`, only whether it is positive counts."""
        node = _unwrapped(node)
        if isinstance(node, exp.Select):
            count = self._operand(node)
            return _nonzero(count) if node.args.get("distinct") is not None and exact else count
        if not isinstance(node, exp.SetOperation):
            raise self.source.unsupported(f"{node.key.upper()} as an operand of a set operation", node)
        if node is not self.node:
            reject_set_operation_clauses(self.source, node, "inside another")
        all_rows = node.args.get("distinct") is False
        operands = self._chain(node)
        terms = [self._term(operand, exact=all_rows) for operand in operands]
        if isinstance(node, exp.Union):
            total = _added(terms)
            return _nonzero(total) if exact and not all_rows else total
        if isinstance(node, exp.Except):
            # (A EXCEPT B) EXCEPT C is A EXCEPT (B UNION C), with or without ALL.
            removed = _added(terms[1:])
            if all_rows:
                return _Combined("GREATEST({0} - {1}, 0)", [terms[0], removed])
            return _Combined("CASE WHEN {0} > 0 AND {1} = 0 THEN 1 ELSE 0 END", [terms[0], removed])
        if isinstance(node, exp.Intersect):
            if all_rows:
                return _Combined(f"LEAST({', '.join(f'{{{i}}}' for i in range(len(terms)))})", terms)
            tests = " AND ".join(f"{{{i}}} > 0" for i in range(len(terms)))
            return _Combined(f"CASE WHEN {tests} THEN 1 ELSE 0 END", terms)
        name = set_operation_name(node)
        raise self.source.unsupported(name, node, name.split()[0], where="inside")

    @staticmethod
    def _chain(node: exp.SetOperation) -> list[exp.Expression]:
        """The operands of a left-associated chain of one kind of set operation: A op B op C (in a loop: a
        chain of a thousand operands costs no recursion)."""
        same = (type(node), node.args.get("distinct"))
        operands = [node.expression]
        left = _unwrapped(node.this)
        while (isinstance(left, exp.SetOperation) and (type(left), left.args.get("distinct")) == same
               and not any(left.args.get(c) for c in ("limit", "offset"))):
            node = left
            operands.append(node.expression)
            left = _unwrapped(node.this)
        operands.append(node.this)
        return operands[::-1]

    def _operand(self, select: exp.Select) -> _Count:
        inner = SelectTranslator(self.translation, select, self.ctes)
        outputs = inner.inlined_outputs("a set operation", distinct=True)
        if not self.widths:
            self.names = [name for name, _ in outputs]
            self.keys = [self.translation.names.generated("u") for _ in outputs]
        self.widths.append(len(outputs))
        lifts = [lift(key, value) for key, (_, value) in zip(self.keys, outputs)]
        return _Count([prod(*inner.scope.relations(), *inner.scope.factors(), *lifts)])

    def _render(self, term: _Count | _Combined, counts: list[tuple[str, list[Expr]]]) -> str:
        if isinstance(term, _Count):
            name = ROW_COUNT if not counts else f"{ROW_COUNT}_r{len(counts) if len(counts) > 1 else ''}"
            counts.append((name, term.bodies))
            return f"`{name}`"
        return term.template.format(*(self._render(part, counts) for part in term.parts))

    def _order_by(self) -> tuple[str, ...]:
        """ORDER BY output columns: by position, by name, or expressions of names."""
        order = self.node.args.get("order")
        sorts = []
        for ordered in (order.expressions if order is not None else []):
            reject_aggregates(self.source, ordered.this, "aggregate in ORDER BY of a set operation")
            target = ordered.this
            if isinstance(target, exp.Literal) and not target.is_string and re.fullmatch(r"\d+", target.this):
                position = int(target.this)
                if not 1 <= position <= len(self.names):
                    raise self.source.unsupported(f"position {position} that is not in the select list", target)
                target = _quoted(self.names[position - 1])
            else:
                target = target.transform(self._output_column)
            reject_python_calls_when_read(self.source, target)
            sorts.append(exp.Ordered(this=target, desc=ordered.args.get("desc"),
                                     nulls_first=ordered.args.get("nulls_first")).sql(dialect=DIALECT))
        return tuple(sorts)

    def _output_column(self, node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Column):
            return node
        named = [n for n in self.names if n.lower() == node.name.lower()] if not node.table else []
        if not named:
            raise self.source.unsupported("ORDER BY an expression that is not in the select list", node)
        return _quoted(named[0])


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
