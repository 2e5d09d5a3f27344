"""Malformed input, without Spark: statements made of random tokens, valid IVM statements truncated or
mutated, huge literals, constants of mixed types, deeply nested and very long expressions, odd names with
quotes and backticks.

Through the IVM statement parser (what `spark.sql` runs first) every text is an IVM statement, or an
IVMError (a ParseError, mostly), or — when it does not begin as an IVM statement — not ours (None: Spark
gets it as written). Through the SQL front end and the compiler, with fixed schemas, a query compiles
or raises an IVMError; never another exception. The names an IVM statement gives the runtime (views,
map stores) are plain identifiers, and the identifiers and literals the SQL generators write come out of
Spark's parser (sqlglot's, in the Spark dialect) as the same single identifier or literal.

Hypothesis runs each property derandomized (its seed comes from the test), so that CI is reproducible."""

from __future__ import annotations

import re
import types

import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from spark_ivm.bench.tpch import read_query
from spark_ivm.compiler.viewlet import compile_query
from spark_ivm.errors import IVMError, ParseError, UnsupportedQueryError
from spark_ivm.frontend.translate import translate
from spark_ivm.runtime.mapstore import StoredMap, StoreLayout
from spark_ivm.runtime.sources import SourceError, referenced_tables
from spark_ivm.runtime.sqlgen import Sources, literal_sql, quote, statement_sql
from spark_ivm.runtime.statements import (
    CreateView, DropView, ExplainView, RefreshAll, RefreshView, ShowViews, parse_statement,
)
from spark_ivm.runtime.viewsql import Column, held_maps_sql, literal, read_view_sql, rows_view_sql

from corpus import DEEP_KINDS, NESTED_QUERIES, QUERIES, SCHEMAS, deep
from test_tpch_compile import SCHEMAS as TPCH_SCHEMAS

PROPERTY = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example])

STATEMENTS = (CreateView, RefreshView, RefreshAll, DropView, ShowViews, ExplainView)
# The head of an IVM statement, after whitespace and comments: such a text is never passed to Spark.
IVM_HEAD = re.compile(r"(?:\s|--[^\n]*|/\*.*?\*/)*(CREATE|REFRESH|DROP|SHOW|EXPLAIN)\s+INCREMENTAL\b", re.I | re.S)
PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")
SCHEMA_SETS = (SCHEMAS, TPCH_SCHEMAS)

# -- texts ------------------------------------------------------------------------------------------------

VALID_QUERIES = QUERIES + NESTED_QUERIES + [read_query(f"q{n}").sql for n in (1, 3, 6, 12, 14, 19, 22)]
ODD_NAMES = ("`a``b`", "`--`", "`/*`", "`*/`", "`;`", "`'`", '`"`', "`a b`", '"v"', "'v'", "v.w.x", "1v", "`é`",
             "`x' OR '1'='1`", "`v; DROP TABLE R --`")
NAMES = st.sampled_from(("v", "`v`", "db.v", "`db`.`v`", "_v1", "v" * 300) + ODD_NAMES)
OPTIONS = st.sampled_from(("", "WITH (depth = 1) ", "WITH (depth = unlimited, store = 'm') ", "WITH (store = 'db.m') ",
                           "WITH (store = 'm --') ", "WITH (store = 'x y') ", "WITH (depth = -1) ", "WITH (depth) ",
                           "WITH (colour = 1) ", "WITH (depth = 1 ", "WITH (depth = ²) ", "WITH (depth = '1') ",
                           f"WITH (depth = {'9' * 5000}) ", "WITH (store = `m`) ", "WITH () ", "WITH (depth = 1,) "))
HUGE_LITERALS = ("9" * 5000, "9" * 39, "1" + "0" * 37, "1e400", "1.5e-400", "0." + "0" * 100 + "1", "'" + "x" * 20000 + "'",
                 "'" + "\\'" * 500 + "'", "DATE '99999-01-01'", "INTERVAL '" + "9" * 50 + "' DAY", "X'" + "AB" * 1000 + "'")
