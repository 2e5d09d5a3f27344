"""The session settings spark_ivm reads (`spark.conf.set("spark.ivm.…", value)`), each with its type, default
and meaning. Values are read when a statement runs, so a setting changed between statements applies to the
next one; a value that is not allowed is an error naming the setting and what it accepts.

The policy's tunable thresholds, which are not session settings, are registered beside the policy that
reads them: `spark_ivm.heuristics.THRESHOLDS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_ivm import heuristics
from spark_ivm.errors import IVMError


@dataclass(frozen=True)
class Setting:
    key: str
    default: object  # a str, or an int for integer settings
    doc: str
    choices: tuple[str, ...] = ()  # the values a string setting accepts (any if empty)
    minimum: int | None = None  # the least value an integer setting accepts

    def get(self, spark):
        """The setting's value in the session (its default when unset)."""
        text = spark.conf.get(self.key, None)
        if text is None:
            return self.default
        if isinstance(self.default, int):
            try:
                value = int(str(text).strip())
            except ValueError:
                raise IVMError(f"{self.key} must be an integer, not {text!r}") from None
            if self.minimum is not None and value < self.minimum:
                raise IVMError(f"{self.key} must be at least {self.minimum}, not {value}")
            return value
        value = str(text).strip().lower()
        if self.choices and value not in self.choices:
            raise IVMError(f"{self.key} must be {', '.join(self.choices[:-1])} or {self.choices[-1]}, not {text!r}")
        return value


CATALOG = Setting(
    "spark.ivm.catalog", "default.spark_ivm_views",
    "The Delta table holding the incremental views' definitions (created when the first view is).")
COMPACT_EVERY = Setting(
    "spark.ivm.compactEvery", 8,
    "Every this many refreshes of a map store compact it instead of appending to it: it rewrites the files "
    "appended since the last compaction and the store's small files (every 8th time the whole store) with one "
    "row per map and key, dropping keys whose value is 0; a refresh compacts sooner where the appends would "
    "outgrow what the driver compacts; 0: never.", minimum=0)
CODEGEN = Setting(
    "spark.ivm.codegen", "on",
    "How a refresh runs its Spark plans: on, compiled to code; off, interpreted; auto, interpreted when the "
    "tables it may scan hold at most heuristics.INTERPRETED_MAX_BYTES.", choices=("auto", "on", "off"))
PLAN = Setting(
    "spark.ivm.plan", "auto",
    "How a refresh computes its increments: at_once, in the one query that writes them; materialized, each "
    "batch, copy of the map store and intermediate result computed into a checkpoint first; auto, as "
    "heuristics.plans_at_once chooses per refresh.", choices=("auto", "at_once", "materialized"))
INLINE_ROWS = Setting(
    "spark.ivm.inlineRows", 1000,
    "A view whose rows (and maps) number at most this many keeps them in its definition, so that reading it "
    "runs no Spark job; 0: every view reads its map store.", minimum=0)
DRIVER_STATEMENTS = Setting(
    "spark.ivm.driverStatements", "on",
    "Where a refresh computes the statements whose every input the driver holds (a small batch, the rows of "
    "the map store it reads): on, in DuckDB on the driver, with no Spark job; off, in Spark.",
    choices=("on", "off"))

FULL_REFRESH_PERCENT = Setting(
    "spark.ivm.fullRefreshPercent", heuristics.FULL_REFRESH_PERCENT,
    "Under a view's `auto` refresh policy, a REFRESH recomputes the view's maps instead of applying a batch "
    "whose changed rows take at least this percent of its source table's bytes now (and at least "
    "heuristics.FULL_REFRESH_MIN_BYTES); 0: never.", minimum=0)

SETTINGS = (CATALOG, COMPACT_EVERY, CODEGEN, PLAN, INLINE_ROWS, DRIVER_STATEMENTS, FULL_REFRESH_PERCENT)
