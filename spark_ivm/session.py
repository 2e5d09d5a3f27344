"""A local SparkSession with Delta Lake, set up the way spark_ivm expects.

    from spark_ivm.session import session
    spark = session()                         # warehouse ./spark-warehouse
    spark = session("/data/wh", conf={"spark.sql.shuffle.partitions": "4"})

The catalog is a Hive metastore in embedded Derby kept inside the warehouse
(``<warehouse>/metastore_db``), so tables and views created by one process are
visible to a later process that uses the same warehouse.  Embedded Derby allows
only ONE process at a time per warehouse; :func:`session` checks this up front
and raises :class:`WarehouseInUseError` instead of failing later deep inside Hive.

Delta Lake jars are taken, in this order, from ``$SPARK_IVM_JARS``, from
``.cache/jars`` in the project folder (filled by ``./build.sh setup``), or, as a
last resort, resolved by Spark through ``configure_spark_with_delta_pip``
(which needs full Maven access at session start).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
import types
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

__all__ = [
    "JARS_ENV",
    "WarehouseInUseError",
    "default_conf",
    "delta_jars",
    "jars_dir",
    "session",
]

#: Environment variable naming a folder of Delta Lake jars (overrides .cache/jars).
JARS_ENV = "SPARK_IVM_JARS"

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JARS_DIR = PROJECT_ROOT / ".cache" / "jars"
DEFAULT_WAREHOUSE = "spark-warehouse"

# Settings that do not depend on the warehouse location.
_BASE_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    # Spark's 1g default is too small to broadcast the maps of multi-way joins.
    "spark.driver.memory": "4g",
    # Delta's default of 50 snapshot partitions makes rebuilding a small
    # table's state run 50 tasks where 2 do.
    "spark.databricks.delta.snapshotPartitions": "2",
    # Spark caches the classes it compiles for whole-stage code by their source, 100 by default. A view's
    # refreshes run the same few hundred plans again and again (their literals mostly the same); with 100
    # the cache is thrashed, and every refresh generates, compiles and JIT-compiles its code anew.
    "spark.sql.codegen.cache.maxEntries": "2000",
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "true",
    "spark.databricks.delta.properties.defaults.enableDeletionVectors": "true",
    "spark.sql.catalogImplementation": "hive",
}

# Used from JVM start until setLogLevel(log_level) right after.  The root level
# stays WARN: Spark prints a "Setting default log level" banner in PySpark when the
# root level differs from WARN.  Known-noisy loggers are set to ERROR.
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
logger.hivemeta.name = org.apache.hadoop.hive
logger.hivemeta.level = error
logger.hiveext.name = org.apache.spark.sql.hive.HiveExternalCatalog
logger.hiveext.level = error
# spark_ivm checkpoints each refresh's batch locally on purpose; the lineage warning is noise.
logger.checkpointed.name = org.apache.spark.rdd.MapPartitionsRDD
logger.checkpointed.level = error
logger.datanucleus.name = DataNucleus
logger.datanucleus.level = error
# A sum over the rows above or below an uncorrelated value is a running sum over one sorted partition on
# purpose (it replaces a join of every pair); the single-partition warning is noise.
logger.window.name = org.apache.spark.sql.execution.window.WindowExec
logger.window.level = error
"""


class WarehouseInUseError(RuntimeError):
    """Another process has the warehouse's embedded Derby metastore open."""


def jars_dir() -> Path | None:
    """The folder of Delta Lake jars to use, or None if there is none."""
    env = os.environ.get(JARS_ENV)
    if env:
        path = Path(env).expanduser().resolve()
        if not path.is_dir():
            raise FileNotFoundError(f"${JARS_ENV} points to {path}, which is not a folder")
        return path
    if DEFAULT_JARS_DIR.is_dir() and any(DEFAULT_JARS_DIR.glob("*.jar")):
        return DEFAULT_JARS_DIR
    return None


def delta_jars() -> list[str]:
    """Absolute paths of the jars in :func:`jars_dir` (empty if none)."""
    folder = jars_dir()
    if folder is None:
        return []
    return sorted(str(p) for p in folder.glob("*.jar"))