TOKENS = ("SELECT FROM WHERE GROUP BY HAVING ORDER LIMIT JOIN LEFT FULL ON AND OR NOT IN EXISTS CASE WHEN THEN ELSE "
          "END AS DISTINCT UNION ALL EXCEPT INTERSECT SUM COUNT MIN MAX AVG CAST INTERVAL DATE NULL TRUE IS BETWEEN "
          "LIKE WITH OVER CREATE REFRESH DROP SHOW EXPLAIN INCREMENTAL VIEW VIEWS FULL IF R S T a b c d r1 x "
          "lineitem l_quantity").split() + list("()*,.+-/%=<>;|`'\"\\") + [
    "<>", "<=", "||", "--", "/*", "*/", "''", "1", "0", "2.5", "'x'", "1L", "1.5BD", "R.*", "a::int", ":p", "?",
    "\n", "`a``b`", "INTERVAL '1' DAY", "DATE '1994-01-01'", "abs(a)", "substring(a, 1, 2)", *HUGE_LITERALS]


def ivm_statement(name: str, options: str, query: str, kind: int, flag: bool) -> str:
    return [f"CREATE INCREMENTAL VIEW {'IF NOT EXISTS ' if flag else ''}{name} {options}AS {query}",
            f"REFRESH INCREMENTAL VIEW {name}{' FULL' if flag else ''}",
            "REFRESH INCREMENTAL VIEWS" + (";" if flag else ""),
            f"DROP INCREMENTAL VIEW {'IF EXISTS ' if flag else ''}{name}",
            "SHOW INCREMENTAL VIEWS" + (" -- all" if flag else ""),
            f"{'/* why */ ' if flag else ''}EXPLAIN INCREMENTAL VIEW {name}"][kind]


valid_statements = st.builds(ivm_statement, NAMES, OPTIONS, st.sampled_from(VALID_QUERIES), st.integers(0, 5),
                             st.booleans())


@st.composite
def truncated(draw, texts) -> str:
    text = draw(texts)
    return text[:draw(st.integers(0, len(text)))]


@st.composite
def mutated(draw, texts) -> str:
    """A text with a few edits: a span deleted, doubled or replaced by a token, a token inserted."""
    text = draw(texts)
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = min(len(text), i + draw(st.integers(0, 12)))
        token = draw(st.sampled_from(TOKENS))
        text = draw(st.sampled_from((text[:i] + text[j:], text[:i] + text[i:j] * 2 + text[j:],
                                     text[:i] + f" {token} " + text[j:], text[:i] + token + text[i:])))
    return text


# Words that can stand for one another in a query: replacing some keeps most queries valid, and varies them.
ALTERNATIVES = (
    ("a", "b", "c", "d", "R.a", "R.b", "S.b", "S.c", "T.c", "T.d", "x", "`a`", "`c``d`", "'x'", "1", "DATE '1994-01-01'"),
    ("0", "1", "2", "3", "-1", "2.5", "NULL", "'x'", "1e3", "TRUE", "DATE '1994-01-01'", "'it''s */ --;'",
     "'\\'", *HUGE_LITERALS[:6]),
    ("+", "-", "*", "/", "%", "||", "DIV"),
    ("=", "<>", "<", ">", "<=", ">=", "<=>", "!="),
    ("AND", "OR"),
    ("SUM", "COUNT", "MIN", "MAX", "AVG"),
    ("R", "S", "T"),
    ("JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "CROSS JOIN"),
    ("EXISTS", "NOT EXISTS"),
    ("IN", "NOT IN"),
)
_WORDS = re.compile(r"(?i)LEFT JOIN|RIGHT JOIN|FULL JOIN|CROSS JOIN|NOT EXISTS|NOT IN|'[^']*'|<=>|<>|<=|>=|!=|\|\|"
                    r"|\w+(?:\.\w+)?|\S")


@st.composite
def varied(draw, queries) -> str:
    """A query with some words replaced by others of their kind (columns, constants, operators, …)."""
    words = _WORDS.findall(draw(queries))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(words) - 1))
        kind = [k for k in ALTERNATIVES if words[i].upper() in {w.upper() for w in k}]
        if kind:
            words[i] = draw(st.sampled_from(kind[0]))
    return " ".join(words)


