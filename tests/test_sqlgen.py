"""Differential test of the SQL generation, without Spark: every map definition and every trigger
statement of every corpus plan (depths 0, 1 and unlimited), rendered as Spark SQL, transpiled by
sqlglot to DuckDB and run there on random small databases (NULLs, duplicate rows, batches with
negative multiplicities, maps as the reference evaluator computes them) gives what the reference
evaluator gives for the same expression. In the runtime's form, statements are fused and shared as a
refresh fuses and shares them, and batches are not consolidated: a row changed twice is two rows, and a
row inserted and deleted again is in the batch twice, with opposite signs."""

from __future__ import annotations

import datetime
import math
import random
import re
import uuid
from dataclasses import replace
from decimal import Decimal

import pytest

duckdb = pytest.importorskip("duckdb")
pa = pytest.importorskip("pyarrow")

from spark_ivm import compile_view
from spark_ivm.calculus.analysis import map_key_bindings
from spark_ivm.calculus.evaluator import Database, apply_batch, evaluate_map, initial_maps
from spark_ivm.calculus.parser import parse
from spark_ivm.compiler.plan import Statement
from spark_ivm.runtime.fused import Fused, fuse, fused_sql, shared_products, trigger_items, with_families, with_shared
from spark_ivm.runtime.key_conditions import map_conditions
from spark_ivm.runtime.local_sql import duckdb_sql
from spark_ivm.runtime.sqlgen import (
    MULTIPLICITY, VALUE, Sources, quote, statement_sql,
)

from corpus import NESTED_QUERIES, QUERIES, SCHEMAS
from test_tpch_compile import apply

DEPTHS = [0, 1, None]
SCENARIOS = 2


# -- running an expression in DuckDB -------------------------------------------------------------------

def _arrow_type(values):
    present = [v for v in values if v is not None]
    if all(isinstance(v, bool) for v in present) and present:
        return pa.bool_()
    if all(isinstance(v, int) for v in present):
        return pa.int64()
    if all(isinstance(v, Decimal) for v in present):
        return pa.decimal128(38, max(-v.as_tuple().exponent for v in present))
    if all(isinstance(v, (int, float, Decimal)) for v in present):
        return pa.float64()
    if all(isinstance(v, datetime.date) for v in present):
        return pa.date32()
    return pa.string()


def _table(columns, rows, types=None):
    data = {c: [r[i] for r in rows] for i, c in enumerate(columns)}
    fields = [pa.field(c, types[c] if types else _arrow_type(data[c])) for c in columns]
    schema = pa.schema(fields)
    return pa.table({c: pa.array([float(v) if pa.types.is_floating(schema.field(c).type) and v is not None
                                  else v for v in data[c]], type=schema.field(c).type) for c in columns})


class DuckDatabase:
    """The evaluator's database as DuckDB relations: base tables (one row per copy), batches with
    `__m`, maps with their keys and `__v`."""

    def __init__(self, schemas: dict[str, list[str]], types: dict[str, dict] | None = None,
                 consolidated: bool = True):
        self.schemas = schemas
        self.consolidated = consolidated  # else each batch row is |m| rows of ±1, plus a row that cancels
        self.types = types or {t: {c: pa.int64() for c in cols} for t, cols in schemas.items()}
        self.con = duckdb.connect()
        self.con.execute("SET threads = 1")  # tiny data: no use for parallel pipelines
        self.con.execute("PRAGMA disable_optimizer")  # nor for plans costing more than running them
        # Spark's division (NULL when dividing by zero), the only corpus function DuckDB spells otherwise.
        self.con.execute("CREATE MACRO try_divide(a, b) AS CASE WHEN b = 0 THEN NULL ELSE CAST(a AS DOUBLE) / b END")
        self._tables: dict[str, tuple] = {}  # name -> (rows, Arrow table DuckDB reads in place)
        self.stages: list[tuple[str, str]] = []  # (name, DuckDB SELECT) of the stages of statements made

    def load(self, db: Database, plan) -> None:
        for name in self.schemas:
            rows = [r for r, m in db.relations.get(name, {}).items() for _ in range(m)]
            self._register(f"rel_{name}", self.schemas[name], rows, self.types[name])
            batch = db.deltas.get(name, {})
            changes = [r + (m,) for r, m in batch.items()]
            if not self.consolidated:
                changes = [r + (1 if m > 0 else -1,) for r, m in batch.items() for _ in range(abs(m))]
                changes += [r + (sign,) for r in list(batch)[:1] for sign in (1, -1)]
            self._register(f"delta_{name}", self.schemas[name] + [MULTIPLICITY], changes,
                           {**self.types[name], MULTIPLICITY: pa.int64()})
        for m in plan.maps:
            contents = db.maps.get(m.name, {})
            self._register(f"map_{m.name}", list(m.keys) + [VALUE], [k + (v,) for k, v in contents.items()])

    def _register(self, name: str, columns, rows, types=None) -> None:
        key = (tuple(columns), tuple(sorted(rows, key=repr)))
        if self._tables.get(name, (None,))[0] == key:
            return
        table = _table(columns, rows, types)
        self._tables[name] = (key, table)  # DuckDB reads the Arrow table in place: keep it alive
        self.con.register(name, table)

    def sources(self, plan, runtime_form: bool = False) -> Sources:
        """runtime_form: the SQL as the runtime makes it for small batches: each stage is a table of its
        rows, computed before the statement that reads it, as the runtime's checkpoints are (see run), and
        the products a batch starts are nested subqueries hinted for broadcast."""
        keys = {m.name: m.keys for m in plan.maps}
        return Sources(relation=lambda r: quote(f"rel_{r}"), delta=lambda r: quote(f"delta_{r}"),
                       map=lambda m: quote(f"map_{m}"), columns=lambda r: self.schemas[r],
                       map_keys=lambda m: keys[m], stage=self._stage_table if runtime_form else None,
                       drives=(lambda r: True) if runtime_form else None)

    def _stage_table(self, sql: str) -> str:
        name = f"stage_{uuid.uuid4().hex[:12]}"
        self.stages.append((name, to_duckdb(sql)))  # computed by run, before the statement reading it
        return name

    def run(self, duck_sql: str, keys, stages=()) -> dict:
        for name, sql in stages:
            self.con.execute(f"CREATE OR REPLACE TABLE {name} AS {sql}")
        rows = self.con.execute(duck_sql).fetchall()
        return {tuple(r[: len(keys)]): r[len(keys)] for r in rows}


