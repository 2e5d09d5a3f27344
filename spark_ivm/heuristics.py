"""Materialization policy: which deltas get auxiliary maps and how each map is maintained.

The compiler (mechanism) asks these questions; the answers live here so that a cost model can
replace them without touching the viewlet transform.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# A view's default plan has at most this many trigger statements. On Spark every statement is a join
# planned and run per refresh: TPC-H Q8 at unlimited depth has 685 statements over 166 maps and took 11
# minutes to refresh at SF 0.01 on 2 cores (creating it 7); Q5, Q7 and Q9 (130–154 statements) took
# 1–2 minutes.
MAX_TRIGGER_STATEMENTS = 160

# A delta with more nodes than this is replaced by re-evaluating its map from the other maps and the
# batch, when that is smaller. A nested aggregate's delta inlines the nested value before and after the
# batch at every use: TPC-H Q15's lineitem delta (the global MAX of per-supplier revenue, compared with
# every supplier's) has 3,969 nodes and became a 368 KB statement that Spark's analyzer did not get
# through in 8 minutes; no other TPC-H delta has more than 884.
MAX_DELTA_NODES = 2000


@dataclass(frozen=True)
class Policy:
    """depth: None = full higher-order IVM; 1 = classic first-order IVM (deltas read base tables);
    0 = re-evaluate the view's maps on every batch. max_delta_nodes: see `reevaluates`."""

    depth: int | None = None
    max_delta_nodes: int = MAX_DELTA_NODES

    def __post_init__(self):
        if self.depth is not None and (not isinstance(self.depth, int) or self.depth < 0):
            raise ValueError(f"depth must be a non-negative integer or None, not {self.depth!r}")

    def maintenance(self, level: int) -> str:
        """How a map found at `level` (0 = the view's own maps) is kept up to date."""
        if self.depth == 0:
            return "recompute"
        if self.depth is not None and level + 1 >= self.depth:
            return "first-order"
        return "incremental"

    def reevaluates(self, delta_size: int) -> bool:
        """Whether a map whose delta has delta_size nodes is better recomputed from the maps below it
        (its contents after the batch) than incremented: the work is then proportional to the map, not
        to the batch, so only for deltas too large to plan."""
        return delta_size > self.max_delta_nodes


def statement_count(plan) -> int:
    return sum(len(t.statements) for t in plan.triggers)


def default_depth_plan(plan_at: Callable[[int | None], object]):
    """The plan of a view created without a depth: unlimited (full higher-order IVM) when its triggers
    have at most MAX_TRIGGER_STATEMENTS statements, else the first of depths 3, 2 and 1 that stays
    within that, and depth 1 (first-order IVM: a statement per relation and aggregate) at the least."""
    plan = plan_at(None)
    depth = 3
    while statement_count(plan) > MAX_TRIGGER_STATEMENTS and depth >= 1:
        plan, depth = plan_at(depth), depth - 1
    return plan


# A map is split at a summed variable that joins at least this many of its relations, when the split
# leaves at least two maps with keys of their own. TPC-H Q5's delta for orders needs
# Σ_nation customer(c, nation) · lineitem(o, s) · supplier(s, nation) · …, keyed by c and o: as one map
# that is every (customer, lineitem) pair of a nation, 0.9 M rows at SF 0.01 from 60,000 lineitems and
# 1,500 customers, and each changed customer updates all the lineitems of its nation. Keyed by the
# nation as well, it is three maps no larger than their relations, joined on the nation by the trigger.
# A variable that only joins two relations is usually a key and its foreign key (an order and its
# lineitems), whose join is no larger than the larger relation: splitting there would only add rows.
SPLIT_MIN_RELATIONS = 3


def splits_map_at(relations_joined: int, keyed_parts: int) -> bool:
    """Whether a map is split at a summed variable that joins `relations_joined` of its relations into
    parts of which `keyed_parts` hold keys of the map."""
    return relations_joined >= SPLIT_MIN_RELATIONS and keyed_parts >= 2


# A refresh reads the map store once, into a checkpoint every map reference then scans, when its
# statements refer to maps at least this many times. Each scan of a Delta table costs its own file
# listing jobs (about 0.2–0.4 s on 2 cores, whatever the table's size), and the store's files mix all
# maps, so every reference scans them all anyway: one read and one copy cost less from two references on.
SHARED_STORE_READ_MIN_REFERENCES = 2


def reads_store_once(map_references: int) -> bool:
    """Whether a refresh whose statements refer to maps `map_references` times reads the store once."""
    return map_references >= SHARED_STORE_READ_MIN_REFERENCES


