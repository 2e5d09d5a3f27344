"""Reads the text form of calculus expressions that `spark_ivm.calculus.printer.to_text` writes.

    >>> from spark_ivm.calculus.printer import to_text
    >>> e = parse("AggSum([o_k], O(o_k, o_r) * {o_r > 5} * (x ^= {o_r + 1}) * Exists(S(o_k)) * m[o_k])")
    >>> to_text(e)
    'AggSum([o_k], O(o_k, o_r) * {o_r > 5} * (x ^= {o_r + 1}) * Exists(S(o_k)) * m[o_k])'

The grammar has two levels. At the *calculus* level `+` is `Sum` and `*` is `Prod`:

    expr    := term ('+' term)*
    term    := factor ('*' factor)*
    factor  := '(' NAME '^=' expr ')'                     lift
             | '(' expr ')'
             | '{' value '}'                              a value (function, comparison, …)
             | literal | NAME                             constant, variable
             | NAME '(' names ')'                         relation atom R(x, y)
             | ('Δ' | 'delta:') NAME '(' names ')'        delta atom ΔR(x)
             | NAME '[' names ']'                         map reference m[x, y]
             | 'AggSum' '(' '[' names ']' ',' expr ')' | 'Exists' '(' expr ')'
    literal := ['-'] NUMBER ['BD'] | 'string' | NULL | TRUE | FALSE | DATE 'yyyy-mm-dd' | TIMESTAMP '…'
             | DOUBLE 'NaN' | DOUBLE 'Infinity' | DOUBLE '-Infinity'
    NAME    := identifier | `any text` (a backquote in it doubled; never a keyword: `NULL` is a name)

Inside braces is *value* syntax, where `+ - || / %` are the SQL functions `Fn('+')` … and `*` is a
`Prod` factor (the printer's precedences: comparisons < `+ - ||` < `* / %`, all left-associative,
comparisons do not chain):

    value   := arith [cmpop arith]       cmpop: = != <> < <= > >= IS [NOT]   (<> reads as !=)
    arith   := mul (('+' | '-' | '||') mul)*
    mul     := primary (('*' | '/' | '%') primary)*
    primary := '(' value ')' | '(' NAME '^=' expr ')' | '{' value '}' | '[' expr ']'
             | NAME '(' [value (',' value)*] ')'        function call Fn(name, args)
             | OP '(' … ')'                             an operator used as a function name: -(x)
             | literal | NAME | delta atom | map reference | AggSum(…) | Exists(…)

`[ expr ]` inside a value is calculus syntax (the printer does not write it yet; it is how a Sum or a
relation atom nested in a value can be written unambiguously). Nodes are built with the smart
constructors of `spark_ivm.calculus.expressions`, so `parse(to_text(e)) == e` for canonical expressions.
Malformed text raises `CalculusSyntaxError`, a `ValueError` naming the position and what was expected.
"""

from __future__ import annotations

import datetime
import re
from decimal import Decimal, InvalidOperation
from typing import NamedTuple

from spark_ivm.calculus.expressions import (
    Expr, aggsum, cmp, const, delta_rel, exists, fn, lift, map_ref, prod, rel, sum_, var,
)

__all__ = ["parse", "parse_value", "CalculusSyntaxError"]


class CalculusSyntaxError(ValueError):
    """Malformed calculus text; `pos` is the 0-based character offset of the problem."""

    def __init__(self, message: str, text: str, pos: int):
        line_start = text.rfind("\n", 0, pos) + 1
        line_end = text.find("\n", pos)
        line_end = len(text) if line_end < 0 else line_end
        line_no = text.count("\n", 0, pos) + 1
        column = pos - line_start + 1
        where = f"at position {pos}" + (f" (line {line_no}, column {column})" if "\n" in text else "")
        snippet = text[line_start:line_end]
        super().__init__(f"{message} {where}\n  {snippet}\n  {' ' * (pos - line_start)}^")
        self.text = text
        self.pos = pos


class _Tok(NamedTuple):
    kind: str  # num, str, name, delta, op, end
    text: str  # a quoted name's text without its quotes
    pos: int
    quoted: bool = False  # a name in backquotes: never a keyword


