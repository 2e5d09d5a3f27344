"""spark_ivm: incremental view maintenance for Apache Spark on Delta Lake.

    spark = spark_ivm.session()
    spark.sql("CREATE INCREMENTAL VIEW revenue AS SELECT … FROM orders JOIN lineitem … GROUP BY …")
    spark.sql("REFRESH INCREMENTAL VIEW revenue")

The compiler (SQL → calculus → deltas → maps and triggers) is pure Python: `compile_view`.
Python functions declared with `@spark_ivm.udf` may be called in views like built-ins.
"""

from spark_ivm.compiler.plan import Plan
from spark_ivm.compiler.viewlet import compile_view
from spark_ivm.errors import (
    CatalogEntryError, InvalidQueryError, IVMError, NonDeterministicError, ParseError, RefreshError, UnknownColumnError,
    UnknownTableError, UnknownViewError, UnsupportedQueryError, ViewExistsError,
)
from spark_ivm.udfs import udf

__version__ = "0.1.0"

__all__ = [
    "compile_view", "session", "enable", "udf", "Plan",
    "IVMError", "ParseError", "InvalidQueryError", "UnsupportedQueryError", "NonDeterministicError", "UnknownTableError",
    "UnknownColumnError", "UnknownViewError", "ViewExistsError", "RefreshError", "CatalogEntryError",
]


def session(warehouse: str | None = None, **conf):
    """A local Spark session with Delta Lake and the IVM statements enabled."""
    from spark_ivm.session import session as _session

    return _session(warehouse, **conf)


def enable(spark):
    """Enable the IVM statements on an existing Spark session (a cluster, Databricks, Spark Connect)."""
    from spark_ivm.runtime import enable as _enable

    return _enable(spark)
