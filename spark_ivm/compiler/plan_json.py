"""A compiled plan as plain data (dicts, lists, strings, numbers): what the view catalog stores.

Every calculus expression is its text (`printer.to_text`), read back with `parser.parse`; every
other field is a JSON value. Reading a plan back is much cheaper than compiling the view's SQL again,
and a process that opens a view on a new Spark session pays it on every run.

    plan_from_data(plan_to_data(plan)) == plan

The data holds names of things only (relations, maps, functions, Python UDFs by their registered
name), never code: reading it cannot run anything. A field missing or of the wrong type raises
`FormatError`.
"""

from __future__ import annotations

import json

from spark_ivm.calculus.expressions import Expr
from spark_ivm.calculus.parser import CalculusSyntaxError, parse
from spark_ivm.calculus.printer import to_text
from spark_ivm.compiler.plan import MapDecl, Plan, Statement, Trigger
from spark_ivm.frontend.view_query import Aggregate, OutputColumn, ViewQuery

__all__ = ["Fields", "FormatError", "plan_to_data", "plan_from_data", "plan_to_json", "plan_from_json",
           "query_to_data", "query_from_data"]


class FormatError(ValueError):
    """Plain data not of the stored form: `path` says where (e.g. `triggers[2].statements[0].expr`)."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path


# -- writing ------------------------------------------------------------------------------------------

def plan_to_data(plan: Plan) -> dict:
    return {
        "maps": [{"name": m.name, "keys": list(m.keys), "definition": to_text(m.definition), "level": m.level,
                  "maintenance": m.maintenance} for m in plan.maps],
        "triggers": [{"relation": t.relation,
                      "statements": [{"target": s.target, "keys": list(s.keys), "op": s.op, "expr": to_text(s.expr)}
                                     for s in t.statements]}
                     for t in plan.triggers],
        "query": None if plan.query is None else query_to_data(plan.query),
        "depth": plan.depth,
        "notes": list(plan.notes),
    }


def plan_to_json(plan: Plan) -> str:
    return json.dumps(plan_to_data(plan), ensure_ascii=False, separators=(",", ":"))


def query_to_data(query: ViewQuery) -> dict:
    return {
        "sql": query.sql,
        "keys": list(query.keys),
        "aggregates": [{"name": a.name, "definition": to_text(a.definition), "value_keys": list(a.value_keys),
                        "reduce": a.reduce} for a in query.aggregates],
        "columns": [{"name": c.name, "sql": c.sql} for c in query.columns],
        "having": query.having,
        "order_by": list(query.order_by),
        "limit": query.limit,
        "bag": query.bag,
        "relations": list(query.relations),
        "multiplicity": query.multiplicity,
        "distinct": query.distinct,
    }


# -- reading ------------------------------------------------------------------------------------------
# Strict: a field of the wrong type would otherwise surface much later, as a wrong refresh.

def plan_from_data(data: object, path: str = "") -> Plan:
    d = Fields(data, path)
    query = d.get("query")
    return Plan(
        maps=d.objects("maps", _map),
        triggers=d.objects("triggers", _trigger),
        query=None if query is None else query_from_data(query, d.path("query")),
        depth=d.optional_integer("depth"),
        notes=d.strings("notes"),
    )


def plan_from_json(text: str) -> Plan:
    return plan_from_data(json.loads(text))


def query_from_data(data: object, path: str = "") -> ViewQuery:
    d = Fields(data, path)
    return ViewQuery(
        sql=d.string("sql"),
        keys=d.strings("keys"),
        aggregates=d.objects("aggregates", _aggregate),
        columns=d.objects("columns", _column),
        having=d.optional_string("having"),
        order_by=d.strings("order_by"),
        limit=d.optional_integer("limit"),
        bag=d.boolean("bag"),
        relations=d.strings("relations"),
        multiplicity=d.string("multiplicity"),
        distinct=d.boolean("distinct"),
    )


def _map(data: object, path: str) -> MapDecl:
    d = Fields(data, path)
    return MapDecl(d.string("name"), d.strings("keys"), d.expr("definition"), d.integer("level"),
                   d.string("maintenance"))


def _trigger(data: object, path: str) -> Trigger:
    d = Fields(data, path)
    return Trigger(d.string("relation"), d.objects("statements", _statement))


def _statement(data: object, path: str) -> Statement:
    d = Fields(data, path)
    op = d.string("op")
    if op not in ("+=", ":="):
        raise FormatError(d.path("op"), f"unknown statement operator {op!r}")
    return Statement(d.string("target"), d.strings("keys"), op, d.expr("expr"))


def _aggregate(data: object, path: str) -> Aggregate:
    d = Fields(data, path)
    try:
        return Aggregate(d.string("name"), d.expr("definition"), d.strings("value_keys"), d.optional_string("reduce"))
    except ValueError as exc:  # Aggregate's own check of reduce and value_keys
        if isinstance(exc, FormatError):
            raise
        raise FormatError(path, str(exc)) from None


def _column(data: object, path: str) -> OutputColumn:
    d = Fields(data, path)
    return OutputColumn(d.string("name"), d.string("sql"))


class Fields:
    """Typed access to the fields of one JSON object, each error naming the field's path."""

    def __init__(self, data: object, path: str):
        if not isinstance(data, dict):
            raise FormatError(path, f"expected an object, found {type(data).__name__}")
        self.data = data
        self.where = path

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str) -> object:
        if key not in self.data:
            raise FormatError(self.path(key), "missing")
        return self.data[key]

    def typed(self, key: str, types: tuple, what: str, optional: bool = False) -> object:
        value = self.get(key)
        # bool is an int in Python; JSON's true is no number here.
        if (value is None and optional) or (isinstance(value, types) and not (
                isinstance(value, bool) and bool not in types)):
            return value
        raise FormatError(self.path(key), f"expected {what}, found {_json_type(value)}")

    def string(self, key: str) -> str:
        return self.typed(key, (str,), "a string")

    def optional_string(self, key: str) -> str | None:
        return self.typed(key, (str,), "a string or null", optional=True)

    def integer(self, key: str) -> int:
        return self.typed(key, (int,), "an integer")

    def optional_integer(self, key: str) -> int | None:
        return self.typed(key, (int,), "an integer or null", optional=True)

    def boolean(self, key: str) -> bool:
        return self.typed(key, (bool,), "true or false")

    def array(self, key: str) -> list:
        return self.typed(key, (list,), "a list")

    def objects(self, key: str, read) -> tuple:
        """The list `key` of objects, each read by `read(item, path)`."""
        return tuple(read(item, f"{self.path(key)}[{i}]") for i, item in enumerate(self.array(key)))

    def strings(self, key: str) -> tuple[str, ...]:
        values = self.array(key)
        for i, v in enumerate(values):
            if not isinstance(v, str):
                raise FormatError(f"{self.path(key)}[{i}]", f"expected a string, found {_json_type(v)}")
        return tuple(values)

    def expr(self, key: str) -> Expr:
        text = self.string(key)
        try:
            return parse(text)
        except CalculusSyntaxError as exc:
            raise FormatError(self.path(key), f"not a calculus expression: {exc}") from None


def _json_type(value: object) -> str:
    names = {type(None): "null", bool: "true/false", int: "an integer", float: "a number", str: "a string",
             list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)