# The generated SQL differs from DuckDB's only in identifier quoting, the NULL-safe equality and
# decimal literals (the functions the corpus and TPC-H use, CASE, COALESCE, IN, LIKE, substring,
# year and arithmetic, are spelled alike; try_divide is a macro), so the runtime's token-level rewrite
# suffices; it is ~100 times faster than a sqlglot transpile of the large nested statements.
def to_duckdb(spark_sql: str) -> str:
    return duckdb_sql(spark_sql, checked=False)


def _norm(v):
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float, Decimal)):
        return round(float(v), 6)
    return v


def same(got: dict, want: dict) -> bool:
    got = {tuple(map(_norm, k)): v for k, v in got.items()}
    want = {tuple(map(_norm, k)): v for k, v in want.items()}
    if got.keys() != want.keys():
        return False
    return all(math.isclose(float(got[k]), float(want[k]), rel_tol=1e-9, abs_tol=1e-9) for k in want)


def expressions(plan, sources: Sources, runtime_form: bool = False):
    """(label, expr, keys, when, SQL) of every map definition and statement; `when` says which state the
    expression reads: "now" (definitions), "batch" (`+=`, before the batch) or "after" (`:=`). In the
    runtime's form a trigger's statements are fused (term by term where a statement has several) and share
    the products they have in common, as trigger_items makes them, and its `+=` statements read each map
    only at the keys the batch fixes (at_batch_keys), the maps that CREATE computes together read as one
    family's rows (see fused.py): a statement's SQL sums its pieces; the definitions are made as CREATE
    makes them, from whole relations."""
    families = plan_families(plan) if runtime_form else {}
    # CREATE computes the definitions from whole relations (Sources.whole).
    whole = replace(sources, whole=runtime_form)
    out = [(f"map {m.name}", m.definition, m.keys, "now", lambda m=m: statement_sql(m.definition, m.keys, whole))
           for m in plan.maps]
    for t in plan.triggers:
        shared, items = (trigger_items(t.statements, exact=lambda m: True, families=families) if runtime_form
                         else ({}, t.statements))
        # The `:=` statements are checked after the batch, when this database holds no batch to bound by.
        before = with_shared(with_families(at_batch_keys(sources, t.statements) if runtime_form else sources,
                                           families), shared)
        after = with_shared(with_families(sources, families), shared)
        pieces: dict[str, list] = {}  # a statement's target -> the SQL of each of its pieces
        for item in items:
            if isinstance(item, Fused):
                for j, (member, _) in enumerate(item.members):
                    pieces.setdefault(member.target, []).append(
                        lambda item=item, j=j, before=before: fused_member_sql(item, j, before))
            else:
                reading = before if item.op == "+=" else after
                pieces.setdefault(item.target, []).append(
                    lambda r=item, reading=reading: statement_sql(r.expr, r.keys, reading))
        assert len({s.target for s in t.statements}) == len(t.statements), "one statement per map and trigger"
        for s in t.statements:
            fused = any(isinstance(item, Fused) and s.target in item.targets for item in items)
            out.append((f"ON {t.relation} {s.target} {s.op}" + (" (fused)" if fused else ""), s.expr, s.keys,
                        "batch" if s.op == "+=" else "after",
                        lambda made=pieces.get(s.target, []), keys=s.keys: summed_sql(made, keys)))
    return out


