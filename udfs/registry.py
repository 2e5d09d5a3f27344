"""Python functions in incremental views: `@spark_ivm.udf` and the sessions they are registered on.

A decorated function takes one pandas Series per argument and returns a Series of the same length.
It becomes:

- a deterministic built-in of the calculus (`functions.FUNCTIONS[name]`): it reads no table, so its
  delta is 0, and the compiler and the reference evaluator call it like `upper` or `round`;
- a pandas_udf (Arrow-vectorized) registered under its name with `spark.udf.register` on every
  session spark_ivm enables, so the Spark SQL of the view's maps calls it a batch at a time.

NULLs: by default a NULL argument gives NULL, as for most SQL functions, and the function never sees
the rows that have one (`null_propagating=True`). With `null_propagating=False` it receives them as
pandas represents them (None, NaN or NaT: test with `pd.isna`). A None, NaN or NaT in the result is
NULL. The reference implementation calls the function on one-element Series, so both paths run the
same code. As in any pandas UDF, a batch of an integer column that holds NULLs arrives as float64
(pandas has no NULL integer in that representation), even though the NULL rows themselves are left
out: a function of integers should not depend on the Series' dtype.
"""

from __future__ import annotations

import datetime
import functools
import re
import threading
import weakref
from dataclasses import dataclass
from decimal import Decimal
from typing import Callable, Iterable

from spark_ivm.calculus import functions
from spark_ivm.errors import IVMError, UnsupportedQueryError

_NAME = re.compile(r"[a-z_][a-z0-9_]*")
_INTEGRAL = {"tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long"}
_FRACTIONAL = {"double", "float", "real"}
_DECIMAL = re.compile(r"decimal(\(\s*\d+\s*(,\s*\d+\s*)?\))?|numeric(\(.*\))?|dec(\(.*\))?")


class UdfDefinitionError(IVMError):
    """A function cannot be declared as a Python function of incremental views."""


class UnregisteredFunctionError(UnsupportedQueryError):
    """A view needs a Python function that this process has not defined."""

    def __init__(self, name: str, view: str | None = None):
        called_by = f" (called by view {view})" if view else ""
        super().__init__(
            f"function {name}{called_by}",
            detail=(f"{name} is neither a built-in nor a Python function registered in this process; "
                    f"import the module that defines it (with @spark_ivm.udf) before using the view"))
        self.function = name
        self.view = view


@dataclass(frozen=True)
class Udf:
    """A registered Python function: `function` maps pandas Series to a Series of `return_type`."""

    name: str
    function: Callable
    return_type: str  # a Spark SQL type, lowercase: "double", "string", "decimal(10,2)", …
    null_propagating: bool = True

    def __call__(self, *columns):
        """The function over whole Series, with this function's NULL rule applied."""
        return _vectorized(self)(*columns)

    def reference(self, *values):
        """The function on plain Python values (the calculus's reference implementation)."""
        import pandas as pd

        columns = [pd.Series([value]) for value in values]
        result = self.function(*columns)
        if len(result) != 1:
            raise IVMError(f"{self.name} returned {len(result)} values for 1 row")
        return _plain(result.iloc[0], self.return_type)

    def pandas_udf(self):
        from pyspark.sql.functions import pandas_udf

        return pandas_udf(_vectorized(self), self.return_type)  # deterministic unless told otherwise


UDFS: dict[str, Udf] = {}
_enabled_sessions: "weakref.WeakSet" = weakref.WeakSet()
_lock = threading.Lock()


def udf(return_type: str | Callable | None = None, *, returnType: str | None = None, name: str | None = None,
        null_propagating: bool = True):
    """Declare a deterministic, Arrow-vectorized Python function usable in incremental views.

        @spark_ivm.udf("double")
        def km_to_miles(km):            # km: a pandas Series; returns a Series
            return km * 0.621371

    `return_type` (or `returnType`) is a Spark SQL type string; `name` defaults to the function's
    name (lowercase). The function must be deterministic: the same arguments always give the same
    result, or the view drifts from its query.
    """
    if callable(return_type):
        raise UdfDefinitionError("@spark_ivm.udf needs the return type, e.g. @spark_ivm.udf(\"double\")")
    declared = returnType if return_type is None else return_type
    if declared is None:
        raise UdfDefinitionError("@spark_ivm.udf needs the return type, e.g. @spark_ivm.udf(\"double\")")
    if returnType is not None and return_type is not None and returnType != return_type:
        raise UdfDefinitionError("give the return type once: either positionally or as returnType")

    def decorate(function: Callable) -> Udf:
        defined = Udf(_checked_name(name or function.__name__), function, _checked_type(declared),
                      null_propagating)
        _register(defined)
        return defined

    return decorate


def _checked_name(name: str) -> str:
    lowered = name.lower()
    if not _NAME.fullmatch(lowered):
        raise UdfDefinitionError(f"{name!r} cannot name a SQL function: use letters, digits and _")
    existing = functions.FUNCTIONS.get(lowered)
    if existing is not None and lowered not in UDFS:
        raise UdfDefinitionError(f"{lowered} is a built-in function of incremental views: choose another name")
    if lowered.upper() in _sql_function_names():
        # Registered under a built-in's name, it would replace that built-in for the whole session.
        raise UdfDefinitionError(f"{lowered} is a SQL built-in function: choose another name")
    return lowered


@functools.cache
def _sql_function_names() -> frozenset[str]:
    from sqlglot.dialects.dialect import Dialect

    return frozenset(Dialect.get_or_raise("spark").parser_class.FUNCTIONS)


