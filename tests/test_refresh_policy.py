"""What a refresh reads and how: the maps its statements read, which of their keys a batch fixes, when it
reads the map store (or CREATE a source table) once for all references, which statements read a batch
hinted for broadcast, and how its checkpoints are partitioned (pure Python)."""

from __future__ import annotations

import sqlglot

from spark_ivm import compile_view
from spark_ivm.calculus.analysis import map_key_bindings, map_key_links
from spark_ivm.calculus.expressions import aggsum, cmp, delta_rel, exists, lift, map_ref, prod, rel, sum_, var
from spark_ivm.heuristics import (
    DEFAULT_CHECKPOINT_PARTITIONS, LISTED_BATCH_ROWS_MAX, SHARED_SOURCE_READ_MAX_BYTES, SHARED_SOURCE_READ_MIN_BYTES,
    checkpoint_partitions, lists_batch_values, reads_source_once, reads_store_once,
)
from spark_ivm.runtime.mapstore import union_sql
from spark_ivm.runtime.refresh import _batch_alone
from spark_ivm.runtime.view_work import maps_read

SCHEMAS = {"R": ["A", "B"], "S": ["B", "C"]}


def test_a_statement_reads_the_maps_it_refers_to():
    # Worked example 1 of the design: ON S, q += ΔS(B,C) * m[B] reads one map over R; the maps over
    # R are incremented from R's batch alone and read none.
    plan = compile_view("SELECT SUM(A) FROM R, S WHERE R.B = S.B", SCHEMAS, name="q")
    on_s = {s.target: maps_read(s) for s in plan.trigger("S").statements}
    on_r = {s.target: maps_read(s) for s in plan.trigger("R").statements}
    assert on_s["q_count"] == ("q_count_mS",) and on_s["q_sum_1"] == ("q_sum_1_mS",)
    assert on_r["q_count"] == ("q_count_mR",) and on_r["q_count_mS"] == ()


def test_only_statements_that_join_a_batch_read_it_hinted_for_broadcast():
    """A hint on a batch no join reads is one Spark warns of (refresh._batch_alone picks the plain view)."""
    def alone(sql, depth=None):
        plan = compile_view(sql, SCHEMAS, name="q", **({} if depth is None else {"depth": depth}))
        return {s.target: _batch_alone(s.expr) for t in plan.triggers for s in t.statements}
    assert all(alone("SELECT SUM(A) FROM R WHERE B > 1").values())
    assert not any(alone("SELECT SUM(A) FROM R, S WHERE R.B = S.B", depth=0).values())
    # Higher order: ΔR alone updates the map of R's rows per B; ΔR joined with S's map updates the view.
    assert set(alone("SELECT SUM(A) FROM R, S WHERE R.B = S.B").values()) == {True, False}
    # The batch joined with itself: a nested aggregate over the same table.
    assert not any(alone("SELECT SUM(A) FROM R WHERE B > (SELECT COUNT(*) FROM R)", depth=1).values())


def test_a_re_evaluated_map_also_reads_its_old_contents():
    plan = compile_view("SELECT SUM(A) FROM R, S WHERE R.B = S.B", SCHEMAS, name="q", depth=0)
    recomputed = [s for t in plan.triggers for s in t.statements if s.op == ":="]
    assert recomputed
    assert all(s.target in maps_read(s) for s in recomputed)


def test_the_store_is_read_once_from_two_map_references_on():
    assert not reads_store_once(0)
    assert not reads_store_once(1)
    assert reads_store_once(2)
    assert reads_store_once(40)


def test_a_checkpoint_is_read_in_as_many_partitions_as_a_shuffle_makes():
    assert checkpoint_partitions("2") == 2
    assert checkpoint_partitions("200") == 200
    assert checkpoint_partitions("0") == 1
    assert checkpoint_partitions("auto") == DEFAULT_CHECKPOINT_PARTITIONS
    assert checkpoint_partitions(None) == DEFAULT_CHECKPOINT_PARTITIONS