def plan_families(plan) -> dict[str, tuple[str, ...]]:
    """The maps that share store rows, as CREATE makes them: those it computes by one aggregation."""
    made = fuse([Statement(m.name, m.keys, "+=", m.definition) for m in plan.maps])
    return {t: item.targets for item in made if isinstance(item, Fused) for t in item.targets}


def summed_sql(pieces, keys) -> str:
    """The increments of a statement computed in pieces, summed per key (keys whose sum is 0 left out)."""
    if len(pieces) == 1:
        return pieces[0]()
    if not pieces:  # every term fused away cannot happen: a statement keeps at least one piece
        raise AssertionError("a statement without pieces")
    cols = "".join(f"{quote(k)}, " for k in keys)
    group = f" GROUP BY {', '.join(quote(k) for k in keys)}" if keys else ""
    union = " UNION ALL ".join(f"SELECT {cols}{VALUE} FROM ({piece()}) AS p" for piece in pieces)
    return f"SELECT {cols}SUM({VALUE}) AS {VALUE} FROM ({union}) AS u{group} HAVING SUM({VALUE}) <> 0"


def fused_member_sql(fused, member: int, sources: Sources) -> str:
    """One member's increments from its group's fused SQL, as its own statement gives them (keys whose sum
    is 0 left out)."""
    keys = "".join(f"{quote(k)}, " for k in fused.keys)
    v = f"{VALUE}{member}"
    return f"SELECT {keys}{v} AS {VALUE} FROM ({fused_sql(fused, sources)}) AS f WHERE {v} <> 0"


def key_member_sql(column: str, batch: str, batch_column: str) -> str:
    """A condition on a store key column that holds for every key that joins a value of the batch's column
    (NULL-safely, so a NULL key is kept): the runtime lists the values, here a subquery reads them."""
    return f"({column} IS NULL OR {column} IN (SELECT {quote(batch_column)} FROM {batch}))"


def at_batch_keys(sources: Sources, statements) -> Sources:
    """Sources reading each map only where its keys are among the batch's values that the statements'
    references fix (map_key_bindings), as a refresh copies the map store (Engine._map_bounds): a map is
    read whole if any reference fixes none of its keys."""
    conditions = map_conditions(
        (name, [key_member_sql(quote(sources.map_keys(name)[k]), sources.delta(rel), sources.columns(rel)[c])
                for k, rel, c in fixed])
        for s in statements for name, fixed in map_key_bindings(s.expr) + ([(s.target, ())] if s.op == ":=" else []))

    def map_sql(name: str) -> str:
        where = conditions.get(name)
        return f"(SELECT * FROM {sources.map(name)} WHERE {where})" if where else sources.map(name)

    return replace(sources, map=map_sql)


class Checker:
    """Runs one plan's expressions in DuckDB (each transpiled once) and compares with the evaluator."""

    def __init__(self, plan, duck: DuckDatabase, runtime_form: bool = False):
        self.plan, self.duck = plan, duck
        sources = duck.sources(plan, runtime_form)
        self.compiled = []  # (label, expression, keys, when, DuckDB SQL, the stages it reads)
        for label, e, keys, when, make in expressions(plan, sources, runtime_form):
            duck.stages = []
            sql = to_duckdb(make())
            self.compiled.append((label, e, keys, when, sql, duck.stages))

    def check(self, db: Database, when: str, relation: str | None = None) -> list[str]:
        self.duck.load(db, self.plan)
        failures = []
        for label, e, keys, kind, sql, stages in self.compiled:
            if kind != when or (relation is not None and not label.startswith(f"ON {relation} ")):
                continue
            want = evaluate_map(e, keys, db)
            got = self.duck.run(sql, keys, stages)
            if not same(got, want):
                failures.append(f"{label}\n  sql  {sorted(got.items(), key=repr)}\n  eval {sorted(want.items(), key=repr)}")
        return failures


def run_scenario(plan, checker: Checker, relations: dict, batches) -> list[str]:
    db = Database({k: dict(v) for k, v in relations.items()})
    initial_maps(plan, db)
    failures = checker.check(db, "now")
    for name, batch in batches:
        db.deltas = {name: {t: m for t, m in batch.items() if m}}
        failures += checker.check(db, "batch", name)
        db.deltas = {}
        apply_batch(plan, db, name, batch)
        failures += checker.check(db, "after", name)
    return failures + checker.check(db, "now")


# -- random corpus databases ------------------------------------------------------------------------------

def _value(rng: random.Random):
    return None if rng.random() < 0.2 else rng.randint(0, 3)


