"""The view catalog stores plain data: plans, store layouts and view entries read back from their JSON
exactly as they were written, and entries it cannot read (an older, pickled entry, another format, damage)
give an error naming the view and how to recover. No Spark."""

from __future__ import annotations

import base64
import json
import math
import pickle
import re
from decimal import Decimal
from pathlib import Path

import pytest

from corpus import NESTED_QUERIES, QUERIES as CORPUS_QUERIES, SCHEMAS as CORPUS_SCHEMAS
from spark_ivm import compile_view
from spark_ivm.bench import orderbook
from spark_ivm.bench.tpch import read_query as tpch_query
from spark_ivm.compiler.plan import Plan
from spark_ivm.compiler.plan_json import FormatError, plan_from_json, plan_to_data, plan_to_json
from spark_ivm.compiler.viewlet import compile_query
from spark_ivm.errors import CatalogEntryError
from spark_ivm.frontend.translate import translate
from spark_ivm.heuristics import Policy
from spark_ivm.runtime.catalog_format import (
    FORMAT, ViewEntry, entry_from_json, entry_to_json, layout_from_json, layout_to_json,
)
from spark_ivm.runtime.mapstore import StoredMap, StoreLayout
from test_tpch_compile import QUERIES as TPCH_QUERIES, SCHEMAS as TPCH_SCHEMAS

DEPTHS = {"depth1": 1, "unlimited": None}


def assert_plan_round_trip(plan: Plan) -> None:
    text = plan_to_json(plan)
    back = plan_from_json(text)
    assert back == plan
    assert plan_to_json(back) == text  # constants keep their types: 1, 1.0, 1BD and TRUE print apart
    assert_plain(json.loads(text))


def assert_plain(data) -> None:
    """Only JSON values, and no string among them that is a pickled object in base64."""
    if isinstance(data, dict):
        for k, v in data.items():
            assert isinstance(k, str)
            assert_plain(v)
    elif isinstance(data, list):
        for v in data:
            assert_plain(v)
    else:
        assert data is None or isinstance(data, (str, int, float, bool)), data
        assert not (isinstance(data, str) and pickled(data)), data


def pickled(text: str) -> bool:
    try:
        return base64.b64decode(text, validate=True)[:1] == b"\x80"  # a pickle's PROTO opcode
    except ValueError:
        return False


# -- plans ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", DEPTHS.values(), ids=DEPTHS.keys())
@pytest.mark.parametrize("name", TPCH_QUERIES)
def test_tpch_plans_round_trip(name, depth):
    assert_plan_round_trip(compile_view(tpch_query(name).sql, TPCH_SCHEMAS, depth=depth))


@pytest.mark.parametrize("depth", DEPTHS.values(), ids=DEPTHS.keys())
@pytest.mark.parametrize("name", orderbook.QUERIES)
def test_orderbook_plans_round_trip(name, depth):
    assert_plan_round_trip(compile_view(orderbook.read_query(name).sql, orderbook.SCHEMAS, depth=depth))


@pytest.mark.parametrize("depth", [0, 1, None, "reevaluated"], ids=["depth0", "depth1", "unlimited", "reevaluated"])
@pytest.mark.parametrize("sql", CORPUS_QUERIES + NESTED_QUERIES)
def test_corpus_plans_round_trip(sql, depth):
    if depth == "reevaluated":  # every delta replaced by a re-evaluation from the maps below (`:=`)
        plan = compile_query(translate(sql, CORPUS_SCHEMAS), policy=Policy(max_delta_nodes=0))
    else:
        plan = compile_view(sql, CORPUS_SCHEMAS, depth=depth)
    assert_plan_round_trip(plan)


ODD_SCHEMAS = {"my table": ["a b", "is", "NULL"], "1t": ["k", "ts"], "R": ["a", "b"]}