def test_a_union_of_increments_is_read_in_as_many_tasks_as_a_checkpoint():
    # Every task of a union's stage deserializes all its branches: many statements are read in few tasks.
    parts = ["SELECT 1 AS x", "SELECT 2 AS x", "SELECT 3 AS x"]
    sql = union_sql(parts, 2)
    tree = sqlglot.parse_one(sql, read="spark")
    assert tree.args["hint"].sql(dialect="spark") == "/*+ COALESCE(2) */"
    assert sorted(s.sql() for s in tree.find(sqlglot.exp.Subquery).this.find_all(sqlglot.exp.Select)) == parts
    assert union_sql(parts[:1], 2) == parts[0]  # one statement: no union to coalesce


def test_creating_a_view_reads_a_small_source_once_when_its_maps_refer_to_it_twice():
    assert not reads_source_once(1, 2_000_000)
    assert reads_source_once(2, 2_000_000)
    assert not reads_source_once(9, SHARED_SOURCE_READ_MIN_BYTES - 1)  # a few scans cost less than a job
    assert reads_source_once(9, SHARED_SOURCE_READ_MIN_BYTES)
    assert reads_source_once(9, SHARED_SOURCE_READ_MAX_BYTES)
    assert not reads_source_once(9, SHARED_SOURCE_READ_MAX_BYTES + 1)


def test_a_batch_fixes_the_keys_of_a_map_it_joins_in_one_product():
    # ON S: q += ΔS(B, C) * m[B]: only m's rows at the batch's B values can join.
    plan = compile_view("SELECT SUM(A) FROM R, S WHERE R.B = S.B", SCHEMAS, name="q")
    on_s = {s.target: map_key_bindings(s.expr) for s in plan.trigger("S").statements}
    assert on_s["q_count"] == [("q_count_mS", ((0, "S", 0),))]
    # Key 1 (D) is not a batch column; key 0 (B) is column 0 of the batch. A second batch binding B
    # again does not repeat it.
    e = aggsum(["D"], prod(delta_rel("S", "B", "C"), delta_rel("S", "B", "E"), map_ref("m", "B", "D")))
    assert map_key_bindings(e) == [("m", ((0, "S", 0),))]


def test_a_key_the_batch_fixes_is_linked_to_the_other_maps_the_batch_fixes():
    # ON L: q += ΔL(P, Q) * m4[P, X] * m3[P]: m4's P holds only keys of m3's rows at the batch's P values
    # (TPC-H Q17: the parts of one brand among the parts a batch touches), and m3's only keys of m4's.
    e = aggsum([], prod(delta_rel("L", "P", "Q"), map_ref("m4", "P", "X"), map_ref("m3", "P")))
    assert map_key_bindings(e) == [("m4", ((0, "L", 0),)), ("m3", ((0, "L", 0),))]
    assert map_key_links(e) == [("m4", ((0, "m3", 0),)), ("m3", ((0, "m4", 0),))]


def test_a_map_sharing_a_variable_with_a_map_the_batch_fixes_is_linked_to_it():
    # ON C: q += ΔC(K) * m1[O, K] * m2[O]: m2's O holds only keys of m1's rows at the batch's K values.
    e = aggsum([], prod(delta_rel("C", "K"), map_ref("m1", "O", "K"), map_ref("m2", "O"), map_ref("m3", "X")))
    assert map_key_bindings(e) == [("m1", ((1, "C", 0),)), ("m2", ()), ("m3", ())]
    assert map_key_links(e) == [("m1", ()), ("m2", ((0, "m1", 0),)), ("m3", ())]
    # No map the batch fixes, no link; a map inside a nested aggregate is not linked either.
    assert map_key_links(prod(map_ref("m1", "O", "K"), map_ref("m2", "O"))) == [("m1", ()), ("m2", ())]
    nested = prod(delta_rel("C", "K"), map_ref("m1", "O", "K"), aggsum(["O"], map_ref("m2", "O")))
    assert map_key_links(nested) == [("m1", ()), ("m2", ())]
    # q3's trigger on customer: the lineitem map reached through the orders' map.
    plan = compile_view("SELECT O.ok, SUM(L.p) FROM C, O, L WHERE C.ck = O.ck AND L.ok = O.ok GROUP BY O.ok",
                        {"C": ["ck", "seg"], "O": ["ok", "ck"], "L": ["ok", "p"]}, name="q")
    links = [link for s in plan.trigger("C").statements for _, link in map_key_links(s.expr)]
    assert any(links), links


