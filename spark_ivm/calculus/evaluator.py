"""Reference evaluator: runs calculus expressions over in-memory Z_Rel databases.

A database maps relation names to `{tuple: multiplicity}`; `deltas` does the same for batches and
`maps` holds materialized maps `{key tuple: value}`. The evaluator is deliberately simple (nested
loops, no indexes): it is the oracle the compiler's tests check plans against.

NULL (None) follows SQL: comparisons with NULL are 0 (except `is` / `is not`), functions of NULL are
NULL, and a NULL contribution to a sum or an aggregate counts as 0 (SQL's SUM skips NULLs).

A nested aggregate (a lift's body) depends only on the database and the values of the variables it
mentions, so within one evaluation it is computed once per binding of those: a correlated subquery
runs once per correlation key, not once per outer row.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Mapping

from spark_ivm.calculus import functions
from spark_ivm.calculus.analysis import all_vars
from spark_ivm.calculus.expressions import (
    AggSum, Cmp, Const, DeltaRel, Exists, Expr, Fn, Lift, MapRef, Prod, Rel, Sum, Var,
)

Row = tuple
Relation = dict  # {tuple: int}
Bindings = tuple  # sorted tuple of (var, value)


@dataclass
class Database:
    relations: dict[str, Relation] = field(default_factory=dict)
    deltas: dict[str, Relation] = field(default_factory=dict)
    maps: dict[str, dict] = field(default_factory=dict)

    def copy(self) -> "Database":
        return Database({k: dict(v) for k, v in self.relations.items()},
                        {k: dict(v) for k, v in self.deltas.items()},
                        {k: dict(v) for k, v in self.maps.items()})


class EvaluationError(Exception):
    pass


def _is_zero(v) -> bool:
    return v is None or (not isinstance(v, str) and v == 0)


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return functions.call("+", [a, b])


def _mul(a, b):
    if a is None or b is None:
        return None
    return functions.call("*", [a, b])


_nested_values: dict | None = None  # the values of nested aggregates during one top-level evaluation


def evaluate(e: Expr, db: Database, env: Mapping[str, object] | None = None) -> dict[Bindings, object]:
    """Result of e under env: {bindings of newly bound variables (sorted pairs): value ≠ 0}."""
    global _nested_values
    if _nested_values is not None:
        return _evaluate(e, db, env)
    _nested_values = {}
    try:
        return _evaluate(e, db, env)
    finally:
        _nested_values = None


def _evaluate(e: Expr, db: Database, env: Mapping[str, object] | None) -> dict[Bindings, object]:
    out: dict[Bindings, object] = {}
    for b, v in _eval(e, db, dict(env or {})):
        key = tuple(sorted(b.items(), key=lambda kv: kv[0]))
        out[key] = _add(out.get(key), v)
    return {k: v for k, v in out.items() if not _is_zero(v)}


def scalar(e: Expr, db: Database, env: Mapping[str, object] | None = None):
    """The value of an expression without output variables (0 when it has no row)."""
    env = env or {}
    if _nested_values is not None:
        key = (e, tuple((v, type(env[v]), env[v]) for v in all_vars(e) if v in env))
        if key not in _nested_values:
            _nested_values[key] = _scalar(e, db, env)
        return _nested_values[key]
    return _scalar(e, db, env)


def _scalar(e: Expr, db: Database, env: Mapping[str, object]):
    res = evaluate(e, db, env)
    if not res:
        return 0
    if list(res) != [()]:
        raise EvaluationError(f"expression has output variables: {e}")
    return res[()]


def value_of(e: Expr, db: Database, env: Mapping[str, object]):
    """A value term's value, keeping NULL (used for lifts, comparisons, function arguments)."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        try:
            return env[e.name]
        except KeyError:
            raise EvaluationError(f"unbound variable {e.name}") from None
    if isinstance(e, Fn):
        return functions.call(e.name, [value_of(a, db, env) for a in e.args])
    if isinstance(e, Cmp):
        return _compare(e.op, value_of(e.left, db, env), value_of(e.right, db, env))
    if isinstance(e, Prod):
        acc = 1
        for f in e.factors:
            acc = _mul(acc, value_of(f, db, env))
        return acc
    return scalar(e, db, env)


def _compare(op: str, a, b) -> int:
    if op == "is":
        return int(a == b if a is not None and b is not None else a is b)
    if op == "is not":
        return 1 - _compare("is", a, b)
    if a is None or b is None:
        return 0
    if op == "=":
        return int(a == b)
    if op == "!=":
        return int(a != b)
    if op == "<":
        return int(a < b)
    if op == "<=":
        return int(a <= b)
    if op == ">":
        return int(a > b)
    if op == ">=":
        return int(a >= b)
    raise EvaluationError(f"unknown comparison {op}")


