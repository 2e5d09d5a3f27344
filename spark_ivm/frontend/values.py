"""Values and conditions: SQL value expressions to calculus values, SQL predicates to 0/1 condition
factors (AND a product, OR by inclusion–exclusion, NOT pushed down to the comparisons)."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Callable, Sequence

from sqlglot import exp

from spark_ivm import heuristics
from spark_ivm.calculus import functions
from spark_ivm.calculus.expressions import (
    NEGATED_CMP, NULL, ONE, ZERO, AggSum, Cmp, Const, DeltaRel, Exists, Expr, Fn, Lift, MapRef, Prod, Rel, Sum, Var,
    cmp, fn, neg, prod, sum_,
)
from spark_ivm.errors import ParseError, UnsupportedQueryError
from spark_ivm.frontend.source import DIALECT, SqlSource, text_span
from spark_ivm.udfs.registry import UDFS


_COMPARISONS = {exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
                exp.NullSafeEQ: "is", exp.NullSafeNEQ: "is not"}

_ARITHMETIC = {exp.Add: "+", exp.Sub: "-", exp.Div: "/", exp.Mod: "%", exp.IntDiv: "div", exp.DPipe: "||"}

_PATTERN_MATCHES = {exp.Like: "like", exp.ILike: "ilike", exp.RegexpLike: "rlike"}

# sqlglot class → (calculus function, allowed argument counts)
_FUNCTIONS = {
    exp.Upper: ("upper", (1,)), exp.Lower: ("lower", (1,)), exp.Length: ("length", (1,)),
    exp.Abs: ("abs", (1,)), exp.Year: ("year", (1,)), exp.Month: ("month", (1,)), exp.Day: ("day", (1,)),
    exp.DayOfMonth: ("day", (1,)), exp.Substring: ("substring", (2, 3)), exp.Coalesce: ("coalesce", None),
    exp.Concat: ("concat", None), exp.Round: ("round", (1, 2)), exp.Floor: ("floor", (1,)),
    exp.Ceil: ("ceil", (1,)), exp.Least: ("least", None), exp.Greatest: ("greatest", None),
    exp.DateDiff: ("datediff", (2,)), exp.AddMonths: ("add_months", (2,)), exp.Nullif: ("nullif", (2,)),
    exp.TsOrDsToDate: ("to_date", (1,)),
}

_CAST_TYPES = {
    "INT": "int", "BIGINT": "bigint", "SMALLINT": "smallint", "TINYINT": "tinyint", "DOUBLE": "double",
    "FLOAT": "float", "DECIMAL": "decimal", "TEXT": "string", "VARCHAR": "string", "CHAR": "string",
    "DATE": "date", "TIMESTAMP": "timestamp", "TIMESTAMPTZ": "timestamp",
}

_EXTRACT_FIELDS = {"YEAR": "year", "MONTH": "month", "DAY": "day"}

_INTERVAL_UNITS = {"DAY": ("days", 1), "WEEK": ("days", 7), "MONTH": ("months", 1), "YEAR": ("months", 12)}


class ValueTranslator:
    """SQL value expressions → calculus values; SQL predicates → 0/1 condition factors.

    `nested` translates the subqueries of the expressions (scalar, EXISTS, IN) into lifts of nested
    aggregates; `aggregate`, when set, translates aggregate calls (in a subquery's select list)."""

    def __init__(self, source: SqlSource, resolve: Callable[[exp.Column], Expr], nested=None):
        self.source = source
        self.resolve = resolve
        self.nested = nested
        self.aggregate: Callable[[exp.AggFunc], Expr] | None = None

    # -- values ------------------------------------------------------------------------------------

    def value(self, node: exp.Expression) -> Expr:
        if isinstance(node, exp.Paren):
            return self.value(node.this)
        if isinstance(node, exp.Column):
            if isinstance(node.this, exp.Star):
                raise self.source.unsupported("* outside SELECT list or COUNT(*)", node)
            return self.resolve(node)
        if isinstance(node, (exp.Literal, exp.Null, exp.Boolean)):
            return Const(self._literal(node))
        if isinstance(node, exp.Neg):
            return self._negation(node)
        if isinstance(node, exp.Mul):
            return prod(*(self.value(factor) for factor in _left_chain(node, exp.Mul)))
        if isinstance(node, (exp.Add, exp.Sub)) and _interval_operand(node):
            return self._date_arithmetic(node)
        if isinstance(node, (exp.Add, exp.Sub)):
            return self._sum_chain(node)
        if isinstance(node, exp.DPipe):
            return _chained("||", [self.value(part) for part in _left_chain(node, exp.DPipe)])
        if type(node) in _ARITHMETIC:
            return fn(_ARITHMETIC[type(node)], self.value(node.this), self.value(node.expression))
        if isinstance(node, (exp.Cast, exp.TryCast)):
            return self._cast(node)
        if isinstance(node, exp.Case):
            return self._case(node)
        if isinstance(node, exp.If):
            return self._if(node)
        if isinstance(node, exp.Subquery) and self.nested is not None:
            return self.nested.scalar(node)
        if isinstance(node, exp.AggFunc) and self.aggregate is not None:
            return self.aggregate(node)
        if isinstance(node, exp.AggFunc):
            raise self.source.unsupported(f"aggregate {self.source.function_name(node).upper()} here", node,
                                          detail="aggregates belong in the SELECT list or HAVING of the view")
        if isinstance(node, (exp.Predicate, exp.Connector, exp.Not)):
            raise self.source.unsupported("a condition used as a value", node,
                                          detail="use CASE WHEN … THEN 1 ELSE 0 END")
        if isinstance(node, exp.Func):
            return self._function(node)
        raise self.source.unsupported(f"expression {node.key.upper()}", node)

    def _sum_chain(self, node: exp.Add | exp.Sub) -> Expr:
        """a + b - c + …, its terms read in a loop."""
        signed = []  # (operator, term), right to left
        while isinstance(node, (exp.Add, exp.Sub)) and not _interval_operand(node):
            signed.append(("+" if isinstance(node, exp.Add) else "-", node.expression))
            node = node.this
        signed.append(("+", node))
        terms = [(op, self.value(term)) for op, term in reversed(signed)]
        if len(terms) <= heuristics.LONGEST_NESTED_CHAIN:
            total = terms[0][1]
            for op, term in terms[1:]:
                total = fn(op, total, term)
            return total
        added = _chained("+", [term for op, term in terms if op == "+"])
        subtracted = [term for op, term in terms if op == "-"]
        return fn("-", added, _chained("+", subtracted)) if subtracted else added

    def _literal(self, node: exp.Expression) -> object:
        if isinstance(node, exp.Null):
            return None
        if isinstance(node, exp.Boolean):
            return 1 if node.this else 0
        if node.is_string:
            return node.this
        text = node.this
        try:
            if re.fullmatch(r"\d+", text):
                return int(text)
            if re.search(r"[eE]", text):
                return float(text)
            return Decimal(text)  # Spark types a literal with a decimal point as DECIMAL
        except (ValueError, ArithmeticError):  # decimal.InvalidOperation is an ArithmeticError
            raise ParseError(f"invalid number {text[:40]!r}", *self.source.position(node)) from None

    def _negation(self, node: exp.Neg) -> Expr:
        inner = self.value(node.this)
        if isinstance(inner, Const) and isinstance(inner.value, (int, float, Decimal)):
            return Const(-inner.value)
        return fn("neg", inner)

    def _cast(self, node: exp.Cast) -> Expr:
        if node.args.get("safe"):
            raise self.source.unsupported("TRY_CAST", node, "TRY_CAST")
        to = node.args["to"]
        type_name = to.this.name if isinstance(to.this, exp.DataType.Type) else str(to.this)
        target = _CAST_TYPES.get(type_name)
        if target is None:
            raise self.source.unsupported(f"CAST to {to.sql(dialect=DIALECT)}", node, "CAST")
        args = [self.value(node.this)]
        if target == "decimal":
            params = [int(p.this.this) for p in to.expressions]
            args += [Const(p) for p in (params + [10, 0][len(params):])[:2]]
        return self._fold(f"cast_{target}", args, node)

    def _fold(self, name: str, args: list[Expr], node: exp.Expression) -> Expr:
        """A call of constants is computed now: `DATE '1998-12-01'` is a date, not a cast. One Python cannot
        compute ('1994-01-01' + INTERVAL 1 YEAR: Spark casts the string) is left to Spark."""
        if not all(isinstance(a, Const) for a in args):
            return fn(name, *args)
        try:
            result = functions.call(name, [a.value for a in args])
        except (TypeError, ValueError, AttributeError, ArithmeticError):
            return fn(name, *args)
        if result is None and args[0].value is not None:
            raise ParseError(f"invalid literal {node.sql(dialect=DIALECT)}", *self.source.position(node))
        return Const(result)

    def _case(self, node: exp.Case) -> Expr:
        subject = self.value(node.this) if node.this is not None else None
        args: list[Expr] = []
        for branch in node.args.get("ifs") or []:
            if subject is None:
                args.append(self.condition(branch.this))
            else:
                args.append(comparison("=", subject, self.value(branch.this)))
            args.append(self.value(branch.args["true"]))
        default = node.args.get("default")
        if default is not None:
            args.append(self.value(default))
        return fn("case", *args)

    def _if(self, node: exp.If) -> Expr:
        args = [self.condition(node.this), self.value(node.args["true"])]
        if node.args.get("false") is not None:
            args.append(self.value(node.args["false"]))
        return fn("case", *args)

    def _date_arithmetic(self, node: exp.Add | exp.Sub) -> Expr:
        interval, date_node = _interval_operand(node)
        if isinstance(node, exp.Sub) and interval is node.this:
            raise self.source.unsupported("INTERVAL minus a value", node, "INTERVAL")
        amount, unit = self._interval(interval)
        if isinstance(node, exp.Sub):
            amount = -amount
        name = "date_add_days" if unit == "days" else "add_months"
        return self._fold(name, [self.value(date_node), Const(amount)], node)

    def _interval(self, node: exp.Interval) -> tuple[int, str]:
        unit = (node.unit.name if node.unit is not None else "").upper().rstrip("S")
        amount = node.this
        if unit not in _INTERVAL_UNITS:
            raise self.source.unsupported(f"INTERVAL … {unit or 'without a unit'}", node, "INTERVAL",
                                          detail="only DAY, WEEK, MONTH or YEAR intervals")
        if not isinstance(amount, exp.Literal) or not re.fullmatch(r"-?\d{1,9}", amount.this.strip()):
            raise self.source.unsupported("INTERVAL of something else than a whole number (of 9 digits at most)",
                                          node, "INTERVAL")
        kind, factor = _INTERVAL_UNITS[unit]
        return int(amount.this) * factor, kind

    def _function(self, node: exp.Func) -> Expr:
        name = self.source.function_name(node)
        if isinstance(node, exp.Extract):
            field_name = node.this.name.upper()
            if field_name not in _EXTRACT_FIELDS:
                raise self.source.unsupported(f"EXTRACT({field_name} …)", node)
            return fn(_EXTRACT_FIELDS[field_name], self.value(node.expression))
        if isinstance(node, exp.Trim):
            return self._trim(node)
        if isinstance(node, exp.TsOrDsAdd):
            return self._date_add(node, name)
        if name in UDFS:
            return fn(name, *(self.value(a) for a in _arguments(node)))
        known = _FUNCTIONS.get(type(node))
        if known is None and isinstance(node, exp.Anonymous):
            raise self.source.unsupported(
                f"function {name.upper()}", node,
                detail="not a built-in; a Python function must be declared with @spark_ivm.udf, and the module "
                       "that declares it imported, before a view uses it")
        if known is None or (isinstance(node, exp.TsOrDsToDate) and node.args.get("format")):
            raise self.source.unsupported(f"function {name.upper()}", node)
        calculus_name, arities = known
        args = _arguments(node)
        if arities is not None and len(args) not in arities:
            raise self.source.unsupported(f"function {name.upper()} with {len(args)} arguments", node)
        return fn(calculus_name, *(self.value(_unwrap_date_conversion(a)) for a in args))

    def _trim(self, node: exp.Trim) -> Expr:
        if node.args.get("expression") is not None:
            raise self.source.unsupported("TRIM of characters other than spaces", node, "TRIM")
        position = str(node.args.get("position") or "BOTH").upper()
        name = {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(position, "trim")
        return fn(name, self.value(node.this))

    def _date_add(self, node: exp.TsOrDsAdd, name: str) -> Expr:
        if str(node.args.get("unit") or "DAY").upper() != "DAY":
            raise self.source.unsupported(f"function {name.upper()} with a unit", node)
        date, days = self.value(node.this), node.expression
        # sqlglot reads date_sub(d, n) as date_add(d, n * -1)
        if name == "date_sub" and isinstance(days, exp.Mul) and self.value(days.expression) == Const(-1):
            return fn("date_sub", date, self.value(days.this))
        return fn("date_add", date, self.value(days))

    # -- conditions --------------------------------------------------------------------------------

    def condition(self, node: exp.Expression, negated: bool = False) -> Expr:
        """A 0/1 factor that is 1 where the predicate (or its negation) is true, 0 where false or NULL."""
        if isinstance(node, exp.Paren):
            return self.condition(node.this, negated)
        if isinstance(node, exp.Not):
            return self.condition(node.this, not negated)
        if isinstance(node, (exp.And, exp.Or)):
            parts = [self.condition(part, negated) for part in _connected(node)]
            if isinstance(node, exp.And) != negated:
                return prod(*parts)
            try:
                return disjunction_of(parts)
            except UnsupportedQueryError as e:
                raise self.source.unsupported(e.construct, node, "AND" if negated else "OR", where="inside") from None
        if type(node) in _COMPARISONS:
            op = NEGATED_CMP[_COMPARISONS[type(node)]] if negated else _COMPARISONS[type(node)]
            if self.nested is not None:
                extreme = self.nested.extreme_comparison(op, node.this, node.expression)
                if extreme is not None:
                    return extreme
            return comparison(op, self.value(node.this), self.value(node.expression))
        if isinstance(node, exp.Exists) and self.nested is not None:
            return self.nested.exists(node, negated)
        if isinstance(node, exp.Is):
            op = "is not" if negated else "is"
            return comparison(op, self.value(node.this), self.value(node.expression))
        if isinstance(node, exp.Between):
            return self._between(node, negated)
        if isinstance(node, exp.In):
            return self._in(node, negated)
        if isinstance(node, exp.Escape):
            raise self.source.unsupported("LIKE … ESCAPE", node, "ESCAPE", where="inside")
        if type(node) in _PATTERN_MATCHES:
            negated = negated != bool(node.args.get("negate"))
            test = fn(_PATTERN_MATCHES[type(node)], self.value(node.this), self.value(node.expression))
            return comparison("=", test, Const(0 if negated else 1))
        if isinstance(node, exp.Boolean):
            return ONE if bool(node.this) != negated else ZERO
        # A boolean-valued column or function: Spark compares TRUE = 1 and FALSE = 0.
        return comparison("=", self.value(node), Const(0 if negated else 1))

    def _between(self, node: exp.Between, negated: bool) -> Expr:
        x, low, high = self.value(node.this), self.value(node.args["low"]), self.value(node.args["high"])
        if not negated:
            return prod(comparison(">=", x, low), comparison("<=", x, high))
        below, above = comparison("<", x, low), comparison(">", x, high)
        if _ordered_constants(low, high):
            return sum_(below, above)  # both cannot hold at once
        return disjunction(below, above)

    def _in(self, node: exp.In, negated: bool) -> Expr:
        if node.args.get("query") is not None and self.nested is not None:
            return self.nested.in_subquery(node, negated)
        values = node.expressions
        if not values or node.args.get("unnest") or node.args.get("field"):
            raise self.source.unsupported("IN of something else than a value list", node, "IN", where="inside")
        test = fn("in", self.value(node.this), *(self.value(v) for v in values))
        return comparison("=", test, Const(0 if negated else 1))


def comparison(op: str, left: Expr, right: Expr) -> Expr:
    """`{left op right}`, computed now when both sides are constants."""
    if isinstance(left, Const) and isinstance(right, Const):
        folded = _compare_constants(op, left.value, right.value)
        if folded is not None:
            return ONE if folded else ZERO
    return cmp(op, left, right)


def _compare_constants(op: str, a: object, b: object) -> bool | None:
    if op in ("is", "is not"):
        same = a == b if a is not None and b is not None else a is b
        return same if op == "is" else not same
    if a is None or b is None:
        return False
    try:
        return {"=": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    except TypeError:
        return None


def disjunction(a: Expr, b: Expr) -> Expr:
    """A OR B for 0/1 conditions, by inclusion–exclusion: A + B − A·B."""
    if a == ZERO:
        return b
    if b == ZERO:
        return a
    return sum_(a, b, neg(prod(a, b)))


def disjunction_of(parts: Sequence[Expr]) -> Expr:
    """The OR of 0/1 conditions: by inclusion–exclusion when there are at most heuristics.MOST_DISJUNCTS,
    which keeps a join condition (R.b = S.b OR …) usable as one; else those that read no relation become one
    condition, CASE WHEN c1 THEN 1 WHEN c2 THEN 1 … ELSE 0 END = 1, of as many terms as there are conditions.
    (A subquery's value is bound by a lift before the conditions, so that EXISTS (…) OR … reads no relation
    either: more than MOST_DISJUNCTS conditions that do are refused.)"""
    if len(parts) > heuristics.MOST_DISJUNCTS:
        plain = [p for p in parts if not reads_relations(p)]
        reading = [p for p in parts if reads_relations(p)]
        if len(reading) > heuristics.MOST_DISJUNCTS:
            raise UnsupportedQueryError(
                f"OR of more than {heuristics.MOST_DISJUNCTS} conditions that read relations")
        if len(plain) > 1:
            parts = [cmp("=", fn("case", *(x for p in plain for x in (p, ONE)), ZERO), ONE)] + reading
    result = ZERO
    for part in parts:
        result = disjunction(result, part)
    return result


_READING = (Rel, DeltaRel, MapRef, AggSum, Exists, Lift)


def reads_relations(condition: Expr) -> bool:
    """Whether a condition reads a relation or binds a variable (a subquery's value), so that it cannot be
    computed from the row's values alone."""
    return any(isinstance(x, _READING) for x in condition.walk())


def _chained(name: str, operands: Sequence[Expr]) -> Expr:
    """The operands combined by an associative function of two arguments, left to right: nested as
    written up to heuristics.LONGEST_NESTED_CHAIN operands, as a balanced tree beyond."""
    if len(operands) <= heuristics.LONGEST_NESTED_CHAIN:
        result = operands[0]
        for operand in operands[1:]:
            result = fn(name, result, operand)
        return result
    level = list(operands)
    while len(level) > 1:
        level = [fn(name, *level[i:i + 2]) if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
    return level[0]


def _left_chain(node: exp.Expression, kind: type) -> list[exp.Expression]:
    """The operands of a chain a op b op c …, which sqlglot nests to the left: ((a op b) op c), read in a
    loop so that a chain of a thousand terms costs no recursion."""
    operands = []
    while type(node) is kind:
        operands.append(node.expression)
        node = node.this
    operands.append(node)
    return operands[::-1]


def _connected(node: exp.And | exp.Or) -> list[exp.Expression]:
    """The operands of a chain of ANDs (or of ORs), parenthesized ones included, left to right."""
    operands, pending = [], [node]
    while pending:
        n = pending.pop()
        while isinstance(n, exp.Paren) and type(n.this) is type(node):
            n = n.this
        if type(n) is type(node):
            pending += [n.expression, n.this]
        else:
            operands.append(n)
    return operands


def _ordered_constants(low: Expr, high: Expr) -> bool:
    return isinstance(low, Const) and isinstance(high, Const) and bool(_compare_constants("<=", low.value, high.value))


def is_not_null(value: Expr, not_null: frozenset[str] = frozenset()) -> Expr:
    """`{value IS NOT NULL}`; 1 for a value that is never NULL (`not_null`: variables that hold no NULL),
    so that SUM(CASE … THEN 1 ELSE 0 END), or SUM of a NOT NULL column, counts its non-NULL values with
    the group's row count instead of a map of its own. A CASE of one condition c and a value x is
    not NULL where c holds and x is not, or where c does not and its ELSE (never NULL) is taken: c then
    filters rows, as in `summed`, instead of keying a map by x's variables."""
    if never_null(value, not_null):
        return ONE
    case = _one_condition_case(value)
    if case is not None:
        condition, result, otherwise = case
        # Where the condition holds, the variables it compares (but by IS) are not NULL.
        compared = frozenset() if condition.op in ("is", "is not") else frozenset(
            side.name for side in (condition.left, condition.right) if isinstance(side, Var))
        if otherwise is None:
            return prod(condition, is_not_null(result, not_null | compared))
        if never_null(otherwise, not_null):
            return ONE if never_null(result, not_null | compared) else sum_(
                ONE, neg(prod(condition, comparison("is", result, NULL))))
    return comparison("is not", value, NULL)


def summed(value: Expr) -> Expr:
    """What a SUM of the value multiplies each row by: `CASE WHEN c THEN x [ELSE 0] END` is the filter
    {c} times x (a NULL counts as 0 in a sum either way), so that c filters the rows where the maps are
    formed and x alone is summed: TPC-H Q14's promotional revenue by part is then a sum of the revenue of
    each part's lineitems, not a map keyed by every lineitem's price and discount."""
    case = _one_condition_case(value)
    if case is not None and (case[2] is None or _is_zero_constant(case[2])):
        return prod(case[0], case[1])
    return value


def _one_condition_case(value: Expr) -> tuple[Cmp, Expr, Expr | None] | None:
    """(c, x, ELSE or None) of `CASE WHEN c THEN x [ELSE …] END` with c a comparison; None otherwise."""
    if isinstance(value, Fn) and value.name == "case" and len(value.args) in (2, 3) \
            and isinstance(value.args[0], Cmp):
        return value.args[0], value.args[1], value.args[2] if len(value.args) == 3 else None
    return None


def _is_zero_constant(value: Expr) -> bool:
    return isinstance(value, Const) and not isinstance(value.value, (str, bool)) and value.value == 0


def never_null(value: Expr, not_null: frozenset[str] = frozenset()) -> bool:
    """Whether the value is never NULL whatever the data: a constant, a variable of `not_null`, a sum,
    product or difference of such values, a CASE with an ELSE whose results all are, a COALESCE with an
    argument that is."""
    if isinstance(value, Const):
        return value.value is not None
    if isinstance(value, Var):
        return value.name in not_null
    if isinstance(value, (Prod, Sum)) or isinstance(value, Fn) and value.name in ("+", "-", "*"):
        return all(never_null(c, not_null) for c in value.children())
    if isinstance(value, Fn) and value.name == "case":
        results = value.args[1::2] + ((value.args[-1],) if len(value.args) % 2 else ())
        return len(value.args) % 2 == 1 and all(never_null(r, not_null) for r in results)
    if isinstance(value, Fn) and value.name == "coalesce":
        return any(never_null(a, not_null) for a in value.args)
    return False


def not_null_variables(e: Expr, not_null_positions: Callable[[str], frozenset[int]]) -> frozenset[str]:
    """The variables that hold no NULL wherever `e` is not 0: those a relation binds at a column declared
    NOT NULL (`not_null_positions` of the relation), in a product if a factor binds them, in a sum if
    every term does (the padding of an outer join's unmatched rows binds its columns to NULL)."""
    if isinstance(e, Rel):
        return frozenset(e.vars[i] for i in not_null_positions(e.name) if i < len(e.vars))
    if isinstance(e, Prod):
        return frozenset().union(*(not_null_variables(f, not_null_positions) for f in e.factors))
    if isinstance(e, Sum):
        return frozenset.intersection(*(not_null_variables(t, not_null_positions) for t in e.terms))
    if isinstance(e, AggSum):
        return not_null_variables(e.expr, not_null_positions) & frozenset(e.group)
    return frozenset()


def _interval_operand(node: exp.Add | exp.Sub) -> tuple[exp.Interval, exp.Expression] | None:
    if isinstance(node.expression, exp.Interval):
        return node.expression, node.this
    if isinstance(node.this, exp.Interval):
        return node.this, node.expression
    return None


def _arguments(node: exp.Func) -> list[exp.Expression]:
    args: list[exp.Expression] = []
    for key in node.arg_types:
        value = node.args.get(key)
        if isinstance(value, list):
            args.extend(v for v in value if isinstance(v, exp.Expression))
        elif isinstance(value, exp.Expression):
            args.append(value)
    return args


def _unwrap_date_conversion(node: exp.Expression) -> exp.Expression:
    """sqlglot wraps the date argument of year(d), datediff(a, b) … in a to_date the user did not write."""
    if isinstance(node, exp.TsOrDsToDate) and text_span(node) == text_span(node.this) and not node.args.get("format"):
        return node.this
    return node
