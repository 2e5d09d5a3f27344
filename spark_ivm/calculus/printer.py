"""Readable text form of calculus expressions; `spark_ivm.calculus.parser` reads it back.

    AggSum([o_k], O(o_k, o_r) * {o_r > 5} * (x ^= {o_r + 1}) * Exists(S(o_k)) * m[o_k])

Values stand in braces when they are not a plain variable or constant: `{a + b}`, `{upper(s)}`,
comparisons `{a < b}`, `{a IS NULL}`, `{a IS NOT b}` (null-safe). A delta atom prints as `ΔR(x)`.

A name that is not an identifier (a table `my table`, `1t`) or that the parser would read as syntax
(`NULL`, `AggSum`, `IS`, …) stands in backquotes, a backquote in it doubled: plans are stored as this
text (the view catalog), so every name and constant must read back as itself. A non-finite double is
`DOUBLE 'NaN'`, `DOUBLE 'Infinity'` or `DOUBLE '-Infinity'`.
"""

from __future__ import annotations

import datetime
import math
import re
from decimal import Decimal

from spark_ivm.calculus.expressions import (
    AggSum, Cmp, Const, DeltaRel, Exists, Expr, Fn, Lift, MapRef, Prod, Rel, Sum, Var,
)

INFIX_FNS = ("+", "-", "/", "%", "||")
OPERATOR_FNS = ("+", "-", "*", "/", "%", "||")  # operators that may name a function: -(x), +(a, b, c)

_IDENTIFIER = re.compile(r"[^\W\d][\w$#.]*")
# Words the parser reads as literals or syntax where a name could stand (IS and NOT in any case).
_RESERVED = ("NULL", "TRUE", "FALSE", "DATE", "TIMESTAMP", "DOUBLE", "AggSum", "Exists")


def name_text(text: str) -> str:
    """A variable, relation, map or function name as the parser reads it back."""
    if (_IDENTIFIER.fullmatch(text) and not text.startswith("Δ") and text not in _RESERVED
            and text.upper() not in ("IS", "NOT")):
        return text
    return "`" + text.replace("`", "``") + "`"


def _names(names) -> str:
    return ", ".join(name_text(n) for n in names)


def literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, Decimal) and not value.is_finite():
        raise ValueError(f"no literal form for the non-finite decimal {value!r}")
    if isinstance(value, Decimal):
        return f"{value}BD"
    if isinstance(value, float) and not math.isfinite(value):
        return "DOUBLE 'NaN'" if math.isnan(value) else f"DOUBLE '{'-' if value < 0 else ''}Infinity'"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, datetime.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, datetime.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"no literal form for {value!r}")


def to_text(e: Expr) -> str:
    return _expr(e)


def _expr(e: Expr) -> str:
    if isinstance(e, Sum):
        return " + ".join(_term(t) for t in e.terms)
    return _term(e)


def _term(e: Expr) -> str:
    if isinstance(e, Prod):
        return " * ".join(_factor(f) for f in e.factors)
    return _factor(e)


def _factor(e: Expr) -> str:
    if isinstance(e, Sum):
        return f"({_expr(e)})"
    if isinstance(e, Prod):
        return f"({_term(e)})"
    if isinstance(e, Const):
        return literal(e.value)
    if isinstance(e, Var):
        return name_text(e.name)
    if isinstance(e, (Fn, Cmp)):
        return "{" + _value(e) + "}"
    if isinstance(e, Rel):
        return f"{name_text(e.name)}({_names(e.vars)})"
    if isinstance(e, DeltaRel):
        return f"Δ{name_text(e.name)}({_names(e.vars)})"
    if isinstance(e, MapRef):
        return f"{name_text(e.name)}[{_names(e.keys)}]"
    if isinstance(e, Lift):
        return f"({name_text(e.var)} ^= {_lift_body(e.expr)})"
    if isinstance(e, AggSum):
        return f"AggSum([{_names(e.group)}], {_expr(e.expr)})"
    if isinstance(e, Exists):
        return f"Exists({_expr(e.expr)})"
    raise TypeError(f"cannot print {e!r}")


def _lift_body(e: Expr) -> str:
    return "{" + _value(e) + "}" if _is_value(e) and not isinstance(e, (Var, Const)) else _factor(e)


def _is_value(e: Expr) -> bool:
    if isinstance(e, (Const, Var)):
        return True
    if isinstance(e, (Fn, Cmp)):
        return True
    if isinstance(e, Prod):
        return all(_is_value(f) for f in e.factors)
    return False


# Inside braces: value syntax with precedence (|| and + - below * / %).
def _value(e: Expr, parent_prec: int = 0) -> str:
    if isinstance(e, Cmp):
        op = {"is": "IS", "is not": "IS NOT"}.get(e.op, e.op)
        text = f"{_value(e.left, 1)} {op} {_value(e.right, 1)}"
        return f"({text})" if parent_prec > 0 else text
    if isinstance(e, Fn) and e.name in INFIX_FNS and len(e.args) == 2:
        prec = 3 if e.name in ("/", "%") else 2
        text = f"{_value(e.args[0], prec)} {e.name} {_value(e.args[1], prec + 1)}"
        return f"({text})" if prec < parent_prec else text
    if isinstance(e, Fn):
        called = e.name if e.name in OPERATOR_FNS else name_text(e.name)
        return f"{called}({', '.join(_value(a) for a in e.args)})"
    if isinstance(e, Prod):
        text = " * ".join(_value(f, 4) for f in e.factors)
        return f"({text})" if 3 < parent_prec else text
    if isinstance(e, (Const, Var)):
        return _factor(e)
    # A non-value inside a value (e.g. a nested AggSum as a function argument). A Sum or a relation
    # atom would read back as value arithmetic or a function call: brackets mark calculus syntax.
    if isinstance(e, (Sum, Rel)):
        return f"[{_expr(e)}]"
    return _factor(e)
