"""The Spark runtime: IVM statements on a Spark session, map stores in Delta Lake."""

from __future__ import annotations

import functools

from spark_ivm import udfs
from spark_ivm.runtime.engine import Engine
from spark_ivm.runtime.statements import parse_statement

__all__ = ["enable", "Engine"]


def enable(spark):
    """Make `spark.sql` understand the IVM statements (CREATE/REFRESH/DROP/SHOW/EXPLAIN INCREMENTAL
    VIEW); every other statement goes to Spark unchanged. Works on any session, Spark Connect too,
    because it only wraps the session object's `sql` method.

    The Python functions declared with `@spark_ivm.udf` are registered on the session (as pandas
    UDFs), those declared later too: at once, or else before the session's next statement."""
    if getattr(spark, "_spark_ivm_engine", None) is not None:
        return spark
    engine = Engine(spark)
    plain_sql = spark.sql
    udfs.track(spark)

    @functools.wraps(plain_sql)
    def sql(sqlQuery, *args, **kwargs):
        if udfs.pending(spark):
            udfs.register_on(spark)
        statement = parse_statement(sqlQuery) if isinstance(sqlQuery, str) else None
        if statement is None:
            return plain_sql(sqlQuery, *args, **kwargs)
        return engine.execute(statement)

    spark.sql = sql
    spark._spark_ivm_engine = engine
    return spark