random_tokens = st.builds(lambda head, tokens, sep: head + sep.join(tokens),
                          st.sampled_from(("", "CREATE INCREMENTAL VIEW v AS ", "SELECT ", "CREATE INCREMENTAL VIEW ")),
                          st.lists(st.sampled_from(TOKENS), max_size=30), st.sampled_from((" ", "")))


@st.composite
def huge_literal(draw, texts) -> str:
    """A text with a huge literal in place of its first number or string (or else in the select list)."""
    text, huge = draw(texts), draw(st.sampled_from(HUGE_LITERALS))
    literal = re.search(r"'[^']*'|\b\d+(\.\d+)?\b", text)
    if literal is None:
        return re.sub(r"(?i)\bSELECT\b", f"SELECT {huge} AS huge,", text, count=1)
    return text[:literal.start()] + huge + text[literal.end():]


def as_view(queries):
    """The queries as they are (what translate gets) or in a CREATE INCREMENTAL VIEW statement."""
    return st.builds(lambda create, query: f"CREATE INCREMENTAL VIEW v AS {query}" if create else query,
                     st.booleans(), queries)


# Constants of every type, combined as Python cannot always combine them ('x' > 1, '1994-01-01' + INTERVAL …):
# the front end and the compiler's rules fold constants.
CONSTANTS = ("1", "2.5", "1e3", "'x'", "'1994-01-01'", "''", "DATE '1994-01-01'", "TRUE", "NULL", "-1",
             "CAST('2' AS INT)", "X'AB'")
mixed_constants = st.builds(
    lambda template, left, op, right: template.format(f"{left} {op} {right}"),
    st.sampled_from(("SELECT SUM(a) FROM R WHERE {}", "SELECT b, SUM({}) FROM R GROUP BY b", "SELECT {} AS x FROM R",
                     "SELECT a FROM R WHERE a < {}", "SELECT a FROM R WHERE NOT ({})")),
    st.sampled_from(CONSTANTS),
    st.sampled_from(("=", "<", ">=", "<>", "+", "-", "*", "/", "%", "||", "DIV", "AND", "OR",
                     "+ INTERVAL '1' YEAR +", "- INTERVAL '3' DAY -")),
    st.sampled_from(CONSTANTS))
queries = st.sampled_from(VALID_QUERIES)
malformed_statements = st.one_of(valid_statements, truncated(valid_statements), mutated(valid_statements),
                                 huge_literal(valid_statements), random_tokens, st.text(max_size=200))
varied_queries = as_view(varied(queries))
broken_queries = as_view(st.one_of(truncated(queries), mutated(queries), random_tokens))
huge_literal_queries = as_view(huge_literal(varied(queries)))


# -- the statement parser ---------------------------------------------------------------------------------

def parsed(text: str):
    """The statement, None (not ours) or the IVMError; any other exception fails the test."""
    try:
        return parse_statement(text)
    except IVMError as e:
        return e


@PROPERTY
@given(malformed_statements)
def test_statement_parser_gives_a_statement_not_ours_or_an_ivm_error(text):
    statement = parsed(text)
    if statement is None:
        assert not IVM_HEAD.match(text), "an IVM statement passed to Spark as it is"
        return
    assert isinstance(statement, STATEMENTS + (IVMError,))
    name = getattr(statement, "name", None)
    assert name is None or PLAIN_NAME.fullmatch(name), f"a name the runtime cannot write into SQL: {name!r}"
    store = getattr(statement, "options", {}).get("store")
    assert store is None or PLAIN_NAME.fullmatch(store)


@pytest.mark.parametrize("name", ODD_NAMES)
@pytest.mark.parametrize("statement", [
    "CREATE INCREMENTAL VIEW {} AS SELECT a FROM R", "REFRESH INCREMENTAL VIEW {}", "DROP INCREMENTAL VIEW {}",
    "EXPLAIN INCREMENTAL VIEW {}",
])
def test_names_that_are_not_plain_identifiers_are_refused(statement, name):
    """The runtime writes view and store names into the SQL it runs as they are: `v; DROP TABLE R --`
    would be a statement of its own. Backticks around a plain name are fine."""
    with pytest.raises(ParseError):
        parse_statement(statement.format(name))


