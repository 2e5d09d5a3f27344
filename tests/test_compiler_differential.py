"""Differential test of the compiler: running a plan's triggers on the reference evaluator keeps
every map equal to re-evaluating its definition, after every batch, at depths 0, 1 and unlimited, and
with every delta that can be re-evaluated from the maps below it re-evaluated (`:=` statements).

Each (query, depth) case draws its own examples from a generator seeded by the case's id (the same in
every run, different between cases). An example is a database in which every table the query reads has
rows, and two to four batches of those tables (inserts, deletes of some copies of present rows, updates
that change one column of a present row). Values come from a small domain with NULLs, so that joins
match and the corpus's predicates hold for some rows and not for others; at least a third of a case's
examples must change the view's own maps (level 0), or the case would compare nothing but maps that
stay empty or constant."""

from __future__ import annotations

import math
import random
import zlib

import pytest

from spark_ivm import compile_view
from spark_ivm.calculus.evaluator import Database, apply_batch, evaluate_map, initial_maps
from spark_ivm.compiler.viewlet import compile_query

from spark_ivm.frontend.translate import translate
from spark_ivm.heuristics import Policy

from corpus import NESTED_QUERIES, QUERIES, SCHEMAS

# 0..3 are the constants the corpus compares with (a > 1, BETWEEN 1 AND 2, IN (0, 2, 3), = 2, …);
# NULL is one value in nine.
VALUES = (0, 1, 2, 3) * 2 + (None,)
EXAMPLES = 60  # per case
CHANGING_SHARE = 1 / 3  # of a case's examples, at least, change a map of level 0


def _add(bag: dict, row: tuple, m: int) -> None:
    n = bag.get(row, 0) + m
    if n:
        bag[row] = n
    else:
        bag.pop(row, None)


def random_row(rng: random.Random, arity: int) -> tuple:
    return tuple(rng.choice(VALUES) for _ in range(arity))


def random_table(rng: random.Random, arity: int) -> dict:
    bag: dict = {}
    for _ in range(rng.randint(1, 6)):
        _add(bag, random_row(rng, arity), 1)
    return bag


def random_batch(rng: random.Random, arity: int, current: dict) -> dict:
    """Inserts of 1 to 3 rows, deletes of some copies of up to 2 present rows, and updates of up to 2
    present rows (a copy deleted, the row with one column changed inserted)."""
    batch: dict = {}
    for _ in range(rng.randint(1, 3)):
        _add(batch, random_row(rng, arity), 1)
    present = sorted(current, key=repr)
    left = dict(current)  # copies not yet deleted or updated
    for row in rng.sample(present, min(len(present), rng.randint(0, 2))):
        deleted = rng.randint(1, left[row])
        left[row] -= deleted
        _add(batch, row, -deleted)
    for row in rng.sample(present, min(len(present), rng.randint(0, 2))):
        if left[row]:
            column = rng.randrange(arity)
            left[row] -= 1
            _add(batch, row, -1)
            _add(batch, row[:column] + (rng.choice(VALUES),) + row[column + 1:], 1)
    return batch


def random_example(rng: random.Random, read: list[str]) -> tuple[dict, list[tuple[str, dict]]]:
    """A database (rows in the tables the query reads, the others empty) and its batches."""
    db = {name: random_table(rng, len(SCHEMAS[name])) if name in read else {} for name in SCHEMAS}
    current = {name: dict(rows) for name, rows in db.items()}
    batches = []
    for _ in range(rng.randint(2, 4)):
        name = rng.choice(read)
        batch = random_batch(rng, len(SCHEMAS[name]), current[name])
        batches.append((name, batch))
        for row, m in batch.items():
            _add(current[name], row, m)
    return db, batches


def same(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    return all(math.isclose(float(a[k]), float(b[k]), rel_tol=1e-9, abs_tol=1e-9) for k in a)


def case_seed(*parts: object) -> int:
    """A seed of the case's own, the same in every run (str hashes vary between runs)."""
    return zlib.crc32(repr(parts).encode())


def changes_view(plan, relations: dict, batches: list[tuple[str, dict]]) -> bool:
    """Runs the batches' triggers, checking every map after each; whether a map of level 0 changed."""
    db = Database({k: dict(v) for k, v in relations.items()})
    initial_maps(plan, db)
    top = [m for m in plan.maps if m.level == 0]
    changed = False
    for i, (name, batch) in enumerate(batches):
        before = [dict(db.maps[m.name]) for m in top]
        apply_batch(plan, db, name, batch)
        for m in plan.maps:
            expected = evaluate_map(m.definition, m.keys, db)
            assert same(db.maps[m.name], expected), (
                f"map {m.name} after batch {i + 1} ({name} {batch}) of the example\n"
                f"database: {relations}\nbatches: {batches}\n{plan.explain()}")
        changed = changed or any(not same(b, db.maps[m.name]) for b, m in zip(before, top))
    return changed


REEVALUATED = "reevaluated"  # unlimited depth, every delta larger than its re-evaluation replaced by it


@pytest.mark.parametrize("depth", [0, 1, None, REEVALUATED], ids=["depth0", "depth1", "unlimited", REEVALUATED])
@pytest.mark.parametrize("sql", QUERIES + NESTED_QUERIES)
def test_triggers_keep_maps_equal_to_their_definitions(sql, depth):
    if depth == REEVALUATED:
        plan = compile_query(translate(sql, SCHEMAS), policy=Policy(max_delta_nodes=0))
    else:
        plan = compile_view(sql, SCHEMAS, depth=depth)
    rng = random.Random(case_seed(sql, depth))
    read = sorted(set(plan.query.relations))
    changing = sum(changes_view(plan, *random_example(rng, read)) for _ in range(EXAMPLES))
    assert changing >= CHANGING_SHARE * EXAMPLES, (
        f"only {changing} of {EXAMPLES} examples changed the view's maps "
        f"{[m.name for m in plan.maps if m.level == 0]}")
