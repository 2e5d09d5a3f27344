"""Calculus → Spark SQL.

Every expression becomes a SELECT whose columns are the expression's output variables (named after
the variables) plus `__v`, the value. A product is one SELECT over the joins of its relation-like
factors (base tables, batches, maps, sub-aggregates); variables shared by two factors join
NULL-safely (`<=>`) because a shared variable is a natural join in the calculus (SQL's `=` was
already turned into a shared variable plus an `IS NOT NULL` guard by the rules). Comparisons become
WHERE conditions, lifts computed columns, values factors of `__v`. A sum is a UNION ALL; an
AggSum a GROUP BY with SUM(__v) (which, like the calculus, skips NULL contributions).

Nested aggregates (lifts `(z ^= t)` of a t that reads relations or maps, `Exists(e)`, aggregates
inside comparisons) and sub-expressions correlated with their product (they mention variables the
product binds, other than as outputs to join on) are evaluated once per distinct binding of those
variables, as the reference evaluator does: the product so far becomes a stage (a CTE), the stage's
distinct bindings a domain the sub-expression's SELECT starts from, and the result, grouped by the
domain's variables, joins back NULL-safely. A lift joins it with LEFT JOIN and COALESCE(…, 0): a
binding without rows is the value 0 in the calculus. Lifts that sum different values over one product (TPC-H Q17's
average per part, a sum and a count; maps of a family read as its rows, see read_as_families) are one
such SELECT with a sum per lift. A statement with stages is
`SELECT * FROM (WITH stage1 AS (…), … SELECT …)`, so it can stand wherever a SELECT can.

Starting from the domain pairs each binding with every row of the sub-expression that no join on a
domain variable narrows. A nested value avoids the pairs where its correlation allows (see
`SqlGen._correlated`): a variable it binds itself by a lift is joined on after it, and a variable it
only compares by one inequality is a running sum (a window) over its rows and the bindings sorted together.

Spark inlines every deterministic CTE at each of its uses, and a stage is read by the next stage, by
its domain and by the sub-expression's SELECT: a chain of stages is computed again at every level, and
a statement with a few correlated parts spends seconds to minutes on a batch of a few rows. So the
runtime gives `Sources.stage`, which computes a stage's rows once (a checkpoint) before the statement
that reads them is made; the statement then reads the stage by name, and each domain is a DISTINCT
subquery over it.

Longer than most modules: translating one node calls the translation of the others, and the SQL of a
statement needs them all; the stages' computation is left to the runtime (Sources).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Callable, Sequence

from spark_ivm.calculus import functions
from spark_ivm.calculus.analysis import all_vars, factors_of, join_order, ovars
from spark_ivm.calculus.expressions import (
    AggSum, Cmp, Const, DeltaRel, Exists, Expr, Fn, Lift, MapRef, Prod, Rel, Sum, Var, aggsum, lift, prod,
)
from spark_ivm.errors import UnsupportedQueryError
from spark_ivm.runtime.factor_shapes import (
    as_aggsum, bound_by_lift, is_pure, joins_batch_in_every_term, only_compared, weighs_only,
)
from spark_ivm.runtime.families import Families, read_as_families

VALUE = "__v"
MULTIPLICITY = "__m"


@dataclass(frozen=True)
class Sources:
    """Where the SQL reads each atom from.

    relation(name) / delta(name): a SQL table expression with the relation's columns (`columns(name)`,
    in schema order); a delta also has `__m`, the consolidated signed multiplicity of each row.
    map(name): a SQL table expression with the map's key columns (named as the map declares them,
    given by `map_keys(name)`) and `__v`: the map as a relation with multiplicities, where a key may have
    several rows whose values add up (every use of a map here is summed, or aggregated first).
    """

    relation: Callable[[str], str]
    delta: Callable[[str], str]
    map: Callable[[str], str]
    columns: Callable[[str], Sequence[str]]
    map_keys: Callable[[str], Sequence[str]]
    # stage(SELECT): the name of a table holding the SELECT's rows, computed once now; None: the stages
    # are CTEs of the statement (see the module doc).
    stage: Callable[[str], str] | None = None
    # drives(delta name): whether the batch is small enough to drive the joins of a product it starts:
    # the rows joined so far are broadcast to each further join, which then scans its table or map
    # instead of shuffling and sorting it (see _Scope.driven). None: never.
    drives: Callable[[str], bool] | None = None
    # Maps read as their family's rows where several of them are summed over one product (see fused.py).
    families: Families = field(default_factory=dict)
    # The statements read whole relations, no batch (a view's maps computed at CREATE): a nested
    # aggregate that outputs every variable it shares with its product is computed for all its bindings
    # and joined, as a nested relation is (see _nested_value).
    whole: bool = False


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def literal_sql(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, Decimal):
        return f"{value}BD"
    if isinstance(value, int):
        return f"{value}" if -(2**31) <= value < 2**31 else f"{value}L"
    if isinstance(value, float):
        return f"CAST('{value!r}' AS DOUBLE)"
    if isinstance(value, datetime.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, datetime.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    raise TypeError(f"no SQL literal for {value!r}")


# A string literal, a quoted identifier or one of the table aliases SqlGen makes (`t12`).
_ALIAS_TOKENS = re.compile(r"'(?:[^'\\]|\\.)*'|`(?:[^`]|``)*`|\bt\d+\b")


def canonical_aliases(sql: str) -> str:
    """The SELECT with its table aliases numbered in order of first use. A stage's aliases are its own, but
    their numbers depend on what the statement generated before it: so numbered, the stages that several
    statements of a refresh share are the same text, and the runtime computes each once."""
    names: dict[str, str] = {}

    def rename(m: re.Match) -> str:
        token = m.group(0)
        return token if token[0] in "'`" else names.setdefault(token, f"t{len(names) + 1}")

    return _ALIAS_TOKENS.sub(rename, sql)


_CMP_SQL = {"=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
# Functions whose reference implementation returns 0/1 but whose Spark form is a boolean.
BOOLEAN_FUNCTIONS = {"like", "ilike", "rlike", "in"}


def statement_sql(e: Expr, keys: Sequence[str], sources: Sources, consolidated: bool = True) -> str:
    """SELECT keys…, __v: e summed per key, zero and NULL sums dropped; or, not consolidated, e's rows
    with their keys and values, for a caller that sums them per key itself (one aggregation for many
    statements instead of one each)."""
    return SqlGen(sources).statement(e, keys, consolidated)


@dataclass(frozen=True)
class _Select:
    sql: str
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class _Domain:
    """The distinct bindings of some variables (a named stage) a correlated expression is evaluated for."""

    table: str
    vars: tuple[str, ...]
    driven: bool = False  # the bindings come from a product a small batch drives


@dataclass
class _Scope:
    """The SELECT being built for one product."""

    sources: list[str] = field(default_factory=list)  # "FROM x AS t0" / "JOIN y AS t1 ON …"
    columns: dict[str, str] = field(default_factory=dict)  # variable -> SQL expression
    conditions: list[str] = field(default_factory=list)
    weights: list[str] = field(default_factory=list)  # factors of __v
    # Driven by a small batch: each further join reads the rows joined so far as a subquery hinted for
    # broadcast. Spark estimates a join's size as the product of its inputs' sizes, so without the hint
    # the second join of a batch with two large maps is a sort-merge join that shuffles and sorts the
    # whole second map on every refresh (TPC-H Q10's second map, large enough to spill to disk).
    driven: bool = False
    # The rows joined so far come from a factor each of whose terms joins a batch: few, whatever its size.
    bounded: bool = False
    broadcast: str | None = None  # the alias of the broadcast rows joined so far
    # The distinct bindings the last correlated part was evaluated for. Later joins only filter or repeat
    # the rows (the variables' values stay), so they still hold every binding a later part needs.
    domain: "_Domain | None" = None

    def add_source(self, table_sql: str, alias: str, on: list[str]) -> None:
        if not self.sources:
            self.sources.append(f"FROM {table_sql} AS {alias}")
            self.conditions.extend(on)
        else:
            join = f"JOIN {table_sql} AS {alias} ON " + " AND ".join(on) if on else f"CROSS JOIN {table_sql} AS {alias}"
            self.sources.append(join)

    def read_from(self, table_sql: str, alias: str, broadcast: bool = False) -> None:
        """From now on the rows joined so far are read from `table_sql` (this scope's SELECT, computed apart
        or nested): a column per bound variable and __v; broadcast: hinted for broadcast to the next join."""
        self.columns = {v: f"{alias}.{quote(v)}" for v in self.columns}
        self.sources = [f"FROM {table_sql} AS {alias}"]
        self.conditions = []
        self.weights = [f"{alias}.{VALUE}"]
        self.broadcast = alias if broadcast else None

    def sql(self, variables: Sequence[str] | None = None) -> str:
        """The SELECT, with a column per bound variable (or per one of `variables`)."""
        cols = [f"{self.columns[v]} AS {quote(v)}" for v in (self.columns if variables is None else variables)]
        weight = " * ".join(self.weights) if self.weights else "1"
        hint = f"/*+ BROADCAST({self.broadcast}) */ " if self.broadcast else ""
        text = f"SELECT {hint}{', '.join(cols + [f'{weight} AS {VALUE}'])}"
        if self.sources:
            text += " " + " ".join(self.sources)
        if self.conditions:
            text += " WHERE " + " AND ".join(self.conditions)
        return text


class SqlGen:
    """One statement's SQL, with the stages (CTEs) its correlated parts need (see the module doc)."""

    def __init__(self, sources: Sources):
        self.sources = sources
        self._aliases = 0
        self._stages: list[tuple[str, str]] = []  # (CTE name, SELECT), each reading only earlier ones

    def _alias(self) -> str:
        self._aliases += 1
        return f"t{self._aliases}"

    def _stage(self, sql: str) -> str:
        if self.sources.stage is not None:
            return self.sources.stage(canonical_aliases(sql))
        name = f"stage{len(self._stages) + 1}"
        self._stages.append((name, sql))
        return name

    def statement(self, e: Expr, keys: Sequence[str], consolidated: bool = True) -> str:
        return self._with_stages(self.aggregate(e, keys, consolidated))

    def sums(self, e: Expr, values: Sequence[Expr], keys: Sequence[str]) -> str:
        """SELECT keys…, __v0, __v1, …: per binding of the keys, the sum of e's rows times each value
        (values over e's variables): the aggregates of several statements over one product in one pass."""
        needed = (*keys, *(v for x in values for v in all_vars(x)))
        inner = self.select(e, only=set(needed))
        missing = [k for k in needed if k not in inner.outputs]
        if missing:
            raise UnsupportedQueryError(f"variable {missing[0]} not bound by {e}")
        columns = {v: f"p.{quote(v)}" for v in inner.outputs}
        sums = [f"SUM(p.{VALUE} * {self.value(x, columns)}) AS {VALUE}{i}" for i, x in enumerate(values)]
        cols = ", ".join(quote(k) for k in keys)
        group = f" GROUP BY {cols}" if keys else ""
        return self._with_stages(f"SELECT {cols + ', ' if keys else ''}{', '.join(sums)} FROM ({inner.sql}) AS p{group}")

    def _with_stages(self, body: str) -> str:
        if not self._stages:
            return body
        ctes = ", ".join(f"{name} AS ({sql})" for name, sql in self._stages)
        return f"SELECT * FROM (WITH {ctes} {body}) AS staged"

    # -- relations ---------------------------------------------------------------------------------
    def aggregate(self, e: Expr, keys: Sequence[str], consolidated: bool = True) -> str:
        if isinstance(e, AggSum) and set(e.group) == set(keys):
            e = e.expr  # grouped below anyway
        inner = self.select(e, only=set(keys))
        missing = [k for k in keys if k not in inner.outputs]
        if missing:
            raise UnsupportedQueryError(f"key {missing[0]} not bound by {e}")
        cols = ", ".join(quote(k) for k in keys)
        if not consolidated:
            return f"SELECT {cols + ', ' if keys else ''}{VALUE} FROM ({inner.sql}) AS agg"
        group = f" GROUP BY {cols}" if keys else ""
        head = f"{cols}, " if keys else ""
        return (f"SELECT {head}SUM({VALUE}) AS {VALUE} FROM ({inner.sql}) AS agg{group} "
                f"HAVING SUM({VALUE}) <> 0")

    def select(self, e: Expr, domain: _Domain | None = None, only: set[str] | None = None) -> _Select:
        """e's rows: one per binding of the domain's variables and e's output variables, with `__v`; with
        `only`, a product's rows carry only those variables (the others are summed over by the caller)."""
        bound = domain.vars if domain else ()
        if isinstance(e, Sum):
            outs = bound + tuple(o for o in ovars(e) if o not in bound and (only is None or o in only))
            parts = []
            for t in e.terms:
                s = self.select(t, domain, only)
                cols = ", ".join(quote(o) if o in s.outputs else f"NULL AS {quote(o)}" for o in outs)
                parts.append(f"SELECT {cols + ', ' if cols else ''}{VALUE} FROM ({s.sql}) AS u")
            return _Select(" UNION ALL ".join(parts), outs)
        if isinstance(e, AggSum):
            # The rows summed carry only the variables grouped by: Spark's analysis and optimization of a
            # statement take time in the number of columns its subqueries carry, and the GROUP BY drops the others.
            inner = self.select(e.expr, domain, only={*bound, *e.group})
            group = list(bound) + [g for g in e.group if g in inner.outputs and g not in bound]
            cols = ", ".join(quote(g) for g in group)
            sql = (f"SELECT {cols + ', ' if cols else ''}SUM({VALUE}) AS {VALUE} FROM ({inner.sql}) AS a"
                   + (f" GROUP BY {cols}" if cols else ""))
            return _Select(sql, tuple(group))
        if isinstance(e, Exists):
            inner = self.select(e.expr, domain)
            cols = ", ".join(quote(o) for o in inner.outputs)
            sql = (f"SELECT {cols + ', ' if cols else ''}1 AS {VALUE} FROM ({inner.sql}) AS x"
                   + (f" GROUP BY {cols}" if cols else "") + f" HAVING SUM({VALUE}) <> 0")
            return _Select(sql, inner.outputs)
        return self._product(factors_of(e), domain, only)

    def _product(self, factors: Sequence[Expr], domain: _Domain | None, only: set[str] | None = None) -> _Select:
        scope = _Scope()
        if domain is not None:
            alias = self._alias()
            scope.add_source(domain.table, alias, [])
            scope.columns.update((v, f"{alias}.{quote(v)}") for v in domain.vars)
            scope.driven = domain.driven
            scope.domain = domain
        # Bind before use: a condition may precede the factor binding its variable (bound outside).
        ordered = join_order(factors, scope.columns)
        # What only weighs the rows goes last, after the nested parts: the stage a nested part makes of
        # the rows so far is then the same for statements that differ only by what they sum (TPC-H Q17's
        # count, sum and count of non-NULL values), and the runtime computes it once for all of them.
        nested = {v for f in factors if not (is_pure(f) or isinstance(f, (Rel, DeltaRel, MapRef)))
                  for v in all_vars(f)}
        ordered = sorted(ordered, key=lambda f: weighs_only(f, nested))  # stable: the join order otherwise
        while ordered:
            f = ordered.pop(0)
            together = self._lifts_of_one_product(f, ordered, scope)
            if len(together) < 2:
                self._factor(f, scope)
                continue
            ordered = [g for g in ordered if not any(g is h for h, _ in together)]
            for (g, _), value in zip(together, self._values_of_one_product(together, scope)):
                scope.columns[g.var] = value
        kept = tuple(v for v in scope.columns if only is None or v in only)
        return _Select(scope.sql(kept), kept)

    def _sum_parts(self, f: Expr, scope: _Scope) -> tuple[tuple, list[Expr]] | None:
        """For a lift of a new variable to a nested sum (of AggSums) correlated with the scope and evaluated
        from its bindings as they are (see _correlated): (its shape: its correlation and each term's group and
        factors other than values, maps of a family read as its rows; each term's values); None otherwise."""
        if not isinstance(f, Lift) or f.var in scope.columns:
            return None
        terms = tuple(as_aggsum(t) for t in (f.expr.terms if isinstance(f.expr, Sum) else (f.expr,)))
        shared = self._shared(f.expr, scope)
        if not shared or not all(isinstance(t, AggSum) for t in terms):
            return None
        shape, values = [], []
        for t in terms:
            factors = read_as_families(factors_of(t.expr), self.sources.families)
            if any(bound_by_lift(v, factors) or only_compared(v, factors, shared) for v in shared):
                return None
            shape.append((t.group, tuple(x for x in factors if not is_pure(x))))
            values.append(prod(*(x for x in factors if is_pure(x))))
        return (shared, tuple(shape)), values

    def _lifts_of_one_product(self, f: Expr, later: Sequence[Expr], scope: _Scope) -> list[tuple[Expr, tuple]]:
        """f and the later lifts that sum other values over the same products, maps of a family read as its
        rows (TPC-H Q17's average quantity per part: a sum and a count, of one family), to be computed together
        by one join. A later lift joins only if computing it now changes nothing: it reads no variable the
        others lift or a later factor binds. Each lift with its parts (_sum_parts)."""
        parts = self._sum_parts(f, scope)
        if parts is None:
            return [(f, None)]
        together = [(f, parts)]
        for g in later:
            other = self._sum_parts(g, scope)
            if other is None or other[0] != parts[0]:
                continue
            bound_later = {v for h in later if h is not g and not any(h is t for t, _ in together)
                           for v in all_vars(h)}
            free = set(all_vars(g.expr)) - set(scope.columns)
            lifted = {h.var for h, _ in together}
            if free & bound_later or free & lifted or any(g.var in all_vars(h.expr) for h, _ in together):
                continue
            together.append((g, other))
        return together

    def _values_of_one_product(self, lifts: Sequence[tuple[Lift, tuple]], scope: _Scope) -> list[str]:
        """The SQL values of nested sums over the same products (_lifts_of_one_product) for each row of the
        scope, by one join: per term, its product's rows per binding of the correlation, each lift's values
        summed into a column of its own; the terms' sums added."""
        (shared, shape), _ = lifts[0][1]
        values = [own for _, (_, own) in lifts]
        whole = self._whole(scope, shared, [prod(*heavy) for _, heavy in shape])
        domain = None if whole else self._domain(scope, shared)
        head = ", ".join(quote(v) for v in shared)
        columns = [f"{VALUE}{i}" for i in range(len(lifts))]
        parts = []
        for j, (_, heavy) in enumerate(shape):
            read = {v for own in values for v in all_vars(own[j])}
            rows = self.select(prod(*heavy), domain, only={*shared, *read})
            bound = {v: f"p.{quote(v)}" for v in rows.outputs}
            sums = ", ".join(f"SUM(p.{VALUE} * {self.value(own[j], bound)}) AS {c}" for own, c in zip(values, columns))
            parts.append(f"SELECT {head}, {sums} FROM ({rows.sql}) AS p GROUP BY {head}")
        total = ", ".join(f"SUM({c}) AS {c}" for c in columns)
        grouped = (parts[0] if len(parts) == 1
                   else f"SELECT {head}, {total} FROM ({' UNION ALL '.join(parts)}) AS n GROUP BY {head}")
        alias = self._alias()
        on = " AND ".join(f"{scope.columns[v]} <=> {alias}.{quote(v)}" for v in shared)
        scope.sources.append(f"LEFT JOIN ({grouped}) AS {alias} ON {on}")
        return [f"COALESCE({alias}.{c}, 0)" for c in columns]

    def _factor(self, f: Expr, scope: _Scope) -> None:
        if isinstance(f, (Rel, DeltaRel)):
            columns = list(self.sources.columns(f.name))
            if len(columns) != len(f.vars):
                raise ValueError(f"{f.name} has {len(columns)} columns, the calculus uses {len(f.vars)}")
            table = self.sources.relation(f.name) if isinstance(f, Rel) else self.sources.delta(f.name)
            alias = self._alias()
            first = not scope.sources
            self._bind(scope, table, alias, list(zip(f.vars, columns)))
            if isinstance(f, DeltaRel):
                scope.weights.append(f"{alias}.{MULTIPLICITY}")
                scope.bounded |= first
                if first and self._batch_only(f):
                    scope.driven = True
        elif isinstance(f, MapRef):
            alias = self._alias()
            self._bind(scope, self.sources.map(f.name), alias, list(zip(f.keys, self.sources.map_keys(f.name))))
            scope.weights.append(f"{alias}.{VALUE}")
        elif isinstance(f, Lift):
            if is_pure(f.expr):
                value = self.value(f.expr, scope.columns)
            elif isinstance(f.expr, (Fn, Cmp)):
                value = self.value(self._nested_values_bound(f.expr, scope), scope.columns)
            else:
                value = self._nested_value(f.expr, scope)
            if f.var in scope.columns:
                scope.conditions.append(f"{scope.columns[f.var]} <=> {value}")
            else:
                scope.columns[f.var] = value
        elif isinstance(f, Cmp):
            scope.conditions.append(self.condition(self._nested_values_bound(f, scope), scope.columns))
        elif is_pure(f) or isinstance(f, Fn):
            scope.weights.append(self.value(self._nested_values_bound(f, scope), scope.columns))
        else:
            self._nested_relation(f, scope)

    def _nested_values_bound(self, e: Expr, scope: _Scope) -> Expr:
        """e (a value) with each nested aggregate inside it replaced by a variable the scope binds to
        the aggregate's value. All of them are bound before any SQL of e is taken from the scope's
        columns, which a correlated aggregate re-stages."""
        if is_pure(e):
            return e
        if isinstance(e, (Fn, Cmp)):
            return e.with_children(tuple(self._nested_values_bound(c, scope) for c in e.children()))
        name = f"__n{len(scope.columns)}_{self._aliases}"
        scope.columns[name] = self._nested_value(e, scope)
        return Var(name)

    def _shared(self, e: Expr, scope: _Scope) -> tuple[str, ...]:
        """The variables of e the scope binds (inside e they are bound from outside: correlation)."""
        return tuple(v for v in all_vars(e) if v in scope.columns)

    def _whole(self, scope: _Scope, shared: Sequence[str], parts: Sequence[Expr]) -> bool:
        """Whether nested parts correlated with the scope on `shared` are evaluated for all their own
        bindings and joined to the scope's rows, not from the scope's distinct bindings (a domain): where
        the statement reads whole relations (Sources.whole) and every part binds the shared variables
        itself. The domain would evaluate the product so far once more (or copy it, as a stage) to
        restrict parts that read whole relations anyway."""
        return (self.sources.whole and not scope.bounded
                and all(set(shared) <= set(ovars(part)) for part in parts))

    def _domain(self, scope: _Scope, names: Sequence[str]) -> _Domain:
        """Turn the scope into a stage that the scope then reads; the stage's distinct bindings of names. A
        scope's correlated parts on the same variables (or fewer of them) share one stage: TPC-H Q17's
        AVG is a sum and a count, Q18's HAVING three sums, each re-evaluated for the keys a batch changes."""
        if scope.domain is not None and set(names) <= set(scope.domain.vars):
            return self._restricted(scope.domain, tuple(v for v in scope.domain.vars if v in names))
        stage = self._stage(scope.sql())
        scope.read_from(stage, self._alias())
        distinct = f"SELECT DISTINCT {', '.join(quote(n) for n in names)} FROM {stage}"
        # Over a computed stage, a domain costs one aggregation wherever it is read: not worth computing apart.
        scope.domain = _Domain(f"({distinct})" if self.sources.stage else self._stage(distinct), tuple(names),
                               scope.driven)
        return scope.domain

    def _nest(self, scope: _Scope) -> None:
        """Make the rows the scope has joined so far one subquery, broadcast to the join that follows."""
        scope.read_from(f"({scope.sql()})", self._alias(), broadcast=True)

    def _nested_value(self, e: Expr, scope: _Scope) -> str:
        """The SQL value of a nested aggregate for each row of the scope (0 where it has no rows)."""
        shared = self._shared(e, scope)
        alias = self._alias()
        if not shared:
            sub = self.select(e)
            scope.add_source(f"(SELECT SUM({VALUE}) AS {VALUE} FROM ({sub.sql}) AS n)", alias, [])
            return f"COALESCE({alias}.{VALUE}, 0)"
        sub = self.select(e) if self._whole(scope, shared, [e]) else self._correlated(e, self._domain(scope, shared))
        cols = ", ".join(quote(v) for v in shared)
        grouped = f"SELECT {cols}, SUM({VALUE}) AS {VALUE} FROM ({sub.sql}) AS n GROUP BY {cols}"
        on = " AND ".join(f"{scope.columns[v]} <=> {alias}.{quote(v)}" for v in shared)
        scope.sources.append(f"LEFT JOIN ({grouped}) AS {alias} ON {on}")
        return f"COALESCE({alias}.{VALUE}, 0)"

    def _correlated(self, e: Expr, domain: _Domain) -> _Select:
        """e's rows (to be summed per binding) for each binding of the domain's variables.

        Evaluated from the domain, e pairs every binding with every row of e that no join on a domain
        variable narrows. Two kinds of correlation are evaluated without the pairs:
        - a variable that e binds itself by a lift, `(x ^= t)` (an equality test when x is bound outside),
          is left out of the domain: e computes x, and its rows join the bindings on x afterwards;
        - a variable that e only compares, by one inequality `{t < x}`, is a running sum: e's rows summed
          per value of t and the bindings' values of x sorted together, each binding summing the rows
          before it.
        TPC-H Q15 tests `= (SELECT MAX(total_revenue) …)` by counting, per supplier, the suppliers with the
        same revenue and those with more: pairs of suppliers, quadratic in them, become a join and a sort
        linear in them."""
        if not isinstance(e, AggSum):
            return self.select(e, domain)
        factors = factors_of(e.expr)
        lifted = tuple(v for v in domain.vars if bound_by_lift(v, factors))
        if lifted:
            kept = tuple(v for v in domain.vars if v not in lifted)
            grouped = aggsum(e.group + tuple(v for v in lifted if v not in e.group), e.expr)
            return self.select(grouped, self._restricted(domain, kept))
        compared = next(((v, c) for v in domain.vars if (c := only_compared(v, factors, domain.vars))), None)
        if compared is None:
            return self.select(e, domain)
        x, (comparison, value, op) = compared  # value op x
        keys = tuple(v for v in domain.vars if v != x)
        r = f"__r_{x}"  # the value compared with x; a name of its own in the rows' scope
        rows = self.select(aggsum(keys + (r,), prod(*(f for f in factors if f is not comparison), lift(r, value))),
                           self._restricted(domain, keys))
        k = "".join(f"{quote(v)}, " for v in keys)
        # A binding (__p = 1) sums the rows sorted before it; at its own value, a strict comparison puts it first.
        order = ("ASC" if op in ("<", "<=") else "DESC") + (", __p DESC" if op in ("<", ">") else ", __p ASC")
        partition = f"PARTITION BY {k[:-2]} " if keys else ""
        both = (f"SELECT {k}{quote(x)} AS __r, 1 AS __p, NULL AS {VALUE} FROM {domain.table} AS d "
                f"WHERE {quote(x)} IS NOT NULL UNION ALL "
                f"SELECT {k}{quote(r)} AS __r, 0 AS __p, {VALUE} FROM ({rows.sql}) AS i WHERE {quote(r)} IS NOT NULL")
        running = (f"SELECT {k}__r, __p, SUM({VALUE}) OVER ({partition}ORDER BY __r {order} "
                   f"ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS {VALUE} FROM ({both}) AS b")
        return _Select(f"SELECT {k}__r AS {quote(x)}, {VALUE} FROM ({running}) AS s WHERE __p = 1", keys + (x,))

    def _restricted(self, domain: _Domain, names: tuple[str, ...]) -> _Domain | None:
        """The domain's distinct bindings of some of its variables; None for none."""
        if not names:
            return None
        if names == domain.vars:
            return domain
        distinct = f"(SELECT DISTINCT {', '.join(quote(n) for n in names)} FROM {domain.table})"
        return _Domain(distinct, names, domain.driven)

    def _nested_relation(self, f: Expr, scope: _Scope) -> None:
        shared = self._shared(f, scope)
        outputs = ovars(f)
        # Correlated on the variables f reads from the scope; and on those it outputs where the scope's rows
        # are few and f's are not (TPC-H Q13: whether each customer a batch touches has rows in the outer
        # join after it, evaluated for those customers, not for all of them and joined afterwards).
        batch_bounded = joins_batch_in_every_term(f)
        correlated = any(v not in outputs for v in shared) or bool(shared) and scope.bounded and not batch_bounded
        sub = self.select(f, self._domain(scope, shared) if correlated else None)
        alias = self._alias()
        first = not scope.sources
        self._bind(scope, f"({sub.sql})", alias, [(o, o) for o in sub.outputs])
        scope.weights.append(f"{alias}.{VALUE}")
        scope.bounded |= first and batch_bounded
        if first and self._batch_only(f):
            scope.driven = True  # e.g. the keys a batch changes, that a nested aggregate is re-evaluated for

    def _batch_only(self, e: Expr) -> bool:
        """Whether e reads batches small enough to drive joins (see Sources.drives), and nothing else."""
        atoms = [x for x in e.walk() if isinstance(x, (Rel, DeltaRel, MapRef))]
        return (self.sources.drives is not None and bool(atoms)
                and all(isinstance(x, DeltaRel) and self.sources.drives(x.name) for x in atoms))

    def _bind(self, scope: _Scope, table_sql: str, alias: str, var_columns) -> None:
        if scope.driven and scope.sources:
            self._nest(scope)
        on = []
        for var_name, column in var_columns:
            col = f"{alias}.{quote(column)}"
            if var_name in scope.columns:
                on.append(f"{col} <=> {scope.columns[var_name]}")
            else:
                scope.columns[var_name] = col
        scope.add_source(table_sql, alias, on)

    # -- values ------------------------------------------------------------------------------------
    def condition(self, e: Expr, columns: dict[str, str]) -> str:
        if isinstance(e, Cmp):
            left, right = self.value(e.left, columns), self.value(e.right, columns)
            if e.op == "is":
                return f"({left} <=> {right})"
            if e.op == "is not":
                return f"(NOT ({left} <=> {right}))"
            return f"({left} {_CMP_SQL[e.op]} {right})"
        return f"(COALESCE({self.value(e, columns)}, 0) <> 0)"

    def value(self, e: Expr, columns: dict[str, str]) -> str:
        if isinstance(e, Const):
            return literal_sql(e.value)
        if isinstance(e, Var):
            try:
                return columns[e.name]
            except KeyError:
                raise UnsupportedQueryError(f"variable {e.name} used before it is bound") from None
        if isinstance(e, Cmp):
            return f"(CASE WHEN {self.condition(e, columns)} THEN 1 ELSE 0 END)"
        if isinstance(e, Prod):
            return "(" + " * ".join(self.value(f, columns) for f in e.factors) + ")"
        if isinstance(e, Sum):
            return "(" + " + ".join(f"COALESCE({self.value(t, columns)}, 0)" for t in e.terms) + ")"
        if isinstance(e, Fn):
            return self._function(e, columns)
        raise UnsupportedQueryError(f"{type(e).__name__} inside a value: {e}")

    def _function(self, e: Fn, columns: dict[str, str]) -> str:
        if e.name == "case":
            pairs = e.args[: len(e.args) // 2 * 2]
            parts = [f"WHEN {self.condition(c, columns)} THEN {self.value(v, columns)}"
                     for c, v in zip(pairs[::2], pairs[1::2])]
            if len(e.args) % 2:
                parts.append(f"ELSE {self.value(e.args[-1], columns)}")
            return f"(CASE {' '.join(parts)} END)"
        try:
            template = functions.FUNCTIONS[e.name].spark_sql
        except KeyError:
            raise UnsupportedQueryError(f"function {e.name}") from None
        args = [self.value(a, columns) for a in e.args]
        sql = (template.replace("{*}", ", ".join(args)).replace("{rest}", ", ".join(args[1:]))
               .format(*args))
        return f"CAST({sql} AS INT)" if e.name in BOOLEAN_FUNCTIONS else sql
