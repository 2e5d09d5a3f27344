"""Differential test of the compiler: running a plan's triggers on the reference evaluator keeps
every map equal to re-evaluating its definition, after every batch, at depths 0, 1 and unlimited, and
with every delta that can be re-evaluated from the maps below it re-evaluated (`:=` statements)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_ivm import compile_view
from spark_ivm.compiler import compile_query
from spark_ivm.evaluator import Database, apply_batch, evaluate_map, initial_maps

from spark_ivm.heuristics import Policy
from spark_ivm.sql import translate

from corpus import NESTED_QUERIES, QUERIES, SCHEMAS

VALUES = st.one_of(st.none(), st.integers(0, 3))


def relation(arity: int):
    rows = st.lists(st.tuples(*[VALUES] * arity), max_size=6)
    return rows.map(_bag)


def _bag(rows):
    out: dict = {}
    for r in rows:
        out[r] = out.get(r, 0) + 1
    return out


@st.composite
def scenario(draw):
    db = {name: draw(relation(len(cols))) for name, cols in SCHEMAS.items()}
    batches = []
    current = {k: dict(v) for k, v in db.items()}
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(sorted(SCHEMAS)))
        arity = len(SCHEMAS[name])
        batch: dict = {}
        for row in draw(st.lists(st.tuples(*[VALUES] * arity), max_size=3)):
            batch[row] = batch.get(row, 0) + 1
        existing = sorted(current[name].items(), key=repr)
        if existing:
            for row, count in draw(st.lists(st.sampled_from(existing), max_size=2, unique=True)):
                batch[row] = batch.get(row, 0) - draw(st.integers(1, count))
        batches.append((name, batch))
        for row, m in batch.items():
            n = current[name].get(row, 0) + m
            if n:
                current[name][row] = n
            else:
                current[name].pop(row, None)
    return db, batches


def same(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    return all(math.isclose(float(a[k]), float(b[k]), rel_tol=1e-9, abs_tol=1e-9) for k in a)


REEVALUATED = "reevaluated"  # unlimited depth, every delta larger than its re-evaluation replaced by it


@pytest.mark.parametrize("depth", [0, 1, None, REEVALUATED], ids=["depth0", "depth1", "unlimited", REEVALUATED])
@pytest.mark.parametrize("sql", QUERIES + NESTED_QUERIES)
def test_triggers_keep_maps_equal_to_their_definitions(sql, depth):
    if depth == REEVALUATED:
        plan = compile_query(translate(sql, SCHEMAS), policy=Policy(max_delta_nodes=0))
    else:
        plan = compile_view(sql, SCHEMAS, depth=depth)

    @settings(max_examples=12, derandomize=True, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(scenario())
    def check(case):
        relations, batches = case
        db = Database({k: dict(v) for k, v in relations.items()})
        initial_maps(plan, db)
        for name, batch in batches:
            apply_batch(plan, db, name, batch)
            for m in plan.maps:
                expected = evaluate_map(m.definition, m.keys, db)
                assert same(db.maps[m.name], expected), (
                    f"map {m.name} after a batch of {name} {batch}\n{plan.explain()}")

    check()
