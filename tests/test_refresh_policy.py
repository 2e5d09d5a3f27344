"""What a refresh reads and how: the maps its statements read, when it reads the map store (or CREATE a
source table) once for all references, and how its checkpoints are partitioned (pure Python)."""

from __future__ import annotations

from spark_ivm import compile_view
from spark_ivm.heuristics import (
    DEFAULT_CHECKPOINT_PARTITIONS, SHARED_SOURCE_READ_MAX_BYTES, checkpoint_partitions, reads_source_once, reads_store_once,
)
from spark_ivm.runtime.engine import _maps_read

SCHEMAS = {"R": ["A", "B"], "S": ["B", "C"]}


def test_a_statement_reads_the_maps_it_refers_to():
    # Worked example 1 of the design: ON S, q += ΔS(B,C) * m[B] reads one map over R; the maps over
    # R are incremented from R's batch alone and read none.
    plan = compile_view("SELECT SUM(A) FROM R, S WHERE R.B = S.B", SCHEMAS, name="q")
    on_s = {s.target: _maps_read(s) for s in plan.trigger("S").statements}
    on_r = {s.target: _maps_read(s) for s in plan.trigger("R").statements}
    assert on_s["q_count"] == ("q_count_mS",) and on_s["q_sum_1"] == ("q_sum_1_mS",)
    assert on_r["q_count"] == ("q_count_mR",) and on_r["q_count_mS"] == ()


def test_a_re_evaluated_map_also_reads_its_old_contents():
    plan = compile_view("SELECT SUM(A) FROM R, S WHERE R.B = S.B", SCHEMAS, name="q", depth=0)
    recomputed = [s for t in plan.triggers for s in t.statements if s.op == ":="]
    assert recomputed
    assert all(s.target in _maps_read(s) for s in recomputed)


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


def test_creating_a_view_reads_a_small_source_once_when_its_maps_refer_to_it_twice():
    assert not reads_source_once(1, 1000)
    assert reads_source_once(2, 1000)
    assert reads_source_once(9, SHARED_SOURCE_READ_MAX_BYTES)
    assert not reads_source_once(9, SHARED_SOURCE_READ_MAX_BYTES + 1)
