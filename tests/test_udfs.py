"""Python functions in incremental views (`@spark_ivm.udf`): the front end and the compiler treat them
as deterministic built-ins, the reference evaluator calls them on one-element Series, and Spark runs
them as Arrow-vectorized pandas UDFs."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest

import spark_ivm
from spark_ivm import compile_view, udfs
from spark_ivm.calculus import functions
from spark_ivm.calculus.evaluator import Database, apply_batch, evaluate_map, initial_maps
from spark_ivm.calculus.parser import parse
from spark_ivm.calculus.printer import to_text
from spark_ivm.errors import UnsupportedQueryError

PARIS = (48.8566, 2.3522)
SCHEMAS = {"places": ["id", "name", "lat", "lon", "pop"]}


@spark_ivm.udf("bigint", name="test_udfs_size_class")
def size_class(pop):
    """Population class: the number of decimal digits of the population."""
    return np.floor(np.log10(pop.astype("float64").clip(lower=1))).astype("int64") + 1


@spark_ivm.udf("boolean", name="test_udfs_has_accent")
def has_accent(s):
    return s.str.normalize("NFKD").str.contains("[\u0300-\u036f]", regex=True)


@spark_ivm.udf(returnType="string", name="test_udfs_or_unknown", null_propagating=False)
def or_unknown(s):
    return s.where(s.notna(), "unknown")


# ---------------------------------------------------------------------------------------------------
# The shipped functions and the NULL rule


def test_haversine_km_gives_known_distances():
    assert functions.call("haversine_km", [52.52, 13.405, *PARIS]) == pytest.approx(877.5, abs=1.0)  # Berlin
    assert functions.call("haversine_km", [0.0, 0.0, 0.0, 180.0]) == pytest.approx(math.pi * 6371.0088)
    assert functions.call("haversine_km", [*PARIS, *PARIS]) == 0.0


def test_normalize_text_folds_case_accents_width_and_spaces():
    assert functions.call("normalize_text", ["  Ｃafé \t Crème "]) == "cafe creme"
    assert functions.call("normalize_text", ["SÃO   Paulo"]) == "sao paulo"
    assert functions.call("normalize_text", ["Straße"]) == "strasse"


def test_null_argument_gives_null_and_the_function_never_sees_it():
    seen = []

    @spark_ivm.udf("double", name="test_udfs_spy")
    def spy(x):
        seen.append(list(x))
        return x * 2

    assert functions.call("test_udfs_spy", [None]) is None
    assert seen == []
    out = spy(pd.Series([1.0, None, 3.0]))
    assert seen == [[1.0, 3.0]]
    assert out.iloc[0] == 2.0 and pd.isna(out.iloc[1]) and out.iloc[2] == 6.0


def test_vectorized_call_keeps_large_integers_exact_around_nulls():
    out = size_class(pd.Series([10**17, None, 5]))
    assert list(out[[0, 2]]) == [18, 1] and pd.isna(out[1])


def test_function_that_handles_nulls_itself_receives_them():
    assert functions.call("test_udfs_or_unknown", [None]) == "unknown"
    assert functions.call("test_udfs_or_unknown", ["x"]) == "x"


def test_declaration_errors():
    with pytest.raises(udfs.UdfDefinitionError, match="return type"):
        spark_ivm.udf(lambda s: s)
    with pytest.raises(udfs.UdfDefinitionError, match="built-in"):
        spark_ivm.udf("string", name="upper")(lambda s: s)
    with pytest.raises(udfs.UdfDefinitionError, match="scalar"):
        spark_ivm.udf("array<int>", name="test_udfs_array")(lambda s: s)
    with pytest.raises(udfs.UdfDefinitionError, match="SQL built-in"):
        spark_ivm.udf("string", name="levenshtein")(lambda a, b: a)
    with pytest.raises(udfs.UdfDefinitionError, match="cannot name"):
        spark_ivm.udf("string", name="bad name")(lambda s: s)


# ---------------------------------------------------------------------------------------------------
# Front end, compiler and reference evaluator


def _rows(*rows):
    return {r: 1 for r in rows}


INITIAL = _rows((1, "Paris", 48.8566, 2.3522, 2100000), (2, " paris ", 48.86, 2.35, 2100000),
                (3, "Lyon", 45.764, 4.8357, 520000), (4, "Berlin", 52.52, 13.405, 3600000),
                (5, None, 48.0, 2.0, 300), (6, "Nowhere", None, None, 10))
BATCHES = [
    ("places", _rows((7, "Café Crème", 48.9, 2.4, 90), (8, "LYON", 45.75, 4.85, 520000))),  # inserts
    ("places", {(3, "Lyon", 45.764, 4.8357, 520000): -1}),  # a delete
    ("places", {(4, "Berlin", 52.52, 13.405, 3600000): -1, (4, "Berlin", 48.1, 2.2, 3600000): 1}),  # an update
]


def _maintain(sql: str):
    """The plan, and its database after the initial rows and every batch, maintained by the triggers;
    each map is checked against its definition after each batch."""
    plan = compile_view(sql, SCHEMAS)
    db = Database({"places": dict(INITIAL)})
    initial_maps(plan, db)
    for relation, batch in BATCHES:
        apply_batch(plan, db, relation, batch)
        for m in plan.maps:
            assert db.maps[m.name] == pytest.approx(evaluate_map(m.definition, m.keys, db)), m.name
    return plan, db


def _distance(lat, lon):
    return functions.call("haversine_km", [lat, lon, *PARIS])


def test_function_in_select_where_and_group_by_is_maintained():
    plan, db = _maintain(
        f"SELECT normalize_text(name) AS city, COUNT(*) AS n FROM places "
        f"WHERE haversine_km(lat, lon, {PARIS[0]}, {PARIS[1]}) < 500 GROUP BY normalize_text(name)")
    assert set(udfs.plan_functions(plan)) == {"normalize_text", "haversine_km"}
    expected = Counter(functions.call("normalize_text", [name]) for _, name, lat, lon, _ in db.relations["places"]
                       if lat is not None and _distance(lat, lon) < 500)
    counts = {key[0]: n for key, n in db.maps[plan.maps[0].name].items()}
    assert counts == dict(expected)
    assert counts["paris"] == 2 and counts["cafe creme"] == 1 and counts[None] == 1 and counts["berlin"] == 1


def test_function_inside_an_aggregate_and_over_group_keys():
    plan, db = _maintain("SELECT name, test_udfs_or_unknown(name) AS label, "
                         "SUM(test_udfs_size_class(pop)) AS classes FROM places GROUP BY name")
    summed = next(m for m in plan.maps if "test_udfs_size_class" in str(m.definition))
    expected = Counter()
    for _, name, _, _, pop in db.relations["places"]:
        expected[(name, "unknown" if name is None else name)] += len(str(pop))
    got = {key: value for key, value in db.maps[summed.name].items()}
    assert got == dict(expected)
    # The label is a key the maps compute: the Spark view that reads them calls no Python function.
    assert [c.sql for c in plan.query.columns][1].startswith("`")


def test_boolean_function_as_a_condition():
    plan, db = _maintain("SELECT id FROM places WHERE test_udfs_has_accent(name)")
    ids = {key[0] for key, n in db.maps[plan.maps[0].name].items() if n}
    assert ids == {7}


def test_unknown_function_names_the_function_and_the_remedy():
    with pytest.raises(UnsupportedQueryError, match=r"function NO_SUCH_FN .*@spark_ivm\.udf.*import"):
        compile_view("SELECT no_such_fn(name) AS x FROM places", SCHEMAS)


def test_function_over_aggregates_is_refused():
    with pytest.raises(UnsupportedQueryError, match="Python function haversine_km applied to aggregates"):
        compile_view("SELECT name, haversine_km(SUM(lat), 0, 0, 0) AS d FROM places GROUP BY name", SCHEMAS)


def test_plan_functions_lists_every_function_a_plan_calls():
    plan = compile_view("SELECT upper(name) AS u, SUM(haversine_km(lat, lon, 0, 0)) AS d FROM places "
                        "GROUP BY upper(name)", SCHEMAS)
    assert set(udfs.plan_functions(plan)) == {"upper", "haversine_km"}


def test_calls_print_and_parse_back():
    plan = compile_view("SELECT normalize_text(name) AS c, SUM(haversine_km(lat, lon, 1.5, 2)) AS d FROM places "
                        "GROUP BY normalize_text(name)", SCHEMAS)
    expressions = [m.definition for m in plan.maps] + [s.expr for t in plan.triggers for s in t.statements]
    assert all(parse(to_text(e)) == e for e in expressions)


# ---------------------------------------------------------------------------------------------------
# Spark end to end


def _sorted_rows(df) -> list[tuple]:
    rounded = [tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in df.collect()]
    return sorted(rounded, key=repr)


def test_view_with_python_functions_is_maintained_on_spark(spark, fresh_db):
    @spark_ivm.udf("double", name="test_udfs_half")  # declared after the session was enabled
    def half(x):
        return x / 2

    query = (f"SELECT normalize_text(name) AS city, COUNT(*) AS n, SUM(test_udfs_half(pop)) AS half_pop, "
             f"SUM(CASE WHEN test_udfs_has_accent(name) THEN 1 ELSE 0 END) AS accented "
             f"FROM places WHERE haversine_km(lat, lon, {PARIS[0]}, {PARIS[1]}) < 500 "
             f"GROUP BY normalize_text(name)")
    spark.sql("CREATE TABLE places (id BIGINT, name STRING, lat DOUBLE, lon DOUBLE, pop BIGINT) USING delta")
    spark.sql("INSERT INTO places VALUES (1, 'Paris', 48.8566, 2.3522, 2100000), (2, ' paris ', 48.86, 2.35, 2),"
              " (3, 'Lyon', 45.764, 4.8357, 520000), (5, NULL, 48.0, 2.0, 300), (6, 'Nowhere', NULL, NULL, 10)")
    spark.sql(f"CREATE INCREMENTAL VIEW near AS {query}")

    spark.sql("INSERT INTO places VALUES (7, 'Café  Crème', 48.9, 2.4, 90), (8, 'Orléans', 47.9, 1.9, NULL)")
    spark.sql("DELETE FROM places WHERE id = 2")
    spark.sql("UPDATE places SET lat = 48.1, lon = 2.2 WHERE id = 3")
    spark.sql("REFRESH INCREMENTAL VIEW near")
    got = _sorted_rows(spark.table("near"))
    assert got == _sorted_rows(spark.sql(query))
    plan_text = spark.sql(f"EXPLAIN {query}").collect()[0][0]
    assert "ArrowEvalPython" in plan_text and "BatchEvalPython" not in plan_text  # vectorized, not row by row
    assert ("cafe creme", 1, 45.0, 1) in got and ("lyon", 1, 260000.0, 0) in got and ("orleans", 1, None, 1) in got

    # A process that has not defined a function the view calls is told which one and what to do.
    plan = spark._spark_ivm_engine.entry("near").plan
    udfs.require(spark, udfs.plan_functions(plan))
    defined = functions.FUNCTIONS.pop("test_udfs_half"), udfs.UDFS.pop("test_udfs_half")
    try:
        with pytest.raises(udfs.UnregisteredFunctionError,
                           match=r"function test_udfs_half \(called by view .*near\).*import the module"):
            udfs.require(spark, udfs.plan_functions(plan), view="near")
    finally:
        functions.FUNCTIONS["test_udfs_half"], udfs.UDFS["test_udfs_half"] = defined