@pytest.mark.parametrize("sql", [
    # names that are not identifiers, or words of the calculus text, as tables and columns
    "SELECT `a b`, SUM(`is`), COUNT(`NULL`) FROM `my table` GROUP BY `a b`",
    "SELECT t.k, COUNT(*) FROM `1t` t JOIN `my table` m ON t.k = m.`is` GROUP BY t.k",
    # constants of every type, NULL among them
    "SELECT SUM(a) FROM R WHERE a > 1.50 AND b <> 'it''s' AND a IS NOT NULL AND b <> CAST(NULL AS INT)",
    "SELECT COUNT(*) FROM `1t` WHERE ts < CAST('2024-01-02 03:04:05.123456' AS TIMESTAMP) "
    "AND CAST(ts AS DATE) >= DATE '1998-12-01' - INTERVAL 90 DAY",
    "SELECT SUM(a * 1e-7), SUM(a * 12345678901234567890), MAX(b) FROM R "
    "WHERE a < CAST('Infinity' AS DOUBLE) AND a > CAST('-Infinity' AS DOUBLE)",
    "SELECT SUM(CAST(a AS DECIMAL(12, 2)) * 0.0100) FROM R WHERE b BETWEEN -3 AND 3 OR b IN (5, 7)",
    # Python UDFs, by their registered names
    "SELECT normalize_text(CAST(a AS STRING)) AS n, SUM(haversine_km(a, b, 0.0, 0.0)) FROM R GROUP BY 1",
    "SELECT a, b FROM R ORDER BY a DESC, b LIMIT 10",
])
def test_plans_with_odd_names_and_constants_round_trip(sql):
    for depth in (0, 1, None):
        assert_plan_round_trip(compile_view(sql, ODD_SCHEMAS, depth=depth))


def test_nan_constant_reads_back():
    """NaN is not equal to itself, so such a plan compares unequal to any copy; its text is the same."""
    plan = compile_view("SELECT COUNT(*) FROM R WHERE a <> CAST('NaN' AS DOUBLE)", ODD_SCHEMAS)
    text = plan_to_json(plan)
    assert "DOUBLE 'NaN'" in text and plan_to_json(plan_from_json(text)) == text


def test_plan_data_errors_name_the_field():
    data = plan_to_data(compile_view("SELECT b, SUM(a) FROM R GROUP BY b", CORPUS_SCHEMAS))
    data["triggers"][0]["statements"][0]["expr"] = "AggSum([b], R(a"
    with pytest.raises(FormatError, match=r"triggers\[0\]\.statements\[0\]\.expr: not a calculus expression"):
        plan_from_json(json.dumps(data))
    data = plan_to_data(compile_view("SELECT b, SUM(a) FROM R GROUP BY b", CORPUS_SCHEMAS))
    data["maps"][0]["level"] = "0"
    with pytest.raises(FormatError, match=r"maps\[0\]\.level: expected an integer, found a string"):
        plan_from_json(json.dumps(data))
    data["maps"][0]["level"] = 0
    del data["query"]["bag"]
    with pytest.raises(FormatError, match=r"query\.bag: missing"):
        plan_from_json(json.dumps(data))


# -- store layouts and entries --------------------------------------------------------------------------

LAYOUT = StoreLayout(
    "db.shared__store",
    (StoredMap(3, "q_count", ("b",), "bigint"), StoredMap(4, "q_sum_a", ("b",), "decimal(38,2)"),
     StoredMap(5, "q_mR", (), "double")),
    key_types=(("b", "int"),),
    key_names=(("b", "k_b_int"),),
    progress_id=-2,
)


def test_store_layout_round_trips():
    assert layout_from_json(layout_to_json(LAYOUT)) == LAYOUT
    plain = StoreLayout("db.v__ivm_maps", (StoredMap(0, "q_count", (), "bigint"),), ())
    assert layout_from_json(layout_to_json(plain)) == plain