def _rows(rng: random.Random, arity: int, n: int) -> dict:
    out: dict = {}
    for _ in range(n):
        row = tuple(_value(rng) for _ in range(arity))
        out[row] = out.get(row, 0) + rng.choice([1, 1, 2])
    return out


def corpus_scenario(rng: random.Random):
    relations = {name: _rows(rng, len(cols), rng.randint(0, 7)) for name, cols in SCHEMAS.items()}
    current = {k: dict(v) for k, v in relations.items()}
    batches = []
    for name in rng.sample(sorted(SCHEMAS), 3):
        batch = _rows(rng, len(SCHEMAS[name]), rng.randint(0, 3))
        for row in rng.sample(sorted(current[name], key=repr), min(2, len(current[name]))):
            batch[row] = batch.get(row, 0) - rng.randint(1, current[name][row])
        batch = {r: m for r, m in batch.items() if m}
        batches.append((name, batch))
        apply(current[name], batch)
    return relations, batches


@pytest.mark.parametrize("sql, runtime_form", [(q, False) for q in QUERIES + NESTED_QUERIES]
                         + [pytest.param(q, True, id=f"{q} [runtime form]") for q in QUERIES + NESTED_QUERIES])
def test_generated_sql_equals_the_reference_evaluator(sql, runtime_form):
    duck = DuckDatabase(SCHEMAS, consolidated=not runtime_form)
    failures = []
    for depth in DEPTHS:
        plan = compile_view(sql, SCHEMAS, depth=depth)
        checker = Checker(plan, duck, runtime_form)
        rng = random.Random(f"{sql}-{depth}")
        for _ in range(SCENARIOS):
            failures += [f"depth {depth}: {f}" for f in run_scenario(plan, checker, *corpus_scenario(rng))]
            if failures:
                break
    assert not failures, "\n".join(failures[:5]) + "\n" + compile_view(sql, SCHEMAS, depth=None).explain()


def test_the_runtime_form_checks_fused_statements():
    """The corpus has many statements a refresh fuses (see fused.py): the runtime form above checks them."""
    groups = members = 0
    for sql in QUERIES + NESTED_QUERIES:
        for depth in DEPTHS:
            for t in compile_view(sql, SCHEMAS, depth=depth).triggers:
                fused = [item for item in trigger_items(t.statements, exact=lambda m: True)[1]
                         if isinstance(item, Fused)]
                groups += len(fused)
                members += sum(len(f.members) for f in fused)
    assert groups >= 50 and members >= 2 * groups, (groups, members)


# -- TPC-H ---------------------------------------------------------------------------------------------------

def _tpch_arrow_type(sql_type: str):
    decimal = re.fullmatch(r"DECIMAL\((\d+),\s*(\d+)\)", sql_type)
    if decimal:
        return pa.decimal128(int(decimal[1]), int(decimal[2]))
    return {"INT": pa.int64(), "BIGINT": pa.int64(), "DATE": pa.date32()}.get(sql_type, pa.string())


# ~50 s of CPU per form for the 22 queries (the reference evaluator on 8-table joins): on demand.
@pytest.mark.on_demand
@pytest.mark.parametrize("name", [f"q{n}" for n in range(1, 23)])
@pytest.mark.parametrize("runtime_form", [False, True], ids=["", "runtime form"])
def test_generated_sql_of_tpch_plans_equals_the_reference_evaluator(name, runtime_form):
    from test_tpch_compile import COLUMNS, apply, random_batch, random_table

    from spark_ivm.bench.tpch import read_query

    schemas = {t: [c for c, _ in cols] for t, cols in COLUMNS.items()}
    types = {t: {c: _tpch_arrow_type(ty) for c, ty in cols} for t, cols in COLUMNS.items()}
    duck = DuckDatabase(schemas, types, consolidated=not runtime_form)
    failures = []
    for depth in (1, None):
        plan = compile_view(read_query(name).sql, schemas, depth=depth)
        rng = random.Random(f"{name}-{depth}")
        relations = {t: random_table(rng, t, 5) if t in plan.query.relations else {} for t in schemas}
        current = {t: dict(rows) for t, rows in relations.items()}
        batches = []
        for table in plan.query.relations:
            batch = random_batch(rng, table, current[table])
            apply(current[table], batch)
            batches.append((table, batch))
        checker = Checker(plan, duck, runtime_form)
        failures += [f"depth {depth}: {f}" for f in run_scenario(plan, checker, relations, batches)]
    assert not failures, "\n".join(failures[:5])


