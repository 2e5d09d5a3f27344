"""Runs rewrite rules in declared batches, the way Catalyst's RuleExecutor does.

A batch is a name, a strategy (`Once`, or `FixedPoint(n)`: repeat until nothing changes, at most n
times) and an ordered tuple of rules, each a pure function `Expr -> Expr`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from spark_ivm.calculus.expressions import Expr

Rule = Callable[[Expr], Expr]


@dataclass(frozen=True)
class Once:
    pass


@dataclass(frozen=True)
class FixedPoint:
    max_iterations: int = 100


@dataclass(frozen=True)
class Batch:
    name: str
    strategy: Once | FixedPoint
    rules: tuple[Rule, ...]


class NonTerminationError(RuntimeError):
    """A fixed-point batch was still changing the expression after its iteration limit."""


class IdempotenceError(RuntimeError):
    """A `Once` batch changed an expression it had already rewritten."""


@dataclass
class RuleExecutor:
    batches: Sequence[Batch]
    strict: bool = False  # tests turn this on: non-termination raises, Once batches are re-checked
    trace: list[tuple[str, Expr]] | None = None  # (batch name, result) after each batch, for EXPLAIN

    def execute(self, e: Expr) -> Expr:
        for batch in self.batches:
            e = self._run(batch, e)
            if self.trace is not None:
                self.trace.append((batch.name, e))
        return e

    def _run(self, batch: Batch, e: Expr) -> Expr:
        if isinstance(batch.strategy, Once):
            result = _apply_all(batch.rules, e)
            if self.strict and _apply_all(batch.rules, result) != result:
                raise IdempotenceError(f"batch {batch.name!r} is not idempotent on {result}")
            return result
        for _ in range(batch.strategy.max_iterations):
            result = _apply_all(batch.rules, e)
            if result == e:
                return result
            e = result
        if self.strict:
            raise NonTerminationError(
                f"batch {batch.name!r} did not reach a fixed point in {batch.strategy.max_iterations} iterations"
            )
        return e


def _apply_all(rules: Sequence[Rule], e: Expr) -> Expr:
    for rule in rules:
        e = rule(e)
    return e