def test_a_map_read_outside_a_product_with_a_batch_fixes_no_key():
    batch = delta_rel("S", "B", "C")
    # The same variable, but the map is inside a nested aggregate, an existence test or a lift to the
    # left of the batch: B is not bound yet there, the aggregate sums over all of it.
    nested = aggsum([], prod(lift("X", aggsum([], map_ref("m", "B"))), batch, cmp(">", var("X"), var("C"))))
    assert map_key_bindings(nested) == [("m", ())]
    assert map_key_bindings(prod(exists(aggsum([], map_ref("m", "B"))), batch)) == [("m", ())]
    # A sum's terms are products of their own: a term without the batch fixes nothing.
    either = prod(sum_(prod(batch, map_ref("m", "B")), prod(rel("R", "A", "B"), map_ref("m", "B"))))
    assert map_key_bindings(either) == [("m", ((0, "S", 0),)), ("m", ())]
    # No shared variable: nothing is fixed.
    assert map_key_bindings(prod(batch, map_ref("m", "D"))) == [("m", ())]


def test_a_map_read_nested_right_of_a_batch_reads_its_keys():
    # Factors bind left to right: a nested aggregate after the batch reads m at the batch's B.
    batch = delta_rel("S", "B", "C")
    nested = aggsum([], prod(batch, lift("X", aggsum(["B"], map_ref("m", "B"))), cmp(">", var("X"), var("C"))))
    assert map_key_bindings(nested) == [("m", ((0, "S", 0),))]
    assert map_key_bindings(prod(batch, exists(map_ref("m", "B")))) == [("m", ((0, "S", 0),))]
    # Deeper: the binding reaches through nested products and sums.
    deep = prod(batch, lift("X", aggsum([], sum_(prod(rel("R", "A", "B"), map_ref("m", "A", "B")), map_ref("n", "B")))))
    assert map_key_bindings(deep) == [("m", ((1, "S", 0),)), ("n", ((0, "S", 0),))]


def test_a_restriction_to_the_keys_a_batch_affects_fixes_the_keys_it_binds():
    # A re-evaluation per affected key (TPC-H Q17): the product reads n and m only at the keys B of the
    # batch, through an existence test of aggregates of the batch, not through the batch itself.
    affected = exists(sum_(exists(aggsum(["B"], delta_rel("S", "B", "C"))),
                           exists(aggsum(["B"], prod(delta_rel("S", "B", "C"), var("C"))))))
    per_key = aggsum([], prod(affected, lift("X", aggsum(["B"], map_ref("n", "B"))), map_ref("m", "B", "D")))
    assert map_key_bindings(per_key) == [("n", ((0, "S", 0),)), ("m", ((0, "S", 0),))]
    # Terms that bind the key to different columns (or one that does not bind it) fix nothing.
    apart = exists(sum_(aggsum(["B"], delta_rel("S", "B", "C")), aggsum(["B"], delta_rel("S", "C", "B"))))
    assert map_key_bindings(prod(apart, map_ref("m", "B"))) == [("m", ())]
    # Only the aggregate's group is bound: C is summed away inside it.
    assert map_key_bindings(prod(aggsum(["B"], delta_rel("S", "B", "C")), map_ref("m", "C"))) == [("m", ())]


def test_a_batch_lists_its_values_where_its_range_would_copy_many_other_keys():
    # 6,041 lineitems refer to parts all over 1..200,000: their range skips nothing, their list does.
    assert lists_batch_values(6_041, 199_990)
    # 1,500 new orders with consecutive keys: the range holds little beside them.
    assert not lists_batch_values(1_500, 5_998)
    assert lists_batch_values(10, None)  # strings, dates, decimals: no span to judge by
    assert not lists_batch_values(0, None) and not lists_batch_values(LISTED_BATCH_ROWS_MAX + 1, None)
    # A batch the driver holds lists its values at any size: collecting them costs no job.
    assert lists_batch_values(LISTED_BATCH_ROWS_MAX + 1, None, held=True)
    assert not lists_batch_values(LISTED_BATCH_ROWS_MAX + 1, 5, held=True)  # still not a dense range