def test_statements_that_differ_only_by_what_they_sum_share_their_stages():
    """Q17's count, sum of prices and count of non-NULL prices under a lineitem batch re-evaluate the same
    average per part: the rows before each nested part are one stage for the three statements (the price
    and its NULL test weigh the rows after the nested parts); only the stage that joins each statement's
    own map of quantities differs."""
    from test_tpch_compile import SCHEMAS as TPCH

    from spark_ivm.bench.tpch import read_query

    plan = compile_view(read_query("q17").sql, TPCH)
    keys = {m.name: m.keys for m in plan.maps}
    made: dict[str, list[str]] = {}

    def stage(sql: str) -> str:
        made.setdefault(sql, []).append(statement.target)
        return f"stage{list(made).index(sql)}"

    sources = Sources(relation=quote, delta=lambda r: f"delta_{r}", map=lambda m: f"map_{m}",
                      columns=lambda r: TPCH[r], map_keys=lambda m: keys[m], stage=stage)
    statements = [s for s in plan.trigger("lineitem").statements if s.target in ("q_count", "q_sum_1", "q_nn_1")]
    assert len(statements) == 3
    for statement in statements:
        statement_sql(statement.expr, statement.keys, sources)
    shared = [sql for sql, users in made.items() if set(users) == {"q_count", "q_sum_1", "q_nn_1"}]
    own = [sql for sql, users in made.items() if len(set(users)) == 1]
    assert len(shared) == 2 and len(own) == 3 and len(made) == 5


# -- join order of statements a batch drives -----------------------------------------------------------------

def test_a_batch_drives_its_statement_joins_without_cross_joins():
    """ΔR binds a and b; M1 shares no variable with it, M2 shares a and binds c, which M1 then shares: taken as
    written, the batch would be a cross join with all of M1. Each join after the first reads the rows joined
    so far as a subquery hinted for broadcast."""
    e = parse("AggSum([d], M1[c, d] * ΔR(a, b) * M2[a, c])")
    schemas = {"R": ["a", "b"]}
    keys = {"M1": ("c", "d"), "M2": ("a", "c")}

    def sources(drives):
        return Sources(relation=quote, delta=lambda r: f"delta_{r}", map=lambda m: f"map_{m}",
                       columns=lambda r: schemas[r], map_keys=lambda m: keys[m], drives=drives)

    plain = statement_sql(e, ["d"], sources(None))
    assert "CROSS JOIN" not in plain
    assert plain.index("delta_R") < plain.index("map_M2") < plain.index("map_M1")
    assert "BROADCAST" not in plain
    driven = statement_sql(e, ["d"], sources(lambda r: True))
    assert "CROSS JOIN" not in driven
    assert driven.count("/*+ BROADCAST(") == 2  # before the join with M2 and before the join with M1


# -- correlated nested values without pairs ---------------------------------------------------------------------

def _plain_sources(schemas, keys=None):
    return Sources(relation=quote, delta=lambda r: f"delta_{r}", map=lambda m: f"map_{m}",
                   columns=lambda r: schemas[r], map_keys=lambda m: (keys or {})[m])


def test_a_sum_over_the_rows_above_a_value_is_a_running_sum_not_a_join_of_pairs():
    """z sums S's c over the rows whose d is above R's b: evaluated from the distinct b, it would pair every b
    with every row of S. It is a running sum instead: S summed per d and the values of b sorted together."""
    e = parse("AggSum([], R(a, b) * (z ^= AggSum([b], S(c, d) * {d > b} * c)) * {z > 1})")
    sql = statement_sql(e, [], _plain_sources({"R": ["a", "b"], "S": ["c", "d"]}))
    assert "CROSS JOIN" not in sql
    assert "SUM(__v) OVER (ORDER BY __r DESC, __p DESC ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)" in sql


def test_a_running_sum_is_partitioned_by_the_variables_joined_on():
    e = parse("AggSum([], R(a, b) * (z ^= AggSum([a, b], S(a, d) * {b <= d})) * {z = 0})")
    sql = statement_sql(e, [], _plain_sources({"R": ["a", "b"], "S": ["a", "d"]}))
    assert "OVER (PARTITION BY `a` ORDER BY __r DESC, __p ASC" in sql  # d >= b: ties count


def test_a_variable_a_nested_aggregate_binds_by_a_lift_joins_after_it():
    """(x ^= c + d) tests equality with the enclosing x: S is summed per c + d once and joined on x, not
    paired with every x first (TPC-H Q15's count of suppliers with the maximum revenue)."""
    e = parse("AggSum([], R(a, x) * (z ^= AggSum([x], S(c, d) * (x ^= c + d))) * {z > 0})")
    sql = statement_sql(e, [], _plain_sources({"R": ["a", "x"], "S": ["c", "d"]}))
    assert "CROSS JOIN" not in sql and " OVER (" not in sql


