"""Python functions usable inside incremental views (Arrow-vectorized UDFs).

`udf` declares one (see `registry`); importing this package also defines the functions shipped with
spark_ivm: `haversine_km(lat1, lon1, lat2, lon2)` and `normalize_text(s)`.
"""

from spark_ivm.udfs.registry import (
    UDFS, Udf, UdfDefinitionError, UnregisteredFunctionError, pending, plan_functions, register_on, require, track,
    udf,
)
from spark_ivm.udfs.geo import haversine_km  # noqa: E402  (defines the shipped functions)
from spark_ivm.udfs.text import normalize_text  # noqa: E402

__all__ = [
    "udf", "Udf", "UDFS", "require", "plan_functions", "register_on", "track", "pending",
    "UdfDefinitionError", "UnregisteredFunctionError", "haversine_km", "normalize_text",
]