@pytest.mark.parametrize("store", ["`a``b`", "m --", "m; DROP TABLE R", "x y", "m/*", "`m`.`n`.`o`", "é"])
def test_store_names_that_are_not_plain_identifiers_are_refused(store):
    with pytest.raises(ParseError, match="map store"):
        parse_statement(f"CREATE INCREMENTAL VIEW v WITH (store = '{store}') AS SELECT a FROM R")
    assert parse_statement("CREATE INCREMENTAL VIEW v WITH (store = '`db`.m') AS SELECT a FROM R").options == {
        "store": "db.m"}


@pytest.mark.parametrize("name", [n for n in ODD_NAMES if n.startswith("`")])
def test_source_names_that_are_not_plain_identifiers_are_refused(name):
    """Source names reach DESCRIBE DETAIL, table_changes('…') and reads at a version as written."""
    with pytest.raises(SourceError, match="letters, digits and underscores"):
        referenced_tables(f"SELECT a FROM {name}")
    assert referenced_tables("SELECT a FROM `db`.`r_1` JOIN s USING (a)") == ["db.r_1", "s"]


def test_statements_behind_comments_are_ours():
    """A comment before an IVM statement (or after it) does not pass it to Spark, which cannot read it."""
    assert parse_statement("-- nightly\nREFRESH INCREMENTAL VIEW `db`.`v` FULL; -- done") == RefreshView("db.v", "full")
    assert parse_statement("/* a */ /* b */ SHOW INCREMENTAL VIEWS") == ShowViews()
    create = parse_statement("-- totals\nCREATE INCREMENTAL VIEW v AS SELECT a FROM R")
    assert create.query == "SELECT a FROM R" and create.positioned_query.index("SELECT") == len("-- totals\n") + 29
    assert parse_statement("/* CREATE INCREMENTAL VIEW v AS SELECT 1 */ SELECT 1") is None


def test_a_long_run_of_spaces_is_read_in_linear_time():
    """`\\s*;?\\s*$` after a name tried every split of 100,000 spaces before a stray character (seconds)."""
    for text in ("DROP INCREMENTAL VIEW v" + " " * 100_000 + "x", "SHOW INCREMENTAL VIEWS" + " " * 100_000 + ";x"):
        with pytest.raises(ParseError):
            parse_statement(text)


@pytest.mark.parametrize("depth", ["²", "٣", "9" * 5000, "-1", "1.5"])
def test_a_depth_that_is_not_a_small_whole_number_is_a_parse_error(depth):
    with pytest.raises(ParseError, match="depth"):
        parse_statement(f"CREATE INCREMENTAL VIEW v WITH (depth = {depth}) AS SELECT a FROM R")


# -- the front end and the compiler -----------------------------------------------------------------------

def compiled(query_text: str) -> None:
    """The query through what CREATE does without Spark: the tables it reads, the front end with each
    fixed schema, the compiler at depth 1; an IVMError is an answer."""
    try:
        referenced_tables(query_text)
    except IVMError:
        pass
    for schemas in SCHEMA_SETS:
        try:
            compile_query(translate(query_text, schemas), depth=1)
        except IVMError:
            pass


def through_the_front_end(text: str) -> None:
    statement = parsed(text)
    if isinstance(statement, CreateView):
        compiled(statement.positioned_query)
    elif statement is None:  # ordinary SQL: the front end refuses what is not a query it maintains
        compiled(text)


@PROPERTY
@given(varied_queries)
def test_varied_queries_compile_or_raise_ivm_errors(text):
    """Queries of the corpus and of TPC-H with columns, constants, operators, aggregates, tables, joins
    replaced by others: more than half compile, the rest refer to what is not there or are refused."""
    through_the_front_end(text)


@PROPERTY
@given(broken_queries)
def test_broken_queries_raise_only_ivm_errors(text):
    """Truncated, mutated, random tokens."""
    through_the_front_end(text)


@PROPERTY
@given(huge_literal_queries)
def test_huge_literals_raise_only_ivm_errors(text):
    through_the_front_end(text)