def test_stages_are_given_with_their_aliases_numbered_in_order_of_use():
    """The runtime computes a stage once per refresh however many statements make the same one; the numbers
    of its aliases would otherwise depend on what each statement generated before it."""
    from spark_ivm.runtime.sqlgen import canonical_aliases

    sql = "SELECT t7.`t7` AS `t2`, 't7 t2' AS s FROM x AS t7 JOIN (SELECT t9.a FROM y AS t9) AS t2 ON t7.b <=> t2.a"
    assert canonical_aliases(sql) == ("SELECT t1.`t7` AS `t2`, 't7 t2' AS s FROM x AS t1 "
                                      "JOIN (SELECT t2.a FROM y AS t2) AS t3 ON t1.b <=> t3.a")
    staged = []
    sources = Sources(relation=quote, delta=lambda r: f"delta_{r}", map=quote,
                      columns=lambda r: {"R": ["a", "b"], "S": ["a", "c"]}[r], map_keys=quote,
                      stage=lambda sql: staged.append(sql) or f"stage{len(staged)}")
    nested = "AggSum([], ΔR(a, b) * (z ^= AggSum([a], S(a, c) * c)) * {z > b})"
    statement_sql(parse(nested), [], sources)
    statement_sql(parse(f"AggSum([], ΔR(a, b) * b) + {nested}"), [], sources)  # more aliases before its stage
    assert len(staged) == 2 and staged[0] == staged[1]


def test_nested_values_over_one_product_are_one_join_on_one_stage():
    """AVG per key is a sum and a count, each re-evaluated for the keys a batch changes: one stage of the rows
    joined so far, whose distinct keys one join of the sum's product reads, summing both values."""
    staged = []
    sources = Sources(relation=quote, delta=lambda r: f"delta_{r}", map=quote,
                      columns=lambda r: {"R": ["a", "b"], "S": ["a", "c"]}[r], map_keys=quote,
                      stage=lambda sql: staged.append(sql) or f"stage{len(staged)}")
    e = parse("AggSum([], ΔR(a, b) * (z1 ^= AggSum([a], S(a, c) * c)) * (z2 ^= AggSum([a], S(a, c))) * {b < z1 / z2})")
    sql = statement_sql(e, [], sources)
    assert len(staged) == 1
    assert sql.count("SELECT DISTINCT `a` FROM stage1") == 1
    assert "SUM(p.__v * p.`c`) AS __v0, SUM(p.__v * 1) AS __v1" in sql


def test_without_a_batch_nested_values_binding_their_correlation_are_joined_without_a_stage():
    """CREATE reads whole relations (Sources.whole): a nested aggregate that binds the variables it shares
    with the product is grouped by them and joined, with no stage of the product and no domain; one that
    only compares a shared variable still starts from the product's distinct bindings."""
    staged = []
    sources = Sources(relation=quote, delta=lambda r: f"delta_{r}", map=quote,
                      columns=lambda r: {"R": ["a", "b"], "S": ["a", "c"]}[r], map_keys=quote,
                      stage=lambda sql: staged.append(sql) or f"stage{len(staged)}", whole=True)
    one = parse("AggSum([], R(a, b) * (z ^= AggSum([a], S(a, c) * c)) * {b < z})")
    two = parse("AggSum([], R(a, b) * (z1 ^= AggSum([a], S(a, c) * c)) * (z2 ^= AggSum([a], S(a, c))) * {b < z1 / z2})")
    for e in (one, two):
        sql = statement_sql(e, [], sources)
        assert not staged and "DISTINCT" not in sql and sql.count("LEFT JOIN") == 1
    compared = parse("AggSum([], R(a, b) * (z ^= AggSum([], S(d, c) * {d < a})) * {b < z})")
    columns = {"R": ["a", "b"], "S": ["d", "c"]}
    assert "DISTINCT" in statement_sql(compared, [], replace(sources, columns=lambda r: columns[r]))
    assert len(staged) == 1
    statement_sql(one, [], replace(sources, whole=False))  # a refresh's form: from the product's bindings
    assert len(staged) == 2


def test_nested_values_of_several_terms_over_the_same_products_are_one_join():
    """The new average per key after a batch, (sum + Δsum) / (count + Δcount): each term of the sum joins the
    same product as the count's term, so the two values are one join, the terms' sums added in it."""
    staged = []
    sources = Sources(relation=quote, delta=lambda r: f"delta_{r}", map=quote,
                      columns=lambda r: {"R": ["a", "b"], "S": ["a", "c"]}[r], map_keys=quote,
                      stage=lambda sql: staged.append(sql) or f"stage{len(staged)}")
    e = parse("AggSum([], ΔR(a, b) * (z1 ^= (AggSum([a], S(a, c) * c) + AggSum([a], ΔS(a, c) * c)))"
              " * (z2 ^= (AggSum([a], S(a, c)) + AggSum([a], ΔS(a, c)))) * {b < z1 / z2})")
    sql = statement_sql(e, [], sources)
    assert len(staged) == 1 and sql.count("LEFT JOIN") == 1
    assert sql.count("SUM(p.__v * p.`c`) AS __v0, SUM(p.__v * 1) AS __v1") == 2


