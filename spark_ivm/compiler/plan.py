"""The compiled form of a view: maps and, per base relation, the statements a batch runs.

Printed in an M3-like text form:

    DECLARE MAP q[] := AggSum([], O(k, r) * L(k, p) * p * r);
    ON BATCH OF O:
      q[] += AggSum([], ΔO(k, r) * r * q_mO[k]);

Statement semantics: every statement of a trigger reads map values as they were before the batch and
the batch itself, then all `+=` results are added. `+=` statements read base relations before the
batch. A `:=` statement computes its map's new contents, marked `-- re-evaluated`: at depth 0 from the
base relations after the batch; otherwise (a delta too large to plan, see `heuristics`) from the maps
below it, each `M` that the batch changes read as `M + ΔM`, and no base relation.

A statement whose delta holds a nested aggregate (scalar subquery, EXISTS, IN, outer join) adds the
new value's contribution and subtracts the old one only for the keys whose nested value the batch
changed, `Exists(Δt) * ((v ^= t + Δt) − (v ^= t))`; it is marked
`-- re-evaluated per affected key [k]` (k: the correlation keys the batch enumerates, none when the
nested aggregate is uncorrelated and the outer part is re-evaluated whenever it changes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spark_ivm.calculus.analysis import affected_key_domains, ovars
from spark_ivm.calculus.expressions import Expr
from spark_ivm.calculus.printer import to_text
from spark_ivm.frontend.view_query import ViewQuery


@dataclass(frozen=True)
class MapDecl:
    name: str
    keys: tuple[str, ...]
    definition: Expr  # AggSum(keys, …) over base relations
    level: int  # 0 for the view's own maps, n for maps extracted from an n-th order delta
    maintenance: str = "incremental"  # "incremental" | "first-order" | "recompute" (policy's choice)

    def text(self) -> str:
        return f"DECLARE MAP {self.name}[{', '.join(self.keys)}] := {to_text(self.definition)};"


@dataclass(frozen=True)
class Statement:
    target: str
    keys: tuple[str, ...]
    op: str  # "+=" or ":="
    expr: Expr  # AggSum(keys, …) over ΔR, maps and (first-order maps only) base relations

    def text(self) -> str:
        text = f"{self.target}[{', '.join(self.keys)}] {self.op} {to_text(self.expr)};"
        keys = self.reevaluated_keys
        if self.op == ":=":
            text += "  -- re-evaluated"
        elif keys is not None:
            text += f"  -- re-evaluated per affected key [{', '.join(keys)}]"
        return text

    @property
    def reevaluated_keys(self) -> tuple[str, ...] | None:
        """The keys for which this statement re-evaluates nested parts (None: it only adds deltas)."""
        domains = affected_key_domains(self.expr) if self.op == "+=" else []
        if not domains:
            return None
        return tuple(dict.fromkeys(v for d in domains for v in ovars(d)))


@dataclass(frozen=True)
class Trigger:
    relation: str
    statements: tuple[Statement, ...]


@dataclass(frozen=True)
class Plan:
    maps: tuple[MapDecl, ...]
    triggers: tuple[Trigger, ...]
    query: ViewQuery | None = None
    depth: int | None = None
    notes: tuple[str, ...] = field(default=())

    def map(self, name: str) -> MapDecl:
        for m in self.maps:
            if m.name == name:
                return m
        raise KeyError(name)

    def trigger(self, relation: str) -> Trigger | None:
        return next((t for t in self.triggers if t.relation == relation), None)

    @property
    def relations(self) -> tuple[str, ...]:
        return tuple(t.relation for t in self.triggers)

    def explain(self) -> str:
        lines = []
        if self.query is not None:
            lines += ["-- view", *("   " + line for line in self.query.explain().splitlines()), ""]
        lines.append(f"-- maps (depth {'unlimited' if self.depth is None else self.depth})")
        for m in self.maps:
            note = "" if m.maintenance == "incremental" else f"  -- {m.maintenance}"
            lines.append(m.text() + note)
        for t in self.triggers:
            lines.append("")
            lines.append(f"ON BATCH OF {t.relation}:")
            lines += ["  " + s.text() for s in t.statements]
        lines += [f"-- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    __str__ = explain