def test_an_entry_whose_maps_share_rows_is_written_in_the_newest_format():
    shared = StoreLayout("db.shared__store", (
        StoredMap(3, "q_count", ("b",), "bigint"), StoredMap(3, "q_sum_a", ("b",), "decimal(38,2)"),
        StoredMap(3, "q_count_b", ("b",), "bigint", "v_bigint__2")), (("b", "int"),))
    assert layout_from_json(layout_to_json(shared)) == shared
    assert [shared.shares_rows(m.name) for m in shared.maps] == [True] * 3
    assert shared.map_ids == [3, -1] and shared.map("q_count_b").value_column == "v_bigint__2"
    entry = make_entry(layout=shared)
    text = entry_to_json(entry)
    assert json.loads(text)["format"] == FORMAT == 2
    assert entry_from_json(text, entry.name) == entry
    # Maps that share rows each in the first column of its type: format 2 still, which only readers that
    # select a map's rows by its value column read.
    first_columns = StoreLayout("db.shared__store", shared.maps[:2], (("b", "int"),))
    assert not any(m.column for m in first_columns.maps)
    assert json.loads(entry_to_json(make_entry(layout=first_columns)))["format"] == 2


def make_entry(**changes) -> ViewEntry:
    sql = "SELECT b, COUNT(*), SUM(a) FROM R GROUP BY b"
    fields = dict(
        name="db.v", sql=sql, options={"depth": None, "store": "db.shared__store"},
        plan=compile_view(sql, CORPUS_SCHEMAS, depth=None), layout=LAYOUT,
        sources={"R": "db.r"}, source_columns={"db.r": [["a", "decimal(10,2)"], ["b", "int"]]},
        output_types=[["b", "int"], ["count(1)", "bigint"], ["sum(a)", "decimal(20,2)"]],
        created_at=1764150000.123456, database="db", token=(1 << 62) - 12345,
        source_ids={"db.r": "4f5c3c2e-0a4e-4c39-9d0b-8c1f3e0f6a11"}, not_null_columns={"db.r": ["b"]},
    )
    fields.update(changes)
    return ViewEntry(**fields)


def test_view_entry_round_trips():
    entry = make_entry()
    text = entry_to_json(entry)
    assert entry_from_json(text, entry.name) == entry
    assert entry_to_json(entry_from_json(text, entry.name)) == text
    data = json.loads(text)
    assert data["format"] == 1  # no map shares rows: the format that versions before FORMAT read
    assert (data["name"], data["store"]) == ("db.v", "db.shared__store")
    assert_plain(data)
    # Defaults, an integral creation time, no options
    bare = make_entry(options={}, created_at=1764150000.0, database="", token=0, source_ids={}, not_null_columns={})
    assert entry_from_json(entry_to_json(bare), "db.v") == bare
    # An entry written before NOT NULL columns were recorded relies on none.
    older = json.loads(entry_to_json(entry))
    del older["not_null_columns"]
    assert entry_from_json(json.dumps(older), "db.v").not_null_columns == {}


def check_error(exc: CatalogEntryError, *fragments: str) -> None:
    message = str(exc)
    for fragment in ("incremental view db.v cannot be used", "DROP INCREMENTAL VIEW db.v",
                     "CREATE INCREMENTAL VIEW db.v", *fragments):
        assert fragment in message, message
    assert exc.view == "db.v"


@pytest.mark.parametrize("found", [3, 0, "1", True, None])
def test_an_entry_of_another_format_names_the_view_and_the_way_back(found):
    data = json.loads(entry_to_json(make_entry()))
    if found is None:
        del data["format"]
    else:
        data["format"] = found
    with pytest.raises(CatalogEntryError) as caught:
        entry_from_json(json.dumps(data), "db.v", catalog="default.spark_ivm_views")
    check_error(caught.value, f"format {json.dumps(found)}", "reads formats 1, 2",
                "SELECT sql FROM default.spark_ivm_views WHERE name = 'db.v'")
    assert caught.value.store == "db.shared__store"  # what DROP needs, read without the rest