@PROPERTY
@given(mixed_constants)
def test_constants_of_mixed_types_compile_or_raise_ivm_errors(text):
    through_the_front_end(text)


@settings(PROPERTY, max_examples=60)
@given(st.sampled_from(DEEP_KINDS), st.integers(1, 1500))
def test_deep_and_long_expressions_compile_or_raise_ivm_errors(kind, n):
    try:
        compile_query(translate(deep(kind, n), SCHEMAS), depth=1)
    except IVMError:
        pass


@pytest.mark.parametrize("text, error", [
    ("SELECT " + "9" * 5000 + " FROM R", ParseError),  # Python refuses int() of more than 4,300 digits
    ("SELECT a FROM R GROUP BY " + "9" * 5000, ParseError),
    ("SELECT 1e400 AS x FROM R", ParseError),  # no DOUBLE holds it: Spark refuses it too
    ("SELECT a FROM R WHERE a < DATE '1994-01-01' + INTERVAL '" + "9" * 50 + "' DAY", UnsupportedQueryError),
    ("SELECT a FROM R WHERE FALSE", UnsupportedQueryError),  # no row whatever the data: no map to maintain
    ("SELECT a FROM R WHERE NULL", UnsupportedQueryError),
    ("SELECT b, COUNT(*) FROM R WHERE 'x' = 1 GROUP BY b", UnsupportedQueryError),  # 0 once the rules fold it
    ("SELECT a FROM R WHERE FALSE EXCEPT SELECT b FROM S", UnsupportedQueryError),
    ("SELECT a FROM R WHERE (SELECT SUM(c) FROM S WHERE S.b = R.b OR S.c < R.a) < 3", UnsupportedQueryError),
])
def test_inputs_that_raised_internal_errors(text, error):
    with pytest.raises(error):
        compile_query(translate(text, SCHEMAS))


@pytest.mark.parametrize("text", [
    "SELECT b, SUM(0), AVG(a * 0) FROM R GROUP BY b",  # a sum of 0 has no map of its own
    "SELECT a FROM R WHERE a < '1994-01-01' + INTERVAL '1' YEAR",  # Spark casts the string: left to it
    "SELECT a FROM R WHERE 'x' > 0 OR a = 1",
    "SELECT a FROM R WHERE a > DATE '1994-01-01' - 2.5",
])
def test_constants_python_cannot_combine_are_left_to_spark(text):
    plan = compile_query(translate(text, SCHEMAS), depth=1)
    assert plan.maps


# -- quoting in the generated SQL -------------------------------------------------------------------------
# Names and strings with every character that could end a quoted identifier or literal, or start a comment
# or another statement.
NASTY = ("a`b", "``", "it's", "'", '"q"', "x -- y", "--", "/*", "*/", "/* c */", "a;b", ";", "\\", "\\'", "a\\`b",
         "*/ DROP TABLE R; /*", "' OR '1'='1", "line\nbreak", "tab\tand\rreturn", "é ü", "")
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=30) | \
    st.sampled_from([n for n in NASTY if n])
strings = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30) | st.sampled_from(NASTY)


def select_of(sql_value: str) -> exp.Expression:
    """The one select expression of `SELECT <sql_value> AS x`, as Spark's parser reads it."""
    (statement,) = sqlglot.parse(f"SELECT {sql_value} AS x FROM t", read="spark")
    assert not any(n.comments for n in statement.walk()), "a comment opened inside a quoted part"
    (item,) = statement.expressions
    return item.this


@PROPERTY
@given(names)
def test_a_quoted_name_is_one_identifier(name):
    column = select_of(quote(name))
    assert isinstance(column, exp.Column) and column.this.quoted and column.name == name


@PROPERTY
@given(strings)
def test_a_string_literal_is_one_literal(text):
    for sql in (literal_sql(text), literal(text, Column("s", "string"))):
        value = select_of(sql)
        assert isinstance(value, exp.Literal) and value.is_string and value.this == text