def _checked_type(type_sql) -> str:
    if hasattr(type_sql, "simpleString"):  # a pyspark DataType
        type_sql = type_sql.simpleString()
    normalized = re.sub(r"\s+", "", str(type_sql).lower())
    if not (normalized in _INTEGRAL or normalized in _FRACTIONAL or _DECIMAL.fullmatch(normalized)
            or normalized in ("string", "boolean", "date", "timestamp", "timestamp_ntz")):
        raise UdfDefinitionError(
            f"return type {type_sql!r}: a Python function of an incremental view returns a scalar "
            f"(a number, decimal, string, boolean, date or timestamp)")
    return normalized


def _register(defined: Udf) -> None:
    # Spark has no INT-valued boolean: the calculus reads conditions as 0/1, as for LIKE.
    template = f"`{defined.name}`({{*}})"
    if defined.return_type == "boolean":
        template = f"CAST({template} AS INT)"
    with _lock:
        functions.FUNCTIONS[defined.name] = functions.Function(
            defined.name, defined.reference, template, defined.null_propagating)
        UDFS[defined.name] = defined
        sessions = list(_enabled_sessions)
    for spark in sessions:
        try:
            register_on(spark)
        except Exception:  # noqa: BLE001
            # A session enabled earlier may since have been stopped; a live one gets the function at
            # its next statement (runtime.enable registers what is missing before each one).
            pass


# ---------------------------------------------------------------------------------------------------
# Sessions


def track(spark) -> None:
    """Register every Python function on `spark` now and every one defined later as it is defined."""
    with _lock:
        _enabled_sessions.add(spark)
    register_on(spark)


def register_on(spark, names: Iterable[str] | None = None) -> None:
    """Register the named Python functions (all by default) on `spark`, each once per definition."""
    registered = _registered(spark)
    wanted = UDFS if names is None else {n: UDFS[n] for n in names if n in UDFS}
    for name, defined in list(wanted.items()):
        if registered.get(name) is not defined:
            spark.udf.register(name, defined.pandas_udf())
            registered[name] = defined


def _registered(spark) -> dict[str, Udf]:
    registered = getattr(spark, "_spark_ivm_udfs", None)
    if registered is None:
        registered = {}
        spark._spark_ivm_udfs = registered
    return registered


def pending(spark) -> bool:
    """Whether a Python function is defined that `spark` does not have yet (cheap: no Spark call)."""
    registered = _registered(spark)
    return any(registered.get(name) is not defined for name, defined in list(UDFS.items()))


def require(spark, names: Iterable[str], view: str | None = None) -> None:
    """Make sure every function a view calls can run on `spark`: built-ins need nothing, Python
    functions are registered if they are not yet; a name that is neither raises
    UnregisteredFunctionError naming it, the view when given, and the remedy (import the module
    that defines it)."""
    names = list(dict.fromkeys(names))
    missing = [n for n in names if n not in functions.FUNCTIONS]
    if missing:
        raise UnregisteredFunctionError(missing[0], view)
    register_on(spark, [n for n in names if n in UDFS])


def plan_functions(plan) -> list[str]:
    """The names of the functions (calculus `Fn`) a compiled plan calls, in order of first use."""
    from spark_ivm.calculus.expressions import Fn

    expressions = [m.definition for m in plan.maps]
    expressions += [s.expr for t in plan.triggers for s in t.statements]
    if plan.query is not None:
        expressions += [a.definition for a in plan.query.aggregates]
    names: dict[str, None] = {}
    for e in expressions:
        for node in _walk(e):
            if isinstance(node, Fn):
                names.setdefault(node.name)
    return list(names)


def _walk(e):
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(tuple(node.children())))


# ---------------------------------------------------------------------------------------------------
# NULLs and values


def _vectorized(defined: Udf) -> Callable:
    """The function as Spark calls it: Series in, Series of the same length out, NULL rule applied."""
    function, name = defined.function, defined.name

    def call(*columns):
        import pandas as pd

        rows = len(columns[0]) if columns else 0
        if not defined.null_propagating or not columns:
            return _checked_result(function(*columns), rows, name)
        missing = pd.concat([c.isna().reset_index(drop=True) for c in columns], axis=1).any(axis=1).to_numpy()
        if not missing.any():
            return _checked_result(function(*columns), rows, name)
        present = ~missing
        if not present.any():
            return pd.Series([None] * rows, dtype=object)
        result = _checked_result(function(*(c[present].reset_index(drop=True) for c in columns)),
                                 int(present.sum()), name)
        # Back to one value per input row, missing (NULL) where an argument was NULL. Integers go
        # through object, not float64, which would round those beyond 2**53.
        if result.dtype.kind not in "fMm":
            result = result.astype(object)
        result.index = present.nonzero()[0]
        return result.reindex(pd.RangeIndex(rows))

    call.__name__ = name
    return call


def _checked_result(result, rows: int, name: str):
    import pandas as pd

    if not isinstance(result, pd.Series):
        raise IVMError(f"{name} must return a pandas Series, not {type(result).__name__}")
    if len(result) != rows:
        raise IVMError(f"{name} returned {len(result)} values for {rows} rows")
    return result.reset_index(drop=True)


def _plain(value, return_type: str):
    """A result element as the calculus holds values: None for NULL, Python numbers, 0/1 for booleans."""
    import pandas as pd

    if value is None or (not isinstance(value, (str, bytes)) and pd.isna(value)):
        return None
    if return_type in _INTEGRAL:
        return int(value)
    if return_type in _FRACTIONAL:
        return float(value)
    if return_type == "boolean":
        return 1 if value else 0
    if return_type == "string":
        return str(value)
    if return_type == "date":
        return _as_date(value)
    if return_type.startswith("timestamp"):
        return pd.Timestamp(value).to_pydatetime()
    return value if isinstance(value, Decimal) else Decimal(str(value))


def _as_date(value) -> datetime.date:
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    import pandas as pd

    return pd.Timestamp(value).date()
