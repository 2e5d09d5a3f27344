"""Maps of one family: maps that share their store rows (see mapstore), a view's COUNT, SUM and count of
non-NULL values of one product per the same keys. A product that joins one of them may read the family's
rows instead, each weighing 1 and holding every member's value in a variable of its own (0 in the others'):
`M_sum[k]` becomes `F[k, __value_M_count, __value_M_sum] * __value_M_sum`. Products that join different
members then have the same factors but for their values, and sum over one join (fused.py, sqlgen).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from spark_ivm.calculus.expressions import Expr, MapRef, Var

# Per map of a family (maps that share store rows, of the same keys): the family's maps, in order.
Families = Mapping[str, tuple[str, ...]]


def family_name(members: Sequence[str]) -> str:
    return "__rows_" + members[0]


def value_var(member: str) -> str:
    """The variable holding a member's value in its family's rows."""
    return "__value_" + member


def read_as_families(factors: Sequence[Expr], families: Families) -> list[Expr]:
    """The factors with each map of a family read as the family's rows times the map's value,
    `M[k]` as `F[k, __value_M, …] * __value_M`; as they are where they read a family twice (its value
    variables would clash)."""
    read = [families[f.name] for f in factors if isinstance(f, MapRef) and f.name in families]
    if not read or len(set(read)) < len(read):
        return list(factors)
    out: list[Expr] = []
    for f in factors:
        if isinstance(f, MapRef) and f.name in families:
            members = families[f.name]
            out += [MapRef(family_name(members), f.keys + tuple(value_var(m) for m in members)), Var(value_var(f.name))]
        else:
            out.append(f)
    return out