def _log4j2_file() -> Path:
    text = _LOG4J2
    digest = hashlib.sha1(text.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"spark_ivm-log4j2-{digest}.properties"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def _java_property(name: str, value: str) -> str:
    """``-Dname=value`` for spark.driver.extraJavaOptions (which Spark splits on
    whitespace, honouring double quotes)."""
    opt = f"-D{name}={value}"
    if any(c.isspace() for c in opt):
        opt = '"' + opt.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return opt


def default_conf(warehouse: str | os.PathLike[str]) -> dict[str, str]:
    """The Spark settings :func:`session` uses for ``warehouse`` (an absolute path)."""
    wh = Path(warehouse)
    conf = dict(_BASE_CONF)
    conf["spark.sql.warehouse.dir"] = str(wh)
    # Python workers (UDFs, createDataFrame from Python data) must run this
    # interpreter, not whatever `python3` is first on PATH.
    conf["spark.pyspark.python"] = sys.executable
    # Embedded Derby metastore inside the warehouse; derby.log goes there too.
    conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = (
        f"jdbc:derby:;databaseName={wh / 'metastore_db'};create=true"
    )
    # Hive otherwise leaves a <uuid>_resources folder in /tmp for every session.
    conf["spark.hadoop.hive.downloaded.resources.dir"] = str(wh / ".hive" / "resources")
    conf["spark.hadoop.hive.exec.local.scratchdir"] = str(wh / ".hive" / "scratch")
    conf["spark.driver.extraJavaOptions"] = " ".join(
        [
            _java_property("derby.system.home", str(wh)),
            _java_property("log4j2.configurationFile", _log4j2_file().as_uri()),
        ]
    )
    return conf


def _conf_key(name: str) -> str:
    """Keyword name -> Spark key: dotted keys pass through; ``sql_shuffle_partitions``
    becomes ``spark.sql.shuffle.partitions``."""
    if "." in name:
        return name
    return "spark." + name.replace("_", ".")


def _descends_from(pid: int, ancestor: int) -> bool:
    for _ in range(64):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


def _check_metastore_free(warehouse: Path) -> None:
    """Raise WarehouseInUseError if another process holds the Derby metastore.

    Derby keeps an exclusive POSIX lock on metastore_db/dbex.lck while the database
    is booted.  A lock held by a JVM this process started (a stopped session whose
    JVM is still running) is fine: that JVM can reopen its own database.
    """
    lock = warehouse / "metastore_db" / "dbex.lck"
    if not lock.exists():
        return
    try:
        import fcntl
    except ImportError:  # not POSIX: let Derby report it
        return
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _lock_holder(lock)
            if holder is not None and _descends_from(holder, os.getpid()):
                return
            who = f" (pid {holder})" if holder else ""
            raise WarehouseInUseError(
                f"the warehouse {warehouse} is in use by another Spark process{who}; "
                "its embedded Derby metastore can be opened by one process at a time"
            ) from None
        else:
            fcntl.lockf(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _lock_holder(path: Path) -> int | None:
    """PID holding a POSIX lock on ``path``, from /proc/locks (Linux), else None."""
    try:
        st = path.stat()
        locks = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in locks:
        fields = line.split()
        if "->" in fields:  # a blocked waiter, not the holder
            continue
        if len(fields) >= 6 and fields[5] == want:
            try:
                return int(fields[4])
            except ValueError:
                return None
    return None


def _enable_hook(spark: SparkSession) -> None:
    """Turn on the IVM statements; idempotent, as it also runs when a running session is returned."""
    from spark_ivm.runtime import enable

    enable(spark)


def session(
    warehouse: str | os.PathLike[str] | None = None,
    *,
    conf: Mapping[str, Any] | None = None,
    master: str = "local[2]",
    app_name: str = "spark_ivm",
    log_level: str = "WARN",
    **kwconf: Any,
) -> SparkSession:
    """Start (or return the running) local SparkSession with Delta Lake.

    ``warehouse`` defaults to ``./spark-warehouse`` (made absolute).  Settings
    override the defaults, later ones winning: ``conf={"spark.x.y": v}``, then
    keywords — either dotted keys via ``**{"spark.x.y": v}`` or simple names
    where ``_`` stands for ``.`` and ``spark.`` is implied
    (``sql_shuffle_partitions=4`` is ``spark.sql.shuffle.partitions``).

    Static settings (jars, warehouse, catalog) cannot change while a session is
    running: if one is already active it is returned as is, after a warning if
    it uses a different warehouse.
    """
    wh = Path(warehouse if warehouse is not None else DEFAULT_WAREHOUSE).expanduser().resolve()

    settings = default_conf(wh)
    user: dict[str, str] = {}
    for key, value in (conf or {}).items():
        user[key] = str(value)
    for key, value in kwconf.items():
        user[_conf_key(key)] = str(value)
    if "spark.driver.extraJavaOptions" in user:
        user["spark.driver.extraJavaOptions"] = (
            settings["spark.driver.extraJavaOptions"] + " " + user["spark.driver.extraJavaOptions"]
        )
    settings.update(user)

    active = SparkSession.getActiveSession()
    if active is not None:
        current = active.conf.get("spark.sql.warehouse.dir", None) or ""
        if re.sub(r"^file:/*", "/", current).rstrip("/") != str(wh):
            warnings.warn(
                f"a SparkSession with warehouse {current} is already running; "
                f"returning it instead of one for {wh}",
                stacklevel=2,
            )
        _enable_hook(active)  # the hook must be idempotent
        return active

    wh.mkdir(parents=True, exist_ok=True)
    if settings.get("spark.sql.catalogImplementation") == "hive":
        _check_metastore_free(wh)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # PySpark starts Python workers with $PYSPARK_PYTHON (default: `python3` on PATH,
    # which lacks this project's packages); the spark.pyspark.python setting alone
    # does not reach it when the JVM is started from Python.
    os.environ.setdefault("PYSPARK_PYTHON", settings["spark.pyspark.python"])

    builder = SparkSession.builder.master(master).appName(app_name)
    jars = delta_jars()
    if jars:
        existing = settings.get("spark.jars")
        settings["spark.jars"] = ",".join(jars + ([existing] if existing else []))
    for key, value in settings.items():
        builder = builder.config(key, value)
    if not jars:
        from delta import configure_spark_with_delta_pip

        builder = configure_spark_with_delta_pip(builder)

    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level.upper())

    _enable_hook(spark)
    return spark


# `spark_ivm.session` is both this module and, in spark_ivm/__init__.py, a function.
# Importing this module rebinds the package attribute to the module, so make the
# module callable: `spark_ivm.session(...)` then works whichever one it is.
class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> SparkSession:
        return session(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