# The copy of the store keeps only the map rows whose fixed keys are among the batch's own values, not
# all of their range: keys spread over the whole map (Q17's parts of new lineitems) make a range that
# skips nothing, and at SF 1 Q17 copied 14 million rows of which 0.45 million can join. The values are
# collected to the driver (one Spark job per batch) and written into the copy's condition as literals,
# which Spark tests with a hash set (a subquery instead made one broadcast join per key test, and a
# refresh with many of them ran out of execution memory). So only up to this many values per batch
# column, only of a batch small enough that collecting its values costs little next to the copy, and
# not of an integer column whose range is dense: new orders have consecutive keys, and their range
# already holds little beside them.
LISTED_KEY_VALUES_MAX = 10_000
LISTED_BATCH_ROWS_MAX = 50_000
DENSE_RANGE_PER_ROW = 8


def lists_batch_values(batch_rows: int, span: int | None) -> bool:
    """Whether the distinct values of a batch column are collected to bound the store copy, for a batch of
    `batch_rows` rows whose values in the column span `span` integers (None: not an integer column)."""
    return 0 < batch_rows <= LISTED_BATCH_ROWS_MAX and (span is None or span > DENSE_RANGE_PER_ROW * batch_rows)


# For the same reason, creating a view reads a source table once, into a checkpoint its maps' queries
# then scan, when they refer to it at least twice (a view with three maps over a three-table join: 9
# scans, 8–11 s on 2 cores). Only up to this size on disk: the checkpoint is a copy of the table in the
# executors' memory and disk, and from some size on one more scan costs less than a copy.
SHARED_SOURCE_READ_MAX_BYTES = 32 * 1024 * 1024


def reads_source_once(references: int, size_bytes: int) -> bool:
    """Whether creating a view whose maps refer `references` times to a source table of `size_bytes`
    reads it once."""
    return references >= SHARED_STORE_READ_MIN_REFERENCES and size_bytes <= SHARED_SOURCE_READ_MAX_BYTES


# A checkpoint of a refresh's intermediate rows is read in at most this many partitions when Spark's
# shuffle partitions setting cannot be read as a number (e.g. "auto"). The rows of a refresh are the
# size of its batches, not of the data.
DEFAULT_CHECKPOINT_PARTITIONS = 8


def checkpoint_partitions(shuffle_partitions: str | None) -> int:
    """How many partitions a refresh's checkpointed rows are read in: as many as a shuffle makes, the
    parallelism the session is set up for."""
    try:
        return max(1, int(shuffle_partitions))
    except (TypeError, ValueError):
        return DEFAULT_CHECKPOINT_PARTITIONS


# A map store is written in files of at most this many rows when it is built or compacted, in key
# order (see mapstore.key_order), so that Delta can skip the files of keys a refresh does not touch.
# Smaller files skip more precisely but each file read costs a little: at TPC-H SF 1, Q12's 6.1 million
# map rows become about 60 files.
STORE_FILE_ROWS = 100_000
# A store's Delta checksum lists its files when it has at most this many (Delta's own default is 50): a
# refresh then reads the store without Delta rebuilding its state of each new version (a few Spark jobs).
# Each file adds some 400 bytes of statistics to each commit's checksum.
STORE_LISTED_FILES_MAX = 10_000


# With spark.ivm.codegen = auto (not the default, see config.CODEGEN), a refresh runs its
# Spark plans interpreted, generating and compiling no code, when the Delta tables it may scan beyond its
# batches (its map store, and the source tables its statements read) hold at most this many bytes. A
# refresh plans 150-odd small stages, and compiling their code was the largest share of its time on 2
# cores (31 % of the driver's samples for TPC-H q7 at SF 0.01). Per row, compiled code is faster, so the
# bound sits between two measurements (2 cores, 3 rounds of a 0.1 % insert and delete): q7 at SF 0.01, a
# 2.5 MB store, refreshed interpreted in 14.6-18.3 s every round; compiled, 28.8 s the first time in a
# session (a scheduled job's only refresh) and 18.0-22.8 s after it (12.8-18.8 s with Spark's cache of
# compiled code raised from 100 classes to 4,096, which is not set: its memory over a long session is not
# measured). q3 at SF 1, a 34 MB store, with that cache: interpreted 6.8-13.4 s, compiled 5.7-11.5 s.
INTERPRETED_MAX_BYTES = 16 * 1024 * 1024