_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?(?:BD)?)
  | (?P<str>'(?:[^']|'')*')
  | (?P<delta>Δ|delta:)
  | (?P<name>[^\W\d][\w$#.]*)
  | (?P<qname>`(?:[^`]|``)*`)
  | (?P<op>\^=|<>|<=|>=|!=|\|\||[-+*/%=<>(){}\[\],])
    """,
    re.VERBOSE,
)

_CMP_OPS = {"=": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_ADD_OPS = ("+", "-", "||")
_MUL_OPS = ("*", "/", "%")
_OP_FN_NAMES = ("+", "-", "*", "/", "%", "||")  # operators that may name a function: -(x), +(a, b, c)
_KEYWORD_LITERALS = {"NULL": None, "TRUE": True, "FALSE": False}
_TYPED_LITERALS = ("DATE", "TIMESTAMP", "DOUBLE")  # followed by a string: DATE '2024-01-31'
# Finite doubles are plain numbers; the others have no number syntax.
_NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _tokenize(text: str) -> list[_Tok]:
    tokens: list[_Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            if text[pos] == "'":
                raise CalculusSyntaxError("unterminated string literal", text, pos)
            if text[pos] == "`":
                raise CalculusSyntaxError("unterminated quoted name", text, pos)
            raise CalculusSyntaxError(f"unexpected character {text[pos]!r}", text, pos)
        kind = m.lastgroup
        if kind == "qname":
            tokens.append(_Tok("name", m.group()[1:-1].replace("``", "`"), pos, quoted=True))
        elif kind != "ws":
            tokens.append(_Tok(kind, m.group(), pos))
        pos = m.end()
    tokens.append(_Tok("end", "", len(text)))
    return tokens


def _describe(tok: _Tok) -> str:
    return "end of input" if tok.kind == "end" else repr(tok.text)


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0

    # -- token helpers ------------------------------------------------------------------------------

    def peek(self, k: int = 0) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def advance(self) -> _Tok:
        tok = self.toks[self.i]
        if tok.kind != "end":
            self.i += 1
        return tok

    def at_op(self, *ops: str, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok.kind == "op" and tok.text in ops

    def error(self, expected: str, tok: _Tok | None = None) -> CalculusSyntaxError:
        tok = tok or self.peek()
        return CalculusSyntaxError(f"expected {expected}, found {_describe(tok)}", self.text, tok.pos)

    def expect_op(self, op: str) -> _Tok:
        if not self.at_op(op):
            raise self.error(repr(op))
        return self.advance()

    def expect_name(self, what: str = "a name") -> str:
        if self.peek().kind != "name":
            raise self.error(what)
        return self.advance().text

    def expect_end(self) -> None:
        if self.peek().kind != "end":
            raise self.error("end of input")

    def names(self, close: str) -> tuple[str, ...]:
        """`a, b, c` up to (and consuming) the closing bracket; the opening one is consumed already."""
        out: list[str] = []
        if self.at_op(close):
            self.advance()
            return ()
        while True:
            out.append(self.expect_name(f"a variable name or {close!r}" if not out else "a variable name"))
            if self.at_op(","):
                self.advance()
                continue
            if self.at_op(close):
                self.advance()
                return tuple(out)
            raise self.error(f"',' or {close!r}")

    # -- calculus level -----------------------------------------------------------------------------

    def expr(self) -> Expr:
        terms = [self.term()]
        while self.at_op("+"):
            self.advance()
            terms.append(self.term())
        return sum_(*terms) if len(terms) > 1 else terms[0]

    def term(self) -> Expr:
        factors = [self.factor()]
        while self.at_op("*"):
            self.advance()
            factors.append(self.factor())
        return prod(*factors) if len(factors) > 1 else factors[0]

    def factor(self) -> Expr:
        tok = self.peek()
        if self.at_op("("):
            if self.peek(1).kind == "name" and self.at_op("^=", k=2):
                return self.lift()
            self.advance()
            e = self.expr()
            self.expect_op(")")
            return e
        if self.at_op("{"):
            return self.braced_value()
        e = self.atom(in_value=False)
        if e is None:
            raise self.error("an expression (atom, constant, variable, '(', '{', AggSum or Exists)", tok)
        return e

    def atom(self, in_value: bool) -> Expr | None:
        """The forms shared by both levels: literals, variables, atoms, maps, AggSum, Exists."""
        tok = self.peek()
        if tok.kind in ("num", "str") or (self.at_op("-") and self.peek(1).kind == "num"):
            return const(self.literal())
        if tok.kind == "delta":
            self.advance()
            name = self.expect_name("a relation name after 'Δ'")
            self.expect_op("(")
            return delta_rel(name, *self.names(")"))
        if tok.kind != "name":
            return None
        name, nxt = tok.text, self.peek(1)
        keyword = None if tok.quoted else name
        if keyword in _KEYWORD_LITERALS or (keyword in _TYPED_LITERALS and nxt.kind == "str"):
            return const(self.literal())
        if keyword == "AggSum" and self.at_op("(", k=1):
            self.advance()
            self.advance()
            self.expect_op("[")
            group = self.names("]")
            self.expect_op(",")
            body = self.expr()
            self.expect_op(")")
            return aggsum(group, body)
        if keyword == "Exists" and self.at_op("(", k=1):
            self.advance()
            self.advance()
            body = self.expr()
            self.expect_op(")")
            return exists(body)
        if self.at_op("[", k=1):
            self.advance()
            self.advance()
            return map_ref(name, *self.names("]"))
        if self.at_op("(", k=1):
            self.advance()
            self.advance()
            # A function call inside a value, a relation atom at the calculus level.
            return fn(name, *self.args()) if in_value else rel(name, *self.names(")"))
        self.advance()
        return var(name)

    def lift(self) -> Expr:
        self.expect_op("(")
        name = self.expect_name()
        self.expect_op("^=")
        body = self.expr()
        self.expect_op(")")
        return lift(name, body)

    def braced_value(self) -> Expr:
        self.expect_op("{")
        v = self.value()
        self.expect_op("}")
        return v

    def literal(self) -> object:
        tok = self.advance()
        if tok.kind == "op":  # a sign: '-' followed by a number
            num = self.advance()
            return self.number("-" + num.text, tok)
        if tok.kind == "num":
            return self.number(tok.text, tok)
        if tok.kind == "str":
            return tok.text[1:-1].replace("''", "'")
        if tok.text in _KEYWORD_LITERALS:
            return _KEYWORD_LITERALS[tok.text]
        s = self.advance()
        body = s.text[1:-1].replace("''", "'")
        try:
            if tok.text == "DATE":
                return datetime.date.fromisoformat(body)
            if tok.text == "DOUBLE":
                return _NON_FINITE[body]
            return datetime.datetime.fromisoformat(body)
        except (ValueError, KeyError):
            kind = {"DATE": "a date (yyyy-mm-dd)", "DOUBLE": "'NaN', 'Infinity' or '-Infinity'"}.get(
                tok.text, "a timestamp (ISO 8601)")
            raise CalculusSyntaxError(f"expected {kind}, found {s.text}", self.text, s.pos) from None

    def number(self, text: str, tok: _Tok) -> object:
        if text.endswith("BD"):
            try:
                return Decimal(text[:-2])
            except InvalidOperation:  # pragma: no cover - the token regex admits only valid numbers
                raise CalculusSyntaxError(f"invalid decimal {text}", self.text, tok.pos) from None
        if any(c in text for c in ".eE"):
            return float(text)
        return int(text)

    # -- value level (inside braces) ----------------------------------------------------------------

    def value(self) -> Expr:
        left = self.arith()
        op = self.cmp_op()
        if op is None:
            return left
        right = self.arith()
        if self.cmp_op(consume=False) is not None:
            raise CalculusSyntaxError("comparisons do not chain (parenthesize one of them)", self.text,
                                      self.peek().pos)
        return cmp(op, left, right)

    def cmp_op(self, consume: bool = True) -> str | None:
        tok = self.peek()
        if tok.kind == "op" and tok.text in _CMP_OPS:
            if consume:
                self.advance()
            return _CMP_OPS[tok.text]
        if tok.kind == "name" and not tok.quoted and tok.text.upper() == "IS":
            nxt = self.peek(1)
            negated = nxt.kind == "name" and not nxt.quoted and nxt.text.upper() == "NOT"
            if consume:
                self.advance()
                if negated:
                    self.advance()
            return "is not" if negated else "is"
        return None

    def arith(self) -> Expr:
        left = self.mul()
        while self.at_op(*_ADD_OPS):
            op = self.advance().text
            left = fn(op, left, self.mul())
        return left

    def mul(self) -> Expr:
        left = self.primary()
        while self.at_op(*_MUL_OPS):
            op = self.advance().text
            right = self.primary()
            left = prod(left, right) if op == "*" else fn(op, left, right)
        return left

    def primary(self) -> Expr:
        tok = self.peek()
        if self.at_op("("):
            if self.peek(1).kind == "name" and self.at_op("^=", k=2):
                return self.lift()
            self.advance()
            v = self.value()
            self.expect_op(")")
            return v
        if self.at_op("{"):
            return self.braced_value()
        if self.at_op("["):
            self.advance()
            e = self.expr()
            self.expect_op("]")
            return e
        if tok.kind == "op" and tok.text in _OP_FN_NAMES and self.at_op("(", k=1):
            self.advance()
            self.advance()
            return fn(tok.text, *self.args())
        e = self.atom(in_value=True)
        if e is None:
            raise self.error("a value (constant, variable, function call, '(' or '{')", tok)
        return e

    def args(self) -> list[Expr]:
        out: list[Expr] = []
        if self.at_op(")"):
            self.advance()
            return out
        while True:
            out.append(self.value())
            if self.at_op(","):
                self.advance()
                continue
            if self.at_op(")"):
                self.advance()
                return out
            raise self.error("',' or ')'")


def parse(text: str) -> Expr:
    """The calculus expression written in `text` (the inverse of `spark_ivm.calculus.printer.to_text`)."""
    p = _Parser(text)
    e = p.expr()
    p.expect_end()
    return e


def parse_value(text: str) -> Expr:
    """A value written without its braces, e.g. `parse_value("a + 1 < b")`."""
    p = _Parser(text)
    e = p.value()
    p.expect_end()
    return e

