"""A set operation as the view (UNION [ALL], EXCEPT [ALL], INTERSECT [ALL], chains and mixes): the count
of each row in its operands, and the multiplicity they give the row in the view."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot import exp

from spark_ivm.calculus.analysis import rename
from spark_ivm.calculus.expressions import ZERO, Expr, aggsum, lift, prod, sum_
from spark_ivm.frontend.constructs import reject_aggregates, reject_python_calls_when_read, set_operation_name
from spark_ivm.frontend.scope import Translation
from spark_ivm.frontend.select import (
    SelectTranslator, check_widths, define_ctes, reject_set_operation_clauses, unwrapped,
)
from spark_ivm.frontend.source import DIALECT
from spark_ivm.frontend.view import limit_of, quoted_column
from spark_ivm.frontend.view_query import ROW_COUNT, Aggregate, OutputColumn, ViewQuery


@dataclass
class _Count:
    """The number of copies of a row in a sum of operands: one aggregate, the AggSum of their bodies."""

    bodies: list[Expr]


@dataclass
class _Combined:
    """A multiplicity computed from others when the view is read: `template` formats their SQL."""

    template: str
    parts: list["_Count | _Combined"]


def _added(terms: list[_Count | _Combined]) -> _Count | _Combined:
    """The sum of multiplicities; the counts among them are added as one aggregate (a calculus Sum)."""
    merged = _Count([b for t in terms if isinstance(t, _Count) for b in t.bodies])
    parts: list[_Count | _Combined] = []
    for t in terms:  # the merged count where the first count stands, so that names go left to right
        if not isinstance(t, _Count):
            parts.append(t)
        elif all(p is not merged for p in parts):
            parts.append(merged)
    if len(parts) == 1:
        return parts[0]
    return _Combined("(" + " + ".join(f"{{{i}}}" for i in range(len(parts))) + ")", parts)


def _nonzero(term: _Count | _Combined) -> _Combined:
    return _Combined("CASE WHEN {0} > 0 THEN 1 ELSE 0 END", [term])


class SetOperationTranslator:
    """UNION [ALL], EXCEPT [ALL] and INTERSECT [ALL] of SELECTs as the view query.

    The keys are fresh variables `u1`…`un`, one per output column; each operand's body lifts them to
    its select list, so rows compare NULL-safely as set operations do. A sum of operands (UNION ALL)
    is one count; EXCEPT, INTERSECT and DISTINCT are not sums, so each of their operands is a count of
    its own (`count`, `count_r`, `count_r2`… from left to right) and the view's multiplicity combines
    them: GREATEST(`count` - `count_r`, 0) for EXCEPT ALL, LEAST(…) for INTERSECT ALL. The distinct
    kinds only tell whether a row is present; the view then holds each present row once."""

    def __init__(self, translation: Translation, node: exp.SetOperation):
        self.translation = translation
        self.source = translation.source
        self.node = node
        self.ctes: dict[str, tuple] = {}
        define_ctes(node, self.ctes)
        self.keys: list[str] = []
        self.names: list[str] = []
        self.widths: list[int] = []

    def view(self) -> ViewQuery:
        distinct = self.node.args.get("distinct") is not False
        term = self._term(self.node, exact=not distinct)
        check_widths(self.source, self.node, self.widths)
        counts: list[tuple[str, list[Expr]]] = []
        multiplicity = self._render(term, counts) if isinstance(term, _Combined) else None
        if multiplicity is None:
            counts.append((ROW_COUNT, term.bodies))
        variable_names = self.translation.names.final_names()
        keys = tuple(variable_names[k] for k in self.keys)
        aggregates = tuple(Aggregate(name, aggsum(keys, rename(sum_(*bodies), variable_names)))
                           for name, bodies in counts)
        if any(a.definition == ZERO for a in aggregates):  # an operand with WHERE FALSE: no map to maintain
            raise self.source.unsupported("an operand of a set operation that selects no row whatever the data",
                                          self.node, detail="its WHERE is always false or NULL")
        return ViewQuery(
            sql=self.source.text,
            keys=keys,
            aggregates=aggregates,
            columns=tuple(OutputColumn(name, quoted_column(key).sql(dialect=DIALECT))
                          for name, key in zip(self.names, keys)),
            order_by=self._order_by(),
            limit=limit_of(self.source, self.node),
            bag=True,
            relations=tuple(dict.fromkeys(self.translation.relations)),
            multiplicity=multiplicity or f"`{ROW_COUNT}`",
            distinct=distinct,
        )

    def _term(self, node: exp.Expression, exact: bool) -> _Count | _Combined:
        """The multiplicity of a row in the operand; when not `exact`, only whether it is positive counts."""
        node = unwrapped(node)
        if isinstance(node, exp.Select):
            count = self._operand(node)
            return _nonzero(count) if node.args.get("distinct") is not None and exact else count
        if not isinstance(node, exp.SetOperation):
            raise self.source.unsupported(f"{node.key.upper()} as an operand of a set operation", node)
        if node is not self.node:
            reject_set_operation_clauses(self.source, node, "inside another")
        all_rows = node.args.get("distinct") is False
        operands = self._chain(node)
        terms = [self._term(operand, exact=all_rows) for operand in operands]
        if isinstance(node, exp.Union):
            total = _added(terms)
            return _nonzero(total) if exact and not all_rows else total
        if isinstance(node, exp.Except):
            # (A EXCEPT B) EXCEPT C is A EXCEPT (B UNION C), with or without ALL.
            removed = _added(terms[1:])
            if all_rows:
                return _Combined("GREATEST({0} - {1}, 0)", [terms[0], removed])
            return _Combined("CASE WHEN {0} > 0 AND {1} = 0 THEN 1 ELSE 0 END", [terms[0], removed])
        if isinstance(node, exp.Intersect):
            if all_rows:
                return _Combined(f"LEAST({', '.join(f'{{{i}}}' for i in range(len(terms)))})", terms)
            tests = " AND ".join(f"{{{i}}} > 0" for i in range(len(terms)))
            return _Combined(f"CASE WHEN {tests} THEN 1 ELSE 0 END", terms)
        name = set_operation_name(node)
        raise self.source.unsupported(name, node, name.split()[0], where="inside")

    @staticmethod
    def _chain(node: exp.SetOperation) -> list[exp.Expression]:
        """The operands of a left-associated chain of one kind of set operation: A op B op C (in a loop: a
        chain of a thousand operands costs no recursion)."""
        same = (type(node), node.args.get("distinct"))
        operands = [node.expression]
        left = unwrapped(node.this)
        while (isinstance(left, exp.SetOperation) and (type(left), left.args.get("distinct")) == same
               and not any(left.args.get(c) for c in ("limit", "offset"))):
            node = left
            operands.append(node.expression)
            left = unwrapped(node.this)
        operands.append(node.this)
        return operands[::-1]

    def _operand(self, select: exp.Select) -> _Count:
        inner = SelectTranslator(self.translation, select, self.ctes)
        outputs = inner.inlined_outputs("a set operation", distinct=True)
        if not self.widths:
            self.names = [name for name, _ in outputs]
            self.keys = [self.translation.names.generated("u") for _ in outputs]
        self.widths.append(len(outputs))
        lifts = [lift(key, value) for key, (_, value) in zip(self.keys, outputs)]
        return _Count([prod(*inner.scope.relations(), *inner.scope.factors(), *lifts)])

    def _render(self, term: _Count | _Combined, counts: list[tuple[str, list[Expr]]]) -> str:
        if isinstance(term, _Count):
            name = ROW_COUNT if not counts else f"{ROW_COUNT}_r{len(counts) if len(counts) > 1 else ''}"
            counts.append((name, term.bodies))
            return f"`{name}`"
        return term.template.format(*(self._render(part, counts) for part in term.parts))

    def _order_by(self) -> tuple[str, ...]:
        """ORDER BY output columns: by position, by name, or expressions of names."""
        order = self.node.args.get("order")
        sorts = []
        for ordered in (order.expressions if order is not None else []):
            reject_aggregates(self.source, ordered.this, "aggregate in ORDER BY of a set operation")
            target = ordered.this
            if isinstance(target, exp.Literal) and not target.is_string and re.fullmatch(r"\d+", target.this):
                position = int(target.this)
                if not 1 <= position <= len(self.names):
                    raise self.source.unsupported(f"position {position} that is not in the select list", target)
                target = quoted_column(self.names[position - 1])
            else:
                target = target.transform(self._output_column)
            reject_python_calls_when_read(self.source, target)
            sorts.append(exp.Ordered(this=target, desc=ordered.args.get("desc"),
                                     nulls_first=ordered.args.get("nulls_first")).sql(dialect=DIALECT))
        return tuple(sorts)

    def _output_column(self, node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Column):
            return node
        named = [n for n in self.names if n.lower() == node.name.lower()] if not node.table else []
        if not named:
            raise self.source.unsupported("ORDER BY an expression that is not in the select list", node)
        return quoted_column(named[0])
