"""Materialization policy: which deltas get auxiliary maps and how each map is maintained.

The compiler (mechanism) asks these questions; the answers live here so that a cost model can
replace them without touching the viewlet transform.

Every tunable threshold is a module constant declared with `_threshold`, which records its type, default
and meaning in THRESHOLDS (listed in docs/design.md, "Thresholds"); the comment above it says why it is
what it is. The measurements behind the values are in docs/performance.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Threshold:
    """A tunable threshold: the module constant `name` of this module, its type, default and meaning."""
    name: str
    type: type
    default: int
    doc: str


THRESHOLDS: dict[str, Threshold] = {}


def _threshold(name: str, default: int, doc: str) -> int:
    """Record a threshold in THRESHOLDS; its default is the value of the module constant of that name."""
    THRESHOLDS[name] = Threshold(name, type(default), default, doc)
    return default


# On Spark every statement is a join planned and run per refresh, so a refresh's time grows with the
# statements: TPC-H Q8 at unlimited depth has 685 statements over 166 maps, Q5, Q7 and Q9 130–154.
MAX_TRIGGER_STATEMENTS = _threshold(
    "MAX_TRIGGER_STATEMENTS", 160,
    "A view created without a depth gets the deepest plan with at most this many trigger statements.")

# A nested aggregate's delta inlines the nested value before and after the batch at every use: TPC-H
# Q15's lineitem delta (the global MAX of per-supplier revenue, compared with every supplier's) has
# 3,969 nodes and became a statement too large for Spark's analyzer; no other TPC-H delta has more than 884.
MAX_DELTA_NODES = _threshold(
    "MAX_DELTA_NODES", 2000,
    "A delta with more nodes is replaced by re-evaluating its map from the maps below it and the batch.")


def key_filters_in_maps(new_maps_with: int, new_maps_without: int) -> bool:
    """Whether a delta's maps take in the filters of their keys by constants (TPC-H Q3's orders by date,
    filtered before the date), given the maps not declared yet that the delta needs with and without
    them. A map then holds only the rows its statements keep, unless that takes more maps: the terms of an
    OR filter one key each their own way (TPC-H Q7's two pairs of nations), and without the filters one
    map serves them all."""
    return new_maps_with <= new_maps_without


# A map extracted from a delta holds a sum over a product of relations by some keys. It pays where it is
# much smaller than the relations it reads: a statement then reads its few rows instead of joining and
# summing theirs. A map about as large as its relations (a relation by its own key, or a join by the keys
# of its larger side, as several maps of TPC-H Q5, Q7 and Q9: a row per lineitem) saves a statement little
# reading, and costs store and upkeep at every batch of each relation.
MAP_ROWS_PERCENT_OF_SOURCE = _threshold(
    "MAP_ROWS_PERCENT_OF_SOURCE", 50,
    "A map extracted from a delta is kept only when its estimated rows are at most this percent of the "
    "rows of the relations it reads together (when their statistics are known); otherwise the statements "
    "that would read it read the relations.")


def materializes(estimated_rows: int | None, source_rows: int | None) -> bool:
    """Whether a map extracted from a delta, of about `estimated_rows` rows over relations of `source_rows`
    rows together, is kept (None: unknown, and kept, as without statistics)."""
    return (estimated_rows is None or source_rows is None
            or 100 * estimated_rows <= MAP_ROWS_PERCENT_OF_SOURCE * source_rows)


@dataclass(frozen=True)
class Policy:
    """depth: None = full higher-order IVM; 1 = classic first-order IVM (deltas read base tables);
    0 = re-evaluate the view's maps on every batch. max_delta_nodes: see `reevaluates`. statistics: the
    relations' statistics (compiler.estimate.Statistics), by which maps extracted from deltas are kept or
    left to the relations (see `materializes`); None keeps every map the depth allows."""

    depth: int | None = None
    max_delta_nodes: int = MAX_DELTA_NODES
    statistics: object | None = None

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


# TPC-H Q5's delta for orders needs Σ_nation customer(c, nation) · lineitem(o, s) · supplier(s, nation) · …,
# keyed by c and o: as one map that is every (customer, lineitem) pair of a nation, far larger than both
# relations, and each changed customer updates all the lineitems of its nation. Keyed by the nation as
# well, it is three maps no larger than their relations, joined on the nation by the trigger. A variable
# that only joins two relations is usually a key and its foreign key (an order and its lineitems), whose
# join is no larger than the larger relation: splitting there would only add rows.
SPLIT_MIN_RELATIONS = _threshold(
    "SPLIT_MIN_RELATIONS", 3,
    "A map is split at a summed variable that joins at least this many of its relations (when the split "
    "leaves two or more maps with keys of their own).")


def splits_map_at(relations_joined: int, keyed_parts: int) -> bool:
    """Whether a map is split at a summed variable that joins `relations_joined` of its relations into
    parts of which `keyed_parts` hold keys of the map. More keyed parts never turn a split down, so the
    compiler asks first with as many keyed parts as the map has factors, before it computes the parts."""
    return relations_joined >= SPLIT_MIN_RELATIONS and keyed_parts >= 2


# Each scan of a Delta table costs its own file listing jobs, whatever the table's size, and the store's
# files mix all maps, so every reference scans them all anyway: one read and one copy cost less from two
# references on.
SHARED_STORE_READ_MIN_REFERENCES = _threshold(
    "SHARED_STORE_READ_MIN_REFERENCES", 2,
    "A refresh whose statements refer to maps at least this many times reads the map store once, into a "
    "checkpoint (and CREATE so reads a source its maps refer to this often).")


def reads_store_once(map_references: int) -> bool:
    """Whether a refresh whose statements refer to maps `map_references` times reads the store once."""
    return map_references >= SHARED_STORE_READ_MIN_REFERENCES


# The copy of the store keeps only the map rows whose fixed keys are among the batch's own values, not
# all of their range: keys spread over the whole map (Q17's parts of new lineitems, Q10's customers of new
# orders) make a range that skips nothing, and the copy is then most of the map although few of its rows
# can join. The values are collected to the driver (one Spark job per batch, none for a batch the driver
# holds) and tested there, by the Delta log's file statistics and the driver's own read of the store.
# Only up to this many values per batch column, only of a batch small enough that collecting its values
# costs little next to the copy (any batch the driver holds), and not of an integer column whose range is
# dense: new orders have consecutive keys, and their range already holds little beside them.
LISTED_KEY_VALUES_MAX = _threshold(
    "LISTED_KEY_VALUES_MAX", 100_000,
    "The store copy of a refresh lists at most this many of a batch column's values (else it keeps their range).")
LISTED_BATCH_ROWS_MAX = _threshold(
    "LISTED_BATCH_ROWS_MAX", 50_000,
    "Only a batch of at most this many rows, or one the driver holds, has its columns' values collected to "
    "bound the store copy.")
# Where Spark copies the store, a list of values is written into the condition's SQL as literals, which
# Spark tests with a hash set (a subquery instead made one broadcast join per key test, and a refresh with
# many of them ran out of execution memory); parsing and planning grow with the literals, so a longer list
# is written as its range.
SQL_KEY_VALUES_MAX = _threshold(
    "SQL_KEY_VALUES_MAX", 10_000,
    "A condition's list of more key values than this is written into Spark SQL as their range.")
DENSE_RANGE_PER_ROW = _threshold(
    "DENSE_RANGE_PER_ROW", 8,
    "An integer batch column whose values span at most this many integers per batch row is bounded by "
    "its range, not its values.")


def lists_batch_values(batch_rows: int, span: int | None, held: bool = False) -> bool:
    """Whether the distinct values of a batch column are collected to bound the store copy, for a batch of
    `batch_rows` rows whose values in the column span `span` integers (None: not an integer column); held:
    the driver holds the batch, so collecting them costs no job."""
    return (0 < batch_rows and (held or batch_rows <= LISTED_BATCH_ROWS_MAX)
            and (span is None or span > DENSE_RANGE_PER_ROW * batch_rows))


# A key a batch fixes may be narrowed further by another map of the same product (analysis.map_key_links):
# TPC-H Q17's parts of one brand and container among the parts a lineitem batch touches leave a few parts'
# rows of the map of quantities per part, of millions. The driver reads the other map's keys from the
# files that can hold them; that pays only where they are few next to the files the copy would read
# without them (in Q9, Q18 and Q21 the other maps hold most of the batch's keys: reading them saves nothing).
NARROWING_BYTES_RATIO = _threshold(
    "NARROWING_BYTES_RATIO", 16,
    "A key a batch fixes is narrowed by another map's keys only where the files that can hold this map's "
    "rows weigh more than this many times those that can hold the other's.")


def narrows_key(other_bytes: int | None, own_bytes: int | None) -> bool:
    """Whether a map's key the batch fixes is also bounded by another map's keys, read by the driver from
    `other_bytes` of files, where this map's rows lie in `own_bytes` of files (None: not known)."""
    return other_bytes is not None and own_bytes is not None and other_bytes * NARROWING_BYTES_RATIO < own_bytes


# For the same reason, creating a view reads a source table once, into a checkpoint its maps' queries
# then scan, when they refer to it at least twice (a view with three maps over a three-table join scans
# its sources nine times). Only up to a size: the checkpoint is a copy of the table in the executors'
# memory and disk, and from some size on one more scan costs less than a copy.
SHARED_SOURCE_READ_MAX_BYTES = _threshold(
    "SHARED_SOURCE_READ_MAX_BYTES", 32 * 1024 * 1024,
    "CREATE reads a source table its maps refer to twice or more once, into a checkpoint, when it holds at "
    "most this many bytes on disk.")
# Nor below a size: the checkpoint is a Spark job of its own, and a few scans of a small file in the maps'
# query cost less.
SHARED_SOURCE_READ_MIN_BYTES = _threshold(
    "SHARED_SOURCE_READ_MIN_BYTES", 1024 * 1024,
    "CREATE reads a source table of fewer bytes on disk where it is, however often its maps refer to it.")


def reads_source_once(references: int, size_bytes: int) -> bool:
    """Whether creating a view whose maps refer `references` times to a source table of `size_bytes`
    reads it once."""
    return (references >= SHARED_STORE_READ_MIN_REFERENCES
            and SHARED_SOURCE_READ_MIN_BYTES <= size_bytes <= SHARED_SOURCE_READ_MAX_BYTES)


# The rows of a refresh are the size of its batches, not of the data.
DEFAULT_CHECKPOINT_PARTITIONS = _threshold(
    "DEFAULT_CHECKPOINT_PARTITIONS", 8,
    "A refresh's checkpointed rows are read in this many partitions when spark.sql.shuffle.partitions is "
    "not a number (e.g. auto).")


def checkpoint_partitions(shuffle_partitions: str | None) -> int:
    """How many partitions a refresh's checkpointed rows are read in: as many as a shuffle makes, the
    parallelism the session is set up for."""
    try:
        return max(1, int(shuffle_partitions))
    except (TypeError, ValueError):
        return DEFAULT_CHECKPOINT_PARTITIONS


# A store is built and compacted in key order (see mapstore.key_order), so that Delta can skip the files
# of keys a refresh does not touch. Smaller files skip more precisely but each file read costs a little.
STORE_FILE_ROWS = _threshold(
    "STORE_FILE_ROWS", 100_000,
    "A map store is written in files of at most this many rows when it is built or compacted.")
# A refresh then reads the store without Delta rebuilding its state of each new version (a few Spark
# jobs); each file adds its statistics to every commit's checksum.
STORE_LISTED_FILES_MAX = _threshold(
    "STORE_LISTED_FILES_MAX", 10_000,
    "A map store's Delta checksum lists its files when it has at most this many (Delta's default is 50).")

# Maps that sum different values over one product per the same keys (a view's SUMs and COUNTs; the sums a
# join's triggers read) hold the same keys; sharing their store rows (see mapstore) makes the store, and
# what a refresh or a compaction reads of it, one row per key of them instead of one per map, each row a
# value column wider. False: one map per row, as stores written before this was chosen.
MAPS_SHARE_ROWS = True

# Building a store (CREATE, a full refresh) and compacting all of it shuffle every row it holds. At the
# session's shuffle partitions (2 in a local session, which suits a refresh's small batches) each task of a
# large view's build held tens of millions of rows and the 4 GB driver ran out of heap (TPC-H Q12 at SF 10).
# Such a write gets a partition per STORE_WRITE_PARTITION_BYTES of what it reads, and the rows it writes are
# then range-partitioned by map and key, so that each task still writes a narrow range of keys (see
# mapstore.key_order): sorted only within many hash partitions, every task would write a file holding
# a part of every key range, and a refresh reading a few keys would open one file per task.
STORE_WRITE_PARTITION_BYTES = _threshold(
    "STORE_WRITE_PARTITION_BYTES", 128 * 1024 * 1024,
    "Building a map store or compacting all of it uses a shuffle partition per this many bytes (on disk) "
    "of the tables it reads, when that is more than the session's shuffle partitions.")
STORE_WRITE_MAX_PARTITIONS = _threshold(
    "STORE_WRITE_MAX_PARTITIONS", 2000,
    "At most this many shuffle partitions for building or compacting a map store.")


def store_write_partitions(read_bytes: int | None, shuffle_partitions: str | None) -> int | None:
    """The shuffle partitions of a store build or whole-store compaction that reads `read_bytes` (on
    disk); None where the session's own number (`shuffle_partitions`) is as many."""
    wanted = min(STORE_WRITE_MAX_PARTITIONS, -(-(read_bytes or 0) // STORE_WRITE_PARTITION_BYTES))
    return wanted if wanted > checkpoint_partitions(shuffle_partitions) else None


# Every spark.ivm.compactEvery-th refresh compacts the store. Most compactions rewrite only its small files
# (fewer than STORE_FILE_ROWS rows: what earlier such compactions wrote, the last file of a build) and the
# files the refreshes appended since the last compaction (of any size), summed per key with the refresh's
# increments, so that they cost what the changes do, not what the store holds (and a refresh compacts
# before its turn where the appended files would otherwise outgrow DRIVER_WRITE_ROWS, see
# compaction.compacts_early). Rows of a key whose values cancel out across a small file and a full one stay
# until a compaction of the whole store: every WHOLE_STORE_COMPACTION_EVERY-th compaction, or one whose
# small files hold at least WHOLE_STORE_COMPACTION_PERCENT of the store's rows.
WHOLE_STORE_COMPACTION_EVERY = _threshold(
    "WHOLE_STORE_COMPACTION_EVERY", 8,
    "Every this many compactions of a map store, one rewrites the whole store instead of its small files.")
WHOLE_STORE_COMPACTION_PERCENT = _threshold(
    "WHOLE_STORE_COMPACTION_PERCENT", 25,
    "A compaction rewrites the whole map store when its small files hold at least this percent of its rows.")


def compacts_whole_store(small_rows: int, store_rows: int, compaction: int | None) -> bool:
    """Whether the store's compaction number `compaction` (counted from 1; None: one before its turn, see
    compaction.compacts_early) rewrites all its files, when the files it would rewrite otherwise hold
    small_rows of its store_rows rows."""
    return (compaction is not None and compaction % max(1, WHOLE_STORE_COMPACTION_EVERY) == 0) \
        or small_rows * 100 >= WHOLE_STORE_COMPACTION_PERCENT * store_rows


# With spark.ivm.codegen = auto (not the default, see config.CODEGEN). The tables a refresh may scan beyond
# its batches are its map store and the source tables its statements read. A refresh of a large view plans
# many small stages, and compiling their code can be the largest share of its time; per row, compiled code
# is faster, so the bound sits between a small store that refreshed faster interpreted and a larger one
# that refreshed faster compiled (docs/performance.md). Spark's cache of compiled code is left at its
# default: what a larger one costs in memory over a long session is not known.
INTERPRETED_MAX_BYTES = _threshold(
    "INTERPRETED_MAX_BYTES", 16 * 1024 * 1024,
    "Under spark.ivm.codegen = auto a refresh runs its Spark plans interpreted when the Delta tables it may "
    "scan hold at most this many bytes.")


def runs_interpreted(bytes_scanned: int | None) -> bool:
    """Whether a refresh that may scan `bytes_scanned` bytes of Delta tables (None: not known) runs its
    plans interpreted."""
    return bytes_scanned is not None and bytes_scanned <= INTERPRETED_MAX_BYTES


# A batch that small is small next to the maps it joins, so every task gets a copy instead of the maps
# being shuffled to meet it.
BROADCAST_BATCH_ROWS = _threshold(
    "BROADCAST_BATCH_ROWS", 200_000,
    "A consolidated batch of at most this many rows is broadcast to the joins that read it.")

# A batch read by the driver costs what reading its files and handing the rows to Spark cost; read by Spark,
# it costs planning the change data feed (Delta lists the commits' files) and a job per scan. Spark keeps
# a relation handed to it as rows in the plan itself up to spark.sql.execution.arrow.localRelationThreshold
# (48 MB of Arrow data by default), which a few megabytes of Parquet stay under.
DRIVER_BATCH_BYTES = _threshold(
    "DRIVER_BATCH_BYTES", 4 << 20,
    "A batch whose change files take at most this many bytes is read by the driver, not by Spark.")

# The rows of the store a refresh copies (see runtime/run.py, read_store_once) read by the driver: pyarrow
# reads the files that can hold them (their statistics say) and keeps the rows the copy's condition holds
# for, where Spark's copy costs a job to choose the files and one to filter them. The files bound the read's
# time; the rows kept bound what the driver holds and hands to Spark, and past them the read stops and
# Spark copies instead. That fallback costs many times the driver's read where the statements would have
# run in DuckDB (Spark then runs them over the copy), so the bound leaves room above what a large view's
# refresh at a large batch reads (TPC-H Q9 at SF 10: up to about a million rows between compactions).
DRIVER_STORE_BYTES = _threshold(
    "DRIVER_STORE_BYTES", 512 << 20,
    "The store's rows a refresh copies are read by the driver where the files that can hold them take at "
    "most this many bytes.")
DRIVER_STORE_ROWS = _threshold(
    "DRIVER_STORE_ROWS", 2_000_000,
    "The store's rows a refresh copies are read by the driver only where they are at most this many.")
# Staged rows the driver computed (in DuckDB) are appended from there, as one Parquet file it writes, where
# Spark would first copy them into a checkpoint (a job), then write them (a job, and Delta's statistics) and
# the views would read them back (a job). They are in the driver's memory already; the bound keeps the one
# file and the views' local copy of them in reason.
DRIVER_WRITE_ROWS = _threshold(
    "DRIVER_WRITE_ROWS", 1_000_000,
    "A refresh appends the staged rows the driver computed from the driver where they are at most this many, "
    "and compacts the store's appended and small files there where they and the staged rows hold at most "
    "this many, before the compaction's turn where another such refresh would take them past it.")
# See runtime/local_sql.py: statements whose every input the driver holds run in DuckDB there. Bounded, so
# that a statement whose joins multiply its rows fails there and runs in Spark instead.
DRIVER_STATEMENTS_MEMORY_MB = _threshold(
    "DRIVER_STATEMENTS_MEMORY_MB", 1024,
    "The memory DuckDB may use on the driver for the statements of one refresh (beyond it, Spark computes them).")

# See runtime/run.py: "at once". Each materialized intermediate result costs a Spark job of its own: a light
# view's refresh is mostly such jobs. A statement that re-evaluates reads its stages several times, and
# in one query Spark would compute a stage again at every read; many statements make one plan that
# Spark takes long to plan.
AT_ONCE_MAX_STATEMENTS = _threshold(
    "AT_ONCE_MAX_STATEMENTS", 24,
    "Under spark.ivm.plan = auto a refresh computes its increments in one query when it runs at most this "
    "many trigger statements, none of them re-evaluating.")


def plans_at_once(statements) -> bool:
    """Whether a refresh running these trigger statements computes them in one query."""
    return (len(statements) <= AT_ONCE_MAX_STATEMENTS
            and all(s.op == "+=" and s.reevaluated_keys is None for s in statements))


# See runtime/refresh.py: _materialize. A plan starts all its broadcasts at once, and Spark gives each
# spark.sql.broadcastTimeout to finish: a union of a few hundred trigger statements (a store shared
# by dozens of views, all with work) queues its broadcasts past that on a small cluster, or runs the driver
# out of memory holding them. Views past the bound are computed in groups, a checkpoint (one job) each.
PLAN_MAX_STATEMENTS = _threshold(
    "PLAN_MAX_STATEMENTS", 64,
    "One Spark query computes the increments of at most this many trigger statements; the views of a "
    "refresh with more are computed in groups, each into a checkpoint of its own.")


def plan_groups(statements: list[int]) -> list[list[int]]:
    """The parts of a refresh (their counts of statements) in groups of at most PLAN_MAX_STATEMENTS
    statements, in order; a part with more is a group alone.

    >>> plan_groups([30, 30, 10, 50, 70, 1])
    [[0, 1], [2, 3], [4], [5]]
    """
    groups: list[list[int]] = []
    total = PLAN_MAX_STATEMENTS + 1
    for i, n in enumerate(statements):
        if total + n > PLAN_MAX_STATEMENTS:
            groups.append([])
            total = 0
        groups[-1].append(i)
        total += n
    return groups


# See config.INLINE_ROWS and runtime/viewsql.py. Reading a Delta table's new version costs a few Spark
# jobs; reading literals none. The metastore limits a view's text: embedded Derby stores it in a column of
# at most 32,700 characters, and a longer text fails there, slowly.
INLINE_SQL_CHARS_MAX = _threshold(
    "INLINE_SQL_CHARS_MAX", 30_000,
    "A view holds its rows (and its maps' rows) as literals only while its SQL text stays within this many "
    "characters (and spark.ivm.inlineRows rows).")

# See runtime/top_rows.py. A larger buffer outlasts more changes to the leading groups before the store is
# read whole again, but every refresh writes it into the view's definition (INLINE_SQL_CHARS_MAX trims it).
TOP_GROUPS_KEPT = _threshold(
    "TOP_GROUPS_KEPT", 200,
    "A view of the first rows of an ordering (ORDER BY … LIMIT) carries the maps of at most this many of its "
    "leading groups, so that a refresh reads from the store only the groups it changed.")

# Reading a view's changed groups at their keys costs a Spark job whatever the store's size; reading all
# its groups grows with the store. In small stores the two cost the same, and the buffer's upkeep (its
# literals, a job to collect the increments) tips the balance.
TOP_BUFFER_STORE_BYTES = _threshold(
    "TOP_BUFFER_STORE_BYTES", 64 * 1024 * 1024,
    "A view of the first rows of an ordering keeps the buffer of its leading groups (TOP_GROUPS_KEPT) when "
    "its map store holds at least this many bytes.")


def keeps_leading_groups(store_bytes: int | None) -> bool:
    """Whether a view of an ordering's first rows over a map store of this size (None: unknown) keeps the
    buffer of its leading groups (see runtime/top_rows.py)."""
    return store_bytes is not None and store_bytes >= TOP_BUFFER_STORE_BYTES

# Instead of computing the increments into a checkpoint that the append then reads, when every view a
# refresh refreshes holds its maps inline: the driver then has the increments of those maps to add to the
# literals, with no further job. More rows are computed again into a checkpoint.
COLLECTED_ROWS_MAX = _threshold(
    "COLLECTED_ROWS_MAX", 50_000,
    "A refresh of views that all hold their maps inline collects at most this many increment rows to the "
    "driver and appends them from there.")


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
FULL_REFRESH_PERCENT = _threshold(
    "FULL_REFRESH_PERCENT", 100,
    "The default of spark.ivm.fullRefreshPercent: the share of its source's bytes, in percent, from which a "
    "batch has the maps recomputed under the auto refresh policy.")
FULL_REFRESH_MIN_BYTES = _threshold(
    "FULL_REFRESH_MIN_BYTES", 16 * 1024 * 1024,
    "Under the auto refresh policy only a batch of at least this many bytes has the maps recomputed.")


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


# Limits of the front end and the runtime. They choose no plan, but they are tunable numbers all the same,
# so they are declared here with the others; each module reads its own at call time, as heuristics.NAME,
# so that patching the constant here changes what it does.

# Subqueries in expressions (scalar, IN, EXISTS) nested deeper than this are refused: the delta of each level
# holds the deltas of every level inside it, so that compiling takes several times longer per level.
MAX_SUBQUERY_LEVELS = _threshold(
    "MAX_SUBQUERY_LEVELS", 4,
    "CREATE refuses subqueries in expressions (scalar, IN, EXISTS) nested more than this many levels deep.")

# An OR of n conditions by inclusion–exclusion has 2^n − 1 terms: longer ORs of conditions that read no
# relation become one test instead (see frontend/values.py, disjunction_of).
MOST_DISJUNCTS = _threshold(
    "MOST_DISJUNCTS", 4,
    "An OR of at most this many conditions is expanded by inclusion–exclusion; of more, those that read no "
    "relation become one test and more than this many that read relations are refused.")

# Chains of + - || of at most this many terms keep the nesting SQL gives them, (a + b) + c; longer ones are
# nested as balanced trees, so that an expression of a thousand terms is ten levels deep, not a thousand
# (every pass over the calculus, compiling, evaluating, printing, recurses once per level).
LONGEST_NESTED_CHAIN = _threshold(
    "LONGEST_NESTED_CHAIN", 16,
    "A chain of additions, subtractions or string concatenations of at most this many terms keeps the "
    "nesting SQL gives it; a longer one becomes a balanced tree.")

# Delta refuses a refresh's commit to the map store when another refresh committed to it since the version
# the refresh read; the refresh is then computed again from the store as the other left it. Each attempt
# costs a whole refresh, so past a few the caller is asked to try again instead.
ATTEMPTS = _threshold(
    "ATTEMPTS", 3,
    "A refresh whose commit to the map store loses a race with another refresh is computed again, up to this "
    "many attempts in all, then fails asking to try again.")

# Each look-up (a table's schema, its Delta log) mostly waits on the driver.
LOOKUP_THREADS = _threshold(
    "LOOKUP_THREADS", 4,
    "A refresh or CREATE runs at most this many catalog and Delta log look-ups at once, each in a thread.")

# A batch's commits are read again for the add actions of the files they remove (see FILE_LOOKBACK_VERSIONS).
CACHED_COMMITS = _threshold(
    "CACHED_COMMITS", 256,
    "A session keeps the parsed actions of at most this many Delta commits, dropping the least recently read.")

# A remove action carries only its file's row count; the ranges of its rows are in the add action of the
# commit that added it, which may be anywhere in the table's history. Each commit looked at is one more read
# of the log; a file not found leaves the batch's ranges unknown, and the refresh reads more of the store.
FILE_LOOKBACK_VERSIONS = _threshold(
    "FILE_LOOKBACK_VERSIONS", 20,
    "The add action of a file a commit removes is looked for in at most this many commits before that one "
    "(to learn the ranges of its rows).")

# Writing a checkpoint of a Delta log costs the commit that writes it a few Spark jobs; a map store is
# committed to by every refresh, so one refresh in this many pays them.
STORE_CHECKPOINT_INTERVAL = _threshold(
    "STORE_CHECKPOINT_INTERVAL", 100,
    "A map store's Delta log gets a checkpoint every this many commits (Delta's default is 10).")