def test_maps_of_one_family_in_new_values_are_one_join():
    """The new sum and count per key after a batch, M_sum[a] + Δsum and M_count[a] + Δcount, of maps that
    share their rows: a map's value is the sum of its rows per key, so both are one join of the family's
    rows and of the batch, each value summed into a column of its own."""
    staged = []
    sources = Sources(relation=quote, delta=lambda r: f"delta_{r}", map=quote,
                      columns=lambda r: {"R": ["a", "b"], "S": ["a", "c"]}[r], map_keys=lambda m: ["a"],
                      stage=lambda sql: staged.append(sql) or f"stage{len(staged)}",
                      families={"Ms": ("Mc", "Ms"), "Mc": ("Mc", "Ms")})
    e = parse("AggSum([], ΔR(a, b) * (z1 ^= (Ms[a] + AggSum([a], ΔS(a, c) * c)))"
              " * (z2 ^= (Mc[a] + AggSum([a], ΔS(a, c)))) * {b < z1 / z2})")
    sql = statement_sql(e, [], with_families(sources, sources.families))
    assert len(staged) == 1 and sql.count("LEFT JOIN") == 1
    assert "SUM(p.__v * p.`__value_Ms`) AS __v0, SUM(p.__v * p.`__value_Mc`) AS __v1" in sql


def test_a_nested_relation_joined_on_a_batch_s_keys_is_evaluated_for_those_keys():
    """Whether each key a batch touches has rows after it (an outer join's matched and unmatched cases, TPC-H
    Q13): the map of all keys is read for the batch's keys, not whole and joined to them afterwards."""
    staged = []
    sources = Sources(relation=quote, delta=lambda r: f"delta_{r}", map=quote,
                      columns=lambda r: {"S": ["a", "c"]}[r], map_keys=lambda m: ["a"],
                      stage=lambda sql: staged.append(sql) or f"stage{len(staged)}")
    e = parse("AggSum([], Exists(AggSum([a], ΔS(a, c))) * Exists(AggSum([a], M[a] * N[a]) + AggSum([a], ΔS(a, c))))")
    sql = statement_sql(e, [], sources)
    assert len(staged) == 1 and "FROM `M`" not in sql
    assert re.search(r"\(SELECT DISTINCT `a` FROM stage1\) AS t\d+ JOIN `M` AS", sql)


def test_the_rows_a_nested_sum_adds_up_carry_only_the_variables_it_groups_by():
    """Summed per part, a batch of a wide table joined to the parts carries the part and the value, not
    every column of the table: Spark's analysis of a statement takes time in the columns it carries."""
    sources = Sources(relation=quote, delta=lambda r: f"delta_{r}", map=quote,
                      columns=lambda r: {"R": ["a", "b"], "S": ["a", "c", "d", "e"]}[r], map_keys=quote,
                      stage=lambda sql: "stage1")  # the stage's own SQL is left out of the statement's
    sql = statement_sql(parse("AggSum([], ΔR(a, b) * (z ^= AggSum([a], S(a, c, d, e) * c)) * {b < z})"), [], sources)
    assert "`c`" in sql and "`d`" not in sql and "`e`" not in sql


# -- products shared by the statements of a trigger ----------------------------------------------------------

GROUPED_JOIN = "SELECT R.b, COUNT(*), SUM(R.a), SUM(S.c) FROM R, S WHERE R.b = S.b GROUP BY R.b"


def _trigger(plan, relation):
    return next(t for t in plan.triggers if t.relation == relation)


def test_statements_summing_different_values_over_the_same_joins_share_them():
    """ΔR joins q_count_mR[r_b] for COUNT(*), SUM(R.a) and its non-NULL count alike: one shared product
    per binding of r_b and the value a, which the three statements then sum their values over."""
    statements = _trigger(compile_view(GROUPED_JOIN, SCHEMAS), "R").statements
    shared, made = shared_products(statements, exact=lambda m: True)
    assert list(shared) == ["__shared0"]
    keys, definition = shared["__shared0"]
    assert keys == ("r_b", "a")
    assert {str(x) for x in definition.walk() if type(x).__name__ in ("DeltaRel", "MapRef")} == {
        "ΔR(a, r_b)", "q_count_mR[r_b]"}
    reading = [s.target for s in made if "__shared0" in str(s.expr)]
    assert reading == ["q_count", "q_sum_1", "q_nn_1"]
    assert [s for s in made if s.target not in reading] == [s for s in statements if s.target not in reading]


