"""The aggregate calculus (AGCA): immutable expressions over relations with integer multiplicities.

An expression denotes, for each binding of its *input* variables (bound from outside), a finite map from
bindings of its *output* variables to values (Z_Rel generalized to values). Products pass bindings from
left to right (sideways information passing), so factor order inside a `Prod` is significant and the
smart constructors never reorder factors.

Nodes are built through the smart constructors `sum_`, `prod`, `neg`, `aggsum`, … which keep
expressions canonical: nested sums and products are flattened, 0 annihilates a product, 1 is dropped
from products and 0 from sums, and constants of a product are folded into one leading constant.

SQL arithmetic `+`, `-`, `/` on values are the functions `Fn('+')` … (they propagate NULL), while
`Sum` is the additive union of relations (a NULL contribution counts as 0); `*` between values is a
`Prod` factor, so products of values factorize like any other product.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

__all__ = [
    "Expr", "Const", "Var", "Fn", "Sum", "Prod", "Rel", "DeltaRel", "Cmp", "Lift", "AggSum",
    "Exists", "MapRef", "ZERO", "ONE", "NULL",
    "const", "var", "fn", "sum_", "prod", "neg", "rel", "delta_rel", "cmp", "lift", "aggsum", "exists",
    "map_ref", "CMP_OPS", "NEGATED_CMP", "FLIPPED_CMP",
]

CMP_OPS = ("=", "!=", "<", "<=", ">", ">=", "is", "is not")
NEGATED_CMP = {"=": "!=", "!=": "=", "<": ">=", ">=": "<", ">": "<=", "<=": ">", "is": "is not", "is not": "is"}
FLIPPED_CMP = {"=": "=", "!=": "!=", "<": ">", ">": "<", "<=": ">=", ">=": "<=", "is": "is", "is not": "is not"}


def _hash_once(cls):
    """Cache a composite node's hash in the `_hash` slot of `_Composite`: expressions are immutable, and
    the rules hash the same large trees again and again (dict keys, lru_caches, sets of factors), which
    otherwise walks the whole tree every time. The slot is not a dataclass field, so copies and pickles,
    which carry the fields only, never carry a hash computed in another process."""
    computed = cls.__hash__

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:
            h = computed(self)
            object.__setattr__(self, "_hash", h)
            return h

    cls.__hash__ = __hash__
    return cls


class Expr:
    """Base of all calculus nodes. Subclasses are frozen dataclasses, hence hashable and comparable."""

    __slots__ = ()

    def children(self) -> tuple["Expr", ...]:
        return ()

    def with_children(self, children: tuple["Expr", ...]) -> "Expr":
        return self

    def __str__(self) -> str:
        from spark_ivm.calculus.printer import to_text

        return to_text(self)

    def walk(self) -> Iterator["Expr"]:
        """Pre-order traversal of the expression tree."""
        yield self
        for c in self.children():
            yield from c.walk()


class _Composite(Expr):
    """A node with children, whose hash `_hash_once` keeps."""

    __slots__ = ("_hash",)


@dataclass(frozen=True, slots=True)
class Const(Expr):
    """A constant value: number, Decimal, string, date, bool or None (SQL NULL)."""

    value: object

    def __repr__(self) -> str:
        return f"Const({self.value!r})"


@dataclass(frozen=True, slots=True)
class Var(Expr):
    """The value of a variable, bound elsewhere (relation atom, lift or group-by list)."""

    name: str

    def __repr__(self) -> str:
        return f"Var({self.name!r})"


@_hash_once
@dataclass(frozen=True, slots=True)
class Fn(_Composite):
    """A deterministic function of values: SQL arithmetic (+ - / %), CASE, LIKE, built-ins."""

    name: str
    args: tuple[Expr, ...]

    def children(self):
        return self.args

    def with_children(self, children):
        return fn(self.name, *children)


@_hash_once
@dataclass(frozen=True, slots=True)
class Sum(_Composite):
    terms: tuple[Expr, ...]

    def children(self):
        return self.terms

    def with_children(self, children):
        return sum_(*children)


@_hash_once
@dataclass(frozen=True, slots=True)
class Prod(_Composite):
    factors: tuple[Expr, ...]

    def children(self):
        return self.factors

    def with_children(self, children):
        return prod(*children)


@dataclass(frozen=True, slots=True)
class Rel(Expr):
    """A base relation atom R(x1, …, xn): the multiplicity of each tuple of R."""

    name: str
    vars: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeltaRel(Expr):
    """The batch of changes of a relation, ΔR(x1, …, xn), with signed multiplicities."""

    name: str
    vars: tuple[str, ...]


@_hash_once
@dataclass(frozen=True, slots=True)
class Cmp(_Composite):
    """A comparison of two values: 1 when it holds, else 0. NULL makes every op but `is`/`is not` 0."""

    op: str
    left: Expr
    right: Expr

    def children(self):
        return (self.left, self.right)

    def with_children(self, children):
        return cmp(self.op, *children)


@_hash_once
@dataclass(frozen=True, slots=True)
class Lift(_Composite):
    """`(var ^= expr)`: binds var to the value of expr, or tests equality when var is already bound."""

    var: str
    expr: Expr

    def children(self):
        return (self.expr,)

    def with_children(self, children):
        return lift(self.var, children[0])


@_hash_once
@dataclass(frozen=True, slots=True)
class AggSum(_Composite):
    """Sum of expr's values grouped by `group` (its only output variables)."""

    group: tuple[str, ...]
    expr: Expr

    def children(self):
        return (self.expr,)

    def with_children(self, children):
        return aggsum(self.group, children[0])