@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
def test_a_pickled_entry_is_not_unpickled_but_names_its_store(protocol):
    entry = make_entry()
    blob = base64.b64encode(pickle.dumps(entry, protocol=protocol)).decode()
    with pytest.raises(CatalogEntryError) as caught:
        entry_from_json(blob, "db.v")
    check_error(caught.value, "older version of spark_ivm", "pickled")
    assert caught.value.store == "db.shared__store"
    # A store name pickled once and referenced again (the same string object in the options)
    store = "db.other__store"
    shared = make_entry(options={"store": store}, layout=StoreLayout(store, LAYOUT.maps, LAYOUT.key_types))
    blob = base64.b64encode(pickle.dumps(shared, protocol=protocol)).decode()
    with pytest.raises(CatalogEntryError) as caught:
        entry_from_json(blob, "db.v")
    assert caught.value.store == store


CALLS = []


def _record(*args):
    CALLS.append(args)


class _Payload:
    def __reduce__(self):
        return _record, ("ran",)


def test_a_pickled_entry_runs_nothing():
    blob = base64.b64encode(pickle.dumps({"entry": _Payload()})).decode()
    with pytest.raises(CatalogEntryError, match="pickled") as caught:
        entry_from_json(blob, "db.v")
    assert CALLS == [] and caught.value.store is None


@pytest.mark.parametrize("text, detail", [
    ("", "not a JSON object"),
    ("[1, 2]", "not a JSON object"),
    ("not base64 and not JSON", "not a JSON object"),
    (base64.b64encode(b"plain bytes").decode(), "not a JSON object"),
])
def test_a_damaged_entry_names_the_view(text, detail):
    with pytest.raises(CatalogEntryError, match=re.escape(detail)) as caught:
        entry_from_json(text, "db.v")
    check_error(caught.value, "damaged")


@pytest.mark.parametrize("change, detail", [
    (lambda d: d.pop("plan"), "plan: missing"),
    (lambda d: d.update(token="7"), "token: expected an integer, found a string"),
    (lambda d: d["layout"]["maps"][0].update(map_id=1.5), "layout.maps[0].map_id: expected an integer"),
    (lambda d: d["source_columns"]["db.r"].append(["c"]), "source_columns.db.r[2]: expected a pair of strings"),
    (lambda d: d["options"].update(depth=[1]), "options.depth: expected a string, a number"),
    (lambda d: d["plan"]["maps"][0].update(definition="AggSum(["), "plan.maps[0].definition: not a calculus"),
])
def test_a_damaged_field_is_named(change, detail):
    data = json.loads(entry_to_json(make_entry()))
    change(data)
    with pytest.raises(CatalogEntryError, match=re.escape(detail)) as caught:
        entry_from_json(json.dumps(data), "db.v")
    check_error(caught.value, "damaged")
    assert caught.value.store == "db.shared__store"


def test_no_module_unpickles():
    root = Path(__file__).resolve().parents[1]
    for folder in ("spark_ivm", "rules", "udfs"):
        for path in (root / folder).rglob("*.py"):
            source = path.read_text()
            assert not re.search(r"^\s*(import pickle\b|from pickle\b)|pickle\.loads?\(", source, re.M), path


def test_constants_keep_their_types():
    sql = "SELECT SUM(a) FROM R WHERE a <> 1 AND a <> 2.50 AND a <> 3e0 AND b <> TRUE AND b <> 'x'"
    plan = compile_view(sql, CORPUS_SCHEMAS)
    back = plan_from_json(plan_to_json(plan))
    consts = lambda p: [(type(c.value), c.value) for m in p.maps for c in m.definition.walk()  # noqa: E731
                        if type(c).__name__ == "Const"]
    assert consts(back) == consts(plan)
    assert {Decimal, int, float} <= {t for t, _ in consts(plan)}
    assert not any(isinstance(v, float) and math.isnan(v) for _, v in consts(plan))