def test_only_products_joining_a_map_or_table_with_integral_weights_are_shared():
    statements = _trigger(compile_view(GROUPED_JOIN, SCHEMAS), "R").statements
    # Decimal map values: a shared product would round its sums otherwise than each statement does.
    assert shared_products(statements, exact=lambda m: False) == ({}, list(statements))
    # A batch alone: its aggregates are cheap, a shared product would only add a stage.
    alone = _trigger(compile_view("SELECT b, COUNT(*), SUM(a) FROM R GROUP BY b", SCHEMAS), "R").statements
    assert shared_products(alone, exact=lambda m: True) == ({}, list(alone))


def _statement(target: str, text: str, keys: tuple[str, ...] = ()):
    return Statement(target, keys, "+=", parse(text))


def test_statements_of_several_terms_are_fused_term_by_term():
    """A view's COUNT and SUM over a disjunction (TPC-H Q19): the i-th terms of the two statements join the
    same product, and each pair is one aggregation; no statement is left, and no product is staged."""
    statements = [
        _statement("q_count", "AggSum([], ΔR(a, b) * mS[b] * {a > 1}) + -1 * AggSum([], ΔR(a, b) * mT[b])"),
        _statement("q_sum", "AggSum([], ΔR(a, b) * mS[b] * {a > 1} * a) + -1 * AggSum([], ΔR(a, b) * mT[b] * a)"),
    ]
    shared, items = trigger_items(statements, exact=lambda m: True)
    assert shared == {}
    assert all(isinstance(item, Fused) for item in items) and len(items) == 2
    assert [[(s.target, str(v)) for s, v in item.members] for item in items] == [
        [("q_count", "1"), ("q_sum", "a")]] * 2
    # the coefficient of the second terms, common to both, multiplies the product
    assert [str(item.product) for item in items] == ["ΔR(a, b) * mS[b] * {a > 1}", "-1 * ΔR(a, b) * mT[b]"]


def test_a_term_weighed_by_a_map_of_decimals_stays_with_its_statement():
    """Fused apart, a term's sum would be rounded to the map's type apart from the statement's other terms:
    only terms whose rows weigh integers are split off; the others stay with their statements."""
    statements = [
        _statement("q_count", "AggSum([], ΔR(a, b) * mS[b]) + AggSum([], ΔR(a, b) * mD[b])"),
        _statement("q_sum", "AggSum([], ΔR(a, b) * mS[b] * a) + AggSum([], ΔR(a, b) * mD[b] * a)"),
    ]
    shared, items = trigger_items(statements, exact=lambda m: m != "mD")
    fused = [item for item in items if isinstance(item, Fused)]
    assert [[s.target for s, _ in item.members] for item in fused] == [["q_count", "q_sum"]]
    assert "mS" in str(fused[0].product)
    assert [(s.target, str(s.expr)) for s in items if not isinstance(s, Fused)] == [
        ("q_count", "AggSum([], ΔR(a, b) * mD[b])"), ("q_sum", "AggSum([], ΔR(a, b) * mD[b] * a)")]
    assert shared == {}


def test_statements_reading_maps_of_one_family_are_fused():
    """A view's COUNT and SUM re-evaluated per affected key (TPC-H Q22 under orders): each statement joins its
    own map of one family (a count and a sum of one product per the same keys). Read as the family's rows, the
    terms have one product, and the two statements are one aggregation per term, summing each map's value."""
    new, old = "(z ^= (mC[c] + AggSum([c], ΔO(o, c))))", "(z ^= mC[c])"
    statements = [_statement(target, " + ".join(
        f"{sign}AggSum([g], Exists(AggSum([c], ΔO(o, c))) * {z} * {{z = 0}} * {m}[c, g])"
        for sign, z in (("", new), ("-1 * ", old))), ("g",))
        for target, m in (("q_count", "mN"), ("q_sum", "mS"))]
    families = {"mN": ("mN", "mS"), "mS": ("mN", "mS")}
    assert all(s.reevaluated_keys == ("c",) for s in statements)
    shared, items = trigger_items(statements, exact=lambda m: m != "mS", families=families)
    assert shared == {} and len(items) == 2 and all(isinstance(item, Fused) for item in items)
    assert [[(s.target, str(v)) for s, v in item.members] for item in items] == [
        [("q_count", "__value_mN"), ("q_sum", "__value_mS")]] * 2
    assert "__rows_mN[c, g, __value_mN, __value_mS]" in str(items[0].product)
    # without families, or with a family read twice by one term, nothing is fused
    assert not any(isinstance(item, Fused) for item in trigger_items(statements, exact=lambda m: True)[1])
    twice = [_statement(t, f"AggSum([g], ΔO(o, c) * mN[c, g] * {m}[c, g])", ("g",))
             for t, m in (("q1", "mN"), ("q2", "mS"))]
    assert not any(isinstance(item, Fused) for item in trigger_items(twice, lambda m: True, families)[1])