@_hash_once
@dataclass(frozen=True, slots=True)
class Exists(_Composite):
    """1 for each output binding of expr whose value is non-zero."""

    expr: Expr

    def children(self):
        return (self.expr,)

    def with_children(self, children):
        return exists(children[0])


@dataclass(frozen=True, slots=True)
class MapRef(Expr):
    """A materialized map m[k1, …, kn]: output variables are the keys not bound from outside."""

    name: str
    keys: tuple[str, ...]


ZERO = Const(0)
ONE = Const(1)
NULL = Const(None)


# ---------------------------------------------------------------------------------------------------
# Smart constructors


def const(value: object) -> Const:
    return Const(value)


def var(name: str) -> Var:
    return Var(name)


def fn(name: str, *args: Expr) -> Expr:
    return Fn(name, tuple(args))


def _is_number(e: Expr) -> bool:
    return isinstance(e, Const) and isinstance(e.value, (int, float)) and not isinstance(e.value, bool)


def sum_(*terms: Expr) -> Expr:
    """Flattened sum without zero terms; a single term stands alone."""
    flat: list[Expr] = []
    for t in terms:
        if isinstance(t, Sum):
            flat.extend(t.terms)
        elif t == ZERO:
            continue
        else:
            flat.append(t)
    if not flat:
        return ZERO
    if len(flat) == 1:
        return flat[0]
    return Sum(tuple(flat))


def prod(*factors: Expr) -> Expr:
    """Flattened product: numeric constants folded into one leading factor, 1 dropped, 0 absorbing.

    Repeated identical 0/1 conditions (comparisons, Exists) are idempotent and kept once.
    """
    flat: list[Expr] = []
    conditions: set[Expr] = set()  # those in flat: a set, as a WHERE of a thousand ANDs is one product
    coefficient: int | float = 1
    for f in factors:
        parts = f.factors if isinstance(f, Prod) else (f,)
        for p in parts:
            if _is_number(p):
                coefficient = coefficient * p.value
            elif isinstance(p, (Cmp, Exists)):
                if p not in conditions:
                    conditions.add(p)
                    flat.append(p)
            else:
                flat.append(p)
    if coefficient == 0:
        return ZERO
    if coefficient != 1:
        flat.insert(0, Const(coefficient))
    if not flat:
        return ONE
    if len(flat) == 1:
        return flat[0]
    return Prod(tuple(flat))


def neg(e: Expr) -> Expr:
    """−e, represented as the product −1 * e so that cancellation only has to compare monomials."""
    return prod(Const(-1), e)


def rel(name: str, *vars_: str) -> Rel:
    return Rel(name, tuple(vars_))


def delta_rel(name: str, *vars_: str) -> DeltaRel:
    return DeltaRel(name, tuple(vars_))


def cmp(op: str, left: Expr, right: Expr) -> Expr:
    if op not in CMP_OPS:
        raise ValueError(f"unknown comparison operator {op!r}")
    return Cmp(op, left, right)


def lift(var_name: str, e: Expr) -> Expr:
    return Lift(var_name, e)


def aggsum(group: Iterable[str], e: Expr) -> Expr:
    """AggSum with duplicate group variables removed; AggSum of 0 is 0."""
    g = tuple(dict.fromkeys(group))
    if e == ZERO:
        return ZERO
    while isinstance(e, AggSum) and set(g) <= set(e.group):
        e = e.expr
    return AggSum(g, e)


def exists(e: Expr) -> Expr:
    if e == ZERO:
        return ZERO
    return Exists(e)


def map_ref(name: str, *keys: str) -> MapRef:
    return MapRef(name, tuple(keys))