def _match(names, row, env):
    """Bindings of a relation row against env, or None when a bound variable disagrees."""
    new: dict[str, object] = {}
    for n, v in zip(names, row):
        if n in env:
            if env[n] != v or (env[n] is None) != (v is None):
                return None
        elif n in new:
            if new[n] != v:
                return None
        else:
            new[n] = v
    return new


def _eval(e: Expr, db: Database, env: dict):
    if isinstance(e, (Const, Var, Fn, Cmp)):
        v = value_of(e, db, env)
        if not _is_zero(v):
            yield {}, v
        return
    if isinstance(e, (Rel, DeltaRel, MapRef)):
        if isinstance(e, Rel):
            table, names = db.relations.get(e.name), e.vars
        elif isinstance(e, DeltaRel):
            table, names = db.deltas.get(e.name, {}), e.vars
        else:
            table, names = db.maps.get(e.name), e.keys
        if table is None:
            raise EvaluationError(f"unknown relation or map {e.name}")
        for row, mult in table.items():
            if len(row) != len(names):
                raise EvaluationError(f"{e.name} has arity {len(row)}, used with {len(names)}")
            b = _match(names, row, env)
            if b is not None and not _is_zero(mult):
                yield b, mult
        return
    if isinstance(e, Sum):
        for t in e.terms:
            yield from _eval(t, db, env)
        return
    if isinstance(e, Prod):
        partial = [({}, 1)]
        for f in e.factors:
            nxt = []
            for b, v in partial:
                for b2, v2 in _eval(f, db, {**env, **b}):
                    nxt.append(({**b, **b2}, _mul(v, v2)))
            partial = nxt
            if not partial:
                return
        yield from partial
        return
    if isinstance(e, Lift):
        val = value_of(e.expr, db, env)
        if e.var in env:
            if _compare("is", env[e.var], val):
                yield {}, 1
        else:
            yield {e.var: val}, 1
        return
    if isinstance(e, AggSum):
        groups: dict[Bindings, object] = defaultdict(lambda: None)
        for b, v in _eval(e.expr, db, env):
            missing = [g for g in e.group if g not in b and g not in env]
            if missing:
                raise EvaluationError(f"group variable {missing[0]} is not bound in {e}")
            key = tuple((g, b[g]) for g in e.group if g in b)
            groups[key] = _add(groups[key], v)
        for key, v in groups.items():
            if not _is_zero(v):
                yield dict(key), v
        return
    if isinstance(e, Exists):
        for b, v in evaluate(e.expr, db, env).items():
            yield dict(b), 1
        return
    raise EvaluationError(f"cannot evaluate {e!r}")


def evaluate_map(definition: Expr, keys: tuple[str, ...], db: Database) -> dict[tuple, object]:
    """A map's contents {key tuple: value} computed from its definition."""
    out = {}
    for b, v in evaluate(definition, db).items():
        d = dict(b)
        out[tuple(d[k] for k in keys)] = v
    return out


def initial_maps(plan, db: Database) -> None:
    """Fill db.maps with every map of the plan computed from its definition."""
    for m in plan.maps:
        db.maps[m.name] = evaluate_map(m.definition, m.keys, db)


def apply_batch(plan, db: Database, relation: str, batch: Relation) -> None:
    """Run the plan's trigger for one batch of `relation` ({tuple: ±multiplicity}) and apply the
    batch to the base relation and the maps. Every statement reads the maps before the batch and the
    batch; `+=` statements read the base relations before it, `:=` ones after it."""
    trigger = plan.trigger(relation)
    statements = trigger.statements if trigger is not None else ()
    db.deltas = {relation: {t: m for t, m in batch.items() if m != 0}}
    increments = [(s.target, evaluate_map(s.expr, s.keys, db)) for s in statements if s.op == "+="]
    base = db.relations.setdefault(relation, {})
    for t, m in batch.items():
        n = base.get(t, 0) + m
        if n:
            base[t] = n
        else:
            base.pop(t, None)
    contents = [(s.target, evaluate_map(s.expr, s.keys, db)) for s in statements if s.op == ":="]
    db.deltas = {}
    db.maps.update(contents)
    for target, inc in increments:
        current = db.maps.setdefault(target, {})
        for k, v in inc.items():
            new = _add(current.get(k), v)
            if _is_zero(new):
                current.pop(k, None)
            else:
                current[k] = new
