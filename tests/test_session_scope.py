"""What a refresh sets on the session and the JVM's connections (runtime/session_scope.py): look-ups run in
the process's own threads with the caller's job group, and never wait for each other; py4j's replies are
sent without Nagle's delay."""

from __future__ import annotations

import time

import pytest

from spark_ivm import heuristics
from spark_ivm.runtime.session_scope import gateway_connections, parallel, replies_without_delay

pytestmark = pytest.mark.runtime


def test_look_ups_carry_the_callers_job_group_and_leave_none_behind(spark):
    sc = spark.sparkContext
    items = range(3 * heuristics.LOOKUP_THREADS)

    def group(_):
        return sc.getLocalProperty("spark.jobGroup.id")

    sc.setJobGroup("looked_up", "look-ups")
    try:
        assert parallel(spark, group, items) == ["looked_up"] * len(items)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    # The same threads, for a caller without a job group: none is left from the last caller's.
    assert parallel(spark, group, items) == [None] * len(items)


def test_a_look_up_that_runs_look_ups_does_not_wait_for_the_few_threads():
    def outer(i):
        return sum(parallel(None, lambda j: i * j, range(heuristics.LOOKUP_THREADS + 1)))

    started = time.perf_counter()
    assert parallel(None, outer, range(heuristics.LOOKUP_THREADS + 1)) == \
        [i * sum(range(heuristics.LOOKUP_THREADS + 1)) for i in range(heuristics.LOOKUP_THREADS + 1)]
    assert time.perf_counter() - started < 60


def test_the_jvm_sends_replies_without_nagles_delay(spark):
    parallel(spark, lambda t: spark._jsparkSession.version(), range(heuristics.LOOKUP_THREADS))  # more connections
    replies_without_delay(spark)
    connections = list(gateway_connections(spark).toArray())
    assert len(connections) >= 2
    assert all(c.getSocket().getTcpNoDelay() for c in connections)
    # A reply longer than py4j's buffer comes back whole.
    assert spark._jvm.org.apache.commons.lang3.StringUtils.repeat("x", 100_000) == "x" * 100_000
