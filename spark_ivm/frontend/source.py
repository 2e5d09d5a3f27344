"""The query text, its tokens and its parse, and where a node stands in the text (line and column of
every error of the front end)."""

from __future__ import annotations

import math
import re

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError as SqlglotParseError
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from spark_ivm.errors import ParseError, UnsupportedQueryError


DIALECT = "spark"


def nested_too_deeply() -> UnsupportedQueryError:
    """The error for a query whose nesting exhausts Python's recursion: parsing, translating and compiling
    recurse once or more per level of parentheses, subqueries, function calls or CASE, not per term of a
    chain (a + b + c …, AND, OR: those are read in a loop)."""
    return UnsupportedQueryError(
        "expressions nested this deeply",
        detail="parentheses, subqueries, function calls or CASE nested a few dozen levels deep or more; "
               "write the expression with fewer levels (long chains of +, ||, AND, OR are fine)")


class SqlSource:
    """The query text, its tokens and its statement; tells where a node stands in the text."""

    def __init__(self, text: str):
        self.text = text
        self.tokens = self._tokenize()
        self._check_numbers()
        self.statement = self._parse()

    def _tokenize(self):
        tokenizer = Dialect.get_or_raise(DIALECT).tokenizer()
        try:
            return tokenizer.tokenize(self.text)
        except TokenError as e:
            # The tokenizer knows where the token it could not finish starts; the error only quotes context.
            offset = getattr(getattr(tokenizer, "_core", None), "_start", None)
            offset = e.start if offset is None else offset
            detail = re.sub(r" from \d+:\d+$", "", str(e.__cause__ or e))
            raise ParseError(f"cannot read the SQL: {detail}", *self.line_column(offset)) from None

    def _check_numbers(self) -> None:
        """Refuse, as Spark does, a number no Spark type holds: more than 38 digits (DECIMAL's most), or
        beyond DOUBLE's range."""
        for token in self.tokens:
            if token.token_type != TokenType.NUMBER:
                continue
            mantissa, _, exponent = token.text.lower().partition("e")
            digits = len(re.sub(r"\D", "", mantissa).lstrip("0"))
            if (digits > _MOST_DIGITS and not exponent) or (exponent and _out_of_double(token.text)):
                raise ParseError(f"the number {token.text[:40]}{'…' if len(token.text) > 40 else ''} is out of "
                                 f"range (at most {_MOST_DIGITS} digits, or a DOUBLE)", *self.line_column(token.start))

    def _parse(self) -> exp.Expression:
        try:
            statements = Dialect.get_or_raise(DIALECT).parser().parse(self.tokens, self.text)
        except SqlglotParseError as e:
            raise self._parse_error(e) from None
        except RecursionError:  # the parser recurses about twenty times per level of parentheses
            raise nested_too_deeply() from None
        except (ValueError, TypeError, ArithmeticError, AttributeError, IndexError, KeyError) as e:
            # sqlglot fails so on some malformed text (CAST of a number it cannot read, say)
            raise ParseError(f"cannot parse the SQL: {type(e).__name__} {str(e)[:80]}") from None
        statements = [s for s in statements if s is not None]
        if not statements:
            raise ParseError("the SQL text holds no statement")
        if len(statements) > 1:
            raise self.unsupported("several statements", statements[1], statements[1].key.upper())
        return statements[0]

    @staticmethod
    def _parse_error(e: SqlglotParseError) -> ParseError:
        if not e.errors:
            return ParseError(str(e))
        first = e.errors[0]
        line, column, highlight = first.get("line"), first.get("col"), first.get("highlight") or ""
        if column is not None and highlight and "\n" not in highlight:
            column = max(column - len(highlight) + 1, 1)  # sqlglot points at the token's last character
        description = first.get("description") or str(e)
        missing_part = re.match(r"Required keyword: '\w+' missing for <class '[\w.]*\.(\w+)'>", description)
        if missing_part:
            description = f"incomplete {missing_part[1].upper()}" + (f" at {highlight!r}" if highlight else "")
        return ParseError(description, line, column)

    def line_column(self, offset: int | None) -> tuple[int | None, int | None]:
        if offset is None:
            return None, None
        line = self.text.count("\n", 0, offset) + 1
        return line, offset - (self.text.rfind("\n", 0, offset) + 1) + 1

    def position(self, node: exp.Expression | None, keyword: str | None = None,
                 where: str = "before") -> tuple[int | None, int | None]:
        """(line, column) of a node: of `keyword` near it when given (`where` it is searched first:
        "before" the node's first located token or "inside" it), else of its first located token."""
        span = _span_near(node) if node is not None else None
        offset = self._keyword_offset(keyword, span, where) if keyword else None
        if offset is None and span is not None:
            offset = span[0]
        return self.line_column(offset)

    def _keyword_offset(self, keyword: str, span: tuple[int, int] | None, where: str) -> int | None:
        words = {keyword.upper(), keyword.split()[0].upper()}
        offsets = [t.start for t in self.tokens
                   if t.text.upper() in words and t.token_type not in (TokenType.STRING, TokenType.IDENTIFIER)]
        if not offsets:
            return None
        if span is None:
            return offsets[0]
        before = [o for o in offsets if o < span[0]][-1:]
        inside = [o for o in offsets if span[0] <= o <= span[1]][:1]
        after = [o for o in offsets if o > span[1]][:1]
        for candidates in ((before, inside) if where == "before" else (inside, before)) + (after,):
            if candidates:
                return candidates[0]
        return None

    def unsupported(self, construct: str, node: exp.Expression | None, keyword: str | None = None,
                    where: str = "before", detail: str = "") -> UnsupportedQueryError:
        return UnsupportedQueryError(construct, *self.position(node, keyword, where), detail=detail)

    def located(self, error_class: type[Exception], message: str, node: exp.Expression | None) -> Exception:
        line, column = self.position(node)
        where = f" at line {line}, column {column}" if line is not None else ""
        error = error_class(f"{message}{where}")
        error.line, error.column = line, column
        return error

    def function_name(self, node: exp.Func) -> str:
        """A function's name as written in the query, lowercase."""
        if isinstance(node, exp.Anonymous):
            return str(node.this).lower()
        meta = node._meta or {}
        if "start" in meta:
            return self.text[meta["start"]:meta["end"] + 1].lower()
        return node.sql_name().lower()


_MOST_DIGITS = 38


def _out_of_double(text: str) -> bool:
    try:
        return math.isinf(float(text))
    except (ValueError, OverflowError):  # not a plain number: sqlglot's NUMBER tokens include 1e5D, 10L …
        return False


def own_text_span(node: exp.Expression) -> tuple[int, int] | None:
    meta = node._meta
    return (meta["start"], meta["end"]) if meta and "start" in meta else None


def text_span(node: exp.Expression) -> tuple[int, int] | None:
    spans = [s for s in map(own_text_span, node.walk()) if s]
    return (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None


def _span_near(node: exp.Expression) -> tuple[int, int] | None:
    """The text span of a node, or of its nearest ancestor when nothing in it carries a position."""
    while node is not None:
        span = text_span(node)
        if span:
            return span
        node = node.parent
    return None
