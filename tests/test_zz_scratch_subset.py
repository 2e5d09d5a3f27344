"""Scratch: the runtime differential over a subset of the corpus (queries reading 2+ relations)."""
import re, random
import pytest
import spark_ivm
import test_runtime_differential as d
from corpus import QUERIES, SCHEMAS

pytestmark = pytest.mark.runtime

def test_subset(spark):
    chosen = [i for i, q in enumerate(QUERIES) if len(re.findall(r"\b[RSTU]\b", q.split("FROM", 1)[1].split("WHERE")[0].split("GROUP")[0])) >= 2][:16]
    print("chosen", chosen)
    spark_ivm.enable(spark)
    spark.sql("CREATE DATABASE IF NOT EXISTS sub"); spark.sql("USE sub")
    rng = random.Random(7)
    for table, cols in SCHEMAS.items():
        spark.sql(f"CREATE TABLE {table} ({', '.join(c + ' INT' for c in cols)}) USING delta")
        spark.sql(f"INSERT INTO {table} VALUES {d._rows(rng, len(cols), 8)}")
    views = {}
    for name, (sql, depth) in d._distinct_plans().items():
        if int(name[1:].split("_")[0]) not in chosen: continue
        opts = ", ".join(["store = 'm'"] + ([] if depth is None else [f"depth = {depth}"]))
        spark.sql(f"CREATE INCREMENTAL VIEW {name} WITH ({opts}) AS {sql}")
        views[name] = sql
    fails = []
    for r in range(4):
        if r:
            d._random_batch(spark, rng)
            spark.sql("REFRESH INCREMENTAL VIEWS").collect()
        got = d._contents(spark, {n: f"SELECT * FROM {n}" for n in views}); want = d._contents(spark, views)
        fails += [f"round {r} {n}: {views[n]}" for n in views if got[n] != want[n]]
    assert not fails, "\n".join(fails)