@PROPERTY
@given(strings)
def test_a_string_literal_in_a_comment_cannot_close_it(text):
    """The rows a "rows" view carries sit in a /* … */ comment, which Spark nests: no `*` may be written."""
    sql = literal(text, Column("s", "string"), in_comment=True)
    assert "*" not in sql
    assert select_of(sql).this == text
    (statement,) = sqlglot.parse(f"SELECT 1 /* {sql} */ AS x FROM t", read="spark")
    assert [n.comments for n in statement.walk() if n.comments] == [[f" {sql} "]]


def odd_view():
    """A view over a table whose name, columns, aliases and constants hold every nasty character."""
    table, columns = "odd`tab;--", ["c`1 'x' */", "b/*;"]
    constant = "it's */ -- ; /* \\ `"
    alias = "out`-- '*/"
    sql = (f"SELECT {quote(columns[0])} AS {quote(alias)}, SUM({quote(columns[1])}) AS {quote(constant)} "
           f"FROM {quote(table)} WHERE {quote(columns[0])} <> {literal_sql(constant)} GROUP BY {quote(columns[0])} "
           f"HAVING MIN({quote(columns[1])}) <> {literal_sql(constant)} ORDER BY {quote(alias)}")
    return table, columns, constant, alias, compile_query(translate(sql, {table: columns}), name="v", depth=1)


def nasty_parts(tree: exp.Expression) -> tuple[set, set]:
    """The identifiers and string literals of a parsed statement that hold a character quoting protects."""
    special = re.compile(r"[`'\"*/;\\-]")
    identifiers = {i.this for i in tree.find_all(exp.Identifier) if special.search(i.this)}
    strings = {lit.this for lit in tree.find_all(exp.Literal) if lit.is_string and special.search(lit.this)}
    return identifiers, strings


def test_names_and_constants_of_a_view_come_out_of_the_map_sql_quoted():
    table, columns, constant, alias, plan = odd_view()
    keys = {m.name: m.keys for m in plan.maps}
    sources = Sources(relation=lambda r: quote(f"pinned {r}"), delta=lambda r: quote(f"batch {r}"),
                      map=lambda m: quote(f"map {m}"), columns=lambda r: columns, map_keys=lambda m: keys[m])
    expressions = [(m.definition, m.keys) for m in plan.maps]
    expressions += [(s.expr, s.keys) for t in plan.triggers for s in t.statements]
    for e, map_keys in expressions:
        (tree,) = sqlglot.parse(statement_sql(e, map_keys, sources), read="spark")
        identifiers, strings = nasty_parts(tree)
        assert identifiers <= {f"pinned {table}", f"batch {table}", *columns, *(f"map {m}" for m in keys)}
        assert strings <= {constant}
        assert not any(n.comments for n in tree.walk())


def test_names_and_rows_of_a_view_come_out_of_the_view_sql_quoted():
    _, _, constant, alias, plan = odd_view()
    key_types = {k: "string" for k in plan.query.keys}
    maps = tuple(StoredMap(i, f"v_{a.name}", plan.query.keys, "bigint") for i, a in enumerate(plan.query.aggregates))
    entry = types.SimpleNamespace(
        name="db.v", plan=plan, output_types=[[alias, "string"], [constant, "bigint"]],
        layout=StoreLayout("db.v__ivm_maps", maps, tuple(key_types.items())))
    (tree,) = sqlglot.parse(read_view_sql(entry), read="spark")
    assert nasty_parts(tree) == ({alias, constant}, {constant})  # the constant of HAVING

    nasty_value = "*/ DROP TABLE R; /* it's"
    rows = [(nasty_value, 3)]
    held = [(0, nasty_value, 3), (1, "x", 5)]
    text = rows_view_sql(entry, rows, held)
    (tree,) = sqlglot.parse(text, read="spark")
    assert nasty_parts(tree) == ({alias, constant}, {nasty_value})  # the rows' value, once, outside the comment
    (comment,) = [c for n in tree.walk() for c in n.comments or ()]
    assert comment.startswith("spark_ivm maps VALUES") and "*" not in comment
    (maps_tree,) = sqlglot.parse(held_maps_sql(text), read="spark")
    assert {lit.this for lit in maps_tree.find_all(exp.Literal) if lit.is_string} == {nasty_value, "x"}
