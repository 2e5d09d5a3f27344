"""Geographic functions."""

from __future__ import annotations

from spark_ivm.udfs.registry import udf

EARTH_RADIUS_KM = 6371.0088  # the mean Earth radius (IUGG)


@udf("double")
def haversine_km(lat1, lon1, lat2, lon2):
    """Great-circle distance in kilometres between two points given in degrees (haversine formula)."""
    import numpy as np

    phi1, phi2 = np.radians(lat1.astype("float64")), np.radians(lat2.astype("float64"))
    dphi = phi2 - phi1
    dlambda = np.radians(lon2.astype("float64") - lon1.astype("float64"))
    a = np.sin(dphi / 2) ** 2 + np.cos(phi1) * np.cos(phi2) * np.sin(dlambda / 2) ** 2
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))