def runs_interpreted(bytes_scanned: int | None) -> bool:
    """Whether a refresh that may scan `bytes_scanned` bytes of Delta tables (None: not known) runs its
    plans interpreted."""
    return bytes_scanned is not None and bytes_scanned <= INTERPRETED_MAX_BYTES


# A consolidated batch of at most this many rows is broadcast to the joins that read it: it is small next
# to the maps it joins, so every task gets a copy instead of the maps being shuffled to meet it.
BROADCAST_BATCH_ROWS = 200_000

# A refresh computes its increments in one query (see runtime/run.py: "at once") when it runs at most
# this many trigger statements, none of which re-evaluates nested aggregates per affected key or a map's
# whole contents. Each materialized intermediate result costs a Spark job of its own: a light
# view's refresh is mostly such jobs. A statement that re-evaluates reads its stages several times, and
# in one query Spark would compute a stage again at every read; many statements make one plan that
# Spark takes long to plan.
AT_ONCE_MAX_STATEMENTS = 24


def plans_at_once(statements) -> bool:
    """Whether a refresh running these trigger statements computes them in one query."""
    return (len(statements) <= AT_ONCE_MAX_STATEMENTS
            and all(s.op == "+=" and s.reevaluated_keys is None for s in statements))


# The user's view holds its rows (and its maps' rows) as literals in its definition when there are at most
# spark.ivm.inlineRows of them (see config.INLINE_ROWS) and its SQL text stays within this many characters
# (see runtime/viewsql.py). Reading a Delta table's new version costs a few Spark jobs; reading literals
# none. The metastore limits a view's text: embedded Derby stores it in a column of at most 32,700
# characters, and a longer text takes tens of seconds to fail there.
INLINE_SQL_CHARS_MAX = 30_000

# A refresh collects its increments to the driver and appends them from there, instead of computing them
# into a checkpoint that the append then reads, when every view it refreshes holds its maps inline: the
# driver then has the increments of those maps to add to the literals, with no further job. Only up to
# this many rows; more are computed again into a checkpoint.
COLLECTED_ROWS_MAX = 50_000


def collects_increments(maps_inline: list[bool]) -> bool:
    """Whether a refresh of views that hold their maps inline or not (one flag per view) collects its
    increments (see COLLECTED_ROWS_MAX)."""
    return bool(maps_inline) and all(maps_inline)


# A refresh under the `auto` policy recomputes a view's maps instead of applying its batches when a batch's
# changed rows take at least this share of its source's bytes as they are now (spark.ivm.fullRefreshPercent)
# and at least this many bytes. Applying a batch costs about what running the view's statements over as
# many rows does; recomputing costs what CREATE does, several times the query itself, so that applying even
# a batch as large as the table wins for most views: the share is reached by a source overwritten, emptied
# and loaded again, or mostly deleted. Below the size either takes little more than a refresh's fixed steps.
FULL_REFRESH_PERCENT = 100
FULL_REFRESH_MIN_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Batch:
    """What a refresh knows of a changed source's batch before reading it (from the Delta log)."""
    table: str
    bytes: int | None  # the changed rows' bytes in the table's files (None: not known)
    table_bytes: int | None  # the table's size now (None: not known)

    @property
    def share(self) -> float | None:
        """The batch's bytes over the table's now (infinite for a source emptied)."""
        if self.bytes is None or self.table_bytes is None:
            return None
        return self.bytes / self.table_bytes if self.table_bytes else float("inf") if self.bytes else 0.0


def refresh_fully(batches: list[Batch], percent: int = FULL_REFRESH_PERCENT,
                  min_bytes: int | None = None) -> tuple[bool, str]:
    """Whether a view under the `auto` refresh policy is recomputed rather than refreshed incrementally from
    these batches, and why (for REFRESH to report). A batch of unknown size never makes it recompute."""
    min_bytes = FULL_REFRESH_MIN_BYTES if min_bytes is None else min_bytes
    known = [b for b in batches if b.share is not None]
    if not known:
        return False, "auto: the batches' sizes are not known"
    largest = max(known, key=lambda b: (b.share, b.bytes))
    share = ("all" if largest.share == float("inf") else f"{largest.share:.1%}") + \
        f" of {largest.table} ({_size(largest.bytes)})"
    if percent and largest.share * 100 >= percent and largest.bytes >= min_bytes:
        return True, f"auto: the batch is {share}, at least {percent}%"
    return False, f"auto: the largest batch is {share}" + (f", under {percent}%" if percent else "")


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
