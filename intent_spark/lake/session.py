"""The one place that builds a SparkSession.

Local runs get an embedded default: ``local[*]``, Delta configured from the jars that
``make setup`` cached in ``.jars/``, UTC everywhere, timestamps written as
``TIMESTAMP_MICROS``. Under ``spark-submit`` the launcher's settings win: we only fill
in what it left unset, so a cluster profile or ``--conf`` flag overrides anything here.

Spark's own console output (its start-up banner, its warnings) goes to a log file, not the
terminal, so a command's own lines and one-line errors stand alone; ``--verbose`` (the
environment variable ``INTENT_VERBOSE=1``) keeps it on the terminal.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from intent_spark.core.conf import CONF_DIR, REPO_ROOT, closest, load_yaml
from intent_spark.core.errors import ConfError, IntentError
from intent_spark.lake.spark_line import ANSI_CONF, delta_artifact

JARS_DIR = Path(os.environ.get("INTENT_JARS_DIR", REPO_ROOT / ".jars"))

BASE_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "true",
    "spark.databricks.delta.schema.autoMerge.enabled": "false",
    # PySpark records the Python call site of every Column method for its error context: about
    # eight JVM round trips and a failed `import IPython` each. Our errors name the stage, table
    # and field; without it an `intent run` of 3,000 events takes ~8% less CPU.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    **ANSI_CONF,
}

LOCAL_CONF: dict[str, str] = {
    "spark.master": "local[*]",
    "spark.driver.memory": "4g",
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.enabled": "false",
    # Delta rebuilds a table's state in 50 tasks by default; the embedded lake's logs are small
    # (verify of a 20k-event dataset: 27 s with 50, 13.5 s with 2).
    "spark.databricks.delta.snapshotPartitions": "2",
}


SPARK_PREFIX = "spark."
LOG_DIR_ENV = "INTENT_LOG_DIR"
VERBOSE_ENV = "INTENT_VERBOSE"
# the profile a command uses when it names none (the tests set ``small``)
PROFILE_ENV = "INTENT_SPARK_PROFILE"
# Spark's console log settings, except that everything goes to one file.
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
"""


LAUNCHED: list[Path] = []  # the log of the JVM this process launched quietly, if it did


def log_file() -> Path:
    """Where this process's Spark logs go: ``$INTENT_LOG_DIR`` or the temp folder, one per process."""
    folder = Path(os.environ.get(LOG_DIR_ENV) or Path(tempfile.gettempdir()) / "intent-spark-logs")
    return folder / f"spark-{os.getpid()}.log"


def _quiet_java_options(current: str) -> str:
    """The driver's Java options with Spark's log4j2 configuration pointed at a log file."""
    path = log_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    conf = path.with_suffix(".log4j2.properties")
    conf.write_text(_LOG4J2.format(path=path), encoding="utf-8")
    return f"{current} -Dlog4j2.configurationFile={conf.as_uri()}".strip()


class SparkSettings(dict[str, str]):
    """Spark settings that remember where each came from (a profile file, ``--spark-conf``)."""

    def __init__(self) -> None:
        super().__init__()
        self.origin: dict[str, str] = {}

    def put(self, key: str, value: str, where: str) -> None:
        check_spark_key(key, where)
        self[key] = value
        self.origin[key] = where


@contextmanager
def _jvm_output_to_log(quiet: bool) -> Iterator[None]:
    """While the JVM is launched, this process's stdout and stderr point at the log file, so the
    JVM inherits them (its own lines, such as "Using incubator modules", go there for good);
    Python's are restored at once."""
    if not quiet:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    target = os.open(log_file(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = os.dup(1), os.dup(2)
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (target, *saved):
            os.close(fd)


def spark_settings(profile: str | None, pairs: list[str]) -> SparkSettings:
    """Spark settings from a profile (``conf/spark/NAME.yaml`` or a path; unnamed, the one
    ``$INTENT_SPARK_PROFILE`` names), then ``key=value`` pairs; a key that is not a Spark
    setting is a one-line error naming the file and the key."""
    settings = SparkSettings()
    profile = profile or os.environ.get(PROFILE_ENV)
    if profile:
        path = Path(profile)
        if not path.suffix:
            path = CONF_DIR / "spark" / f"{profile}.yaml"
        for key, value in load_yaml(path).items():  # YAML booleans become Spark's "true"/"false"
            settings.put(str(key), str(value).lower() if isinstance(value, bool) else str(value), str(path))
    for pair in pairs:
        if "=" not in pair:
            raise IntentError(f"--spark-conf {pair!r}: expected key=value")
        key, value = pair.split("=", 1)
        settings.put(key, value, "--spark-conf")
    return settings


def check_spark_key(key: str, where: str) -> None:
    """Every Spark setting starts with ``spark.``; Spark itself ignores any other key."""
    if not key.startswith(SPARK_PREFIX):
        near = closest(f"{SPARK_PREFIX}{key}", [*BASE_CONF, *LOCAL_CONF]) or f"{SPARK_PREFIX}{key}"
        raise ConfError(
            f"{where}: {key}: unknown key; Spark settings start with 'spark.' (did you mean {near!r}?)"
        )


def check_known_settings(session: SparkSession, settings: Mapping[str, str]) -> None:
    """SQL settings (``spark.sql.*``) Spark does not define are refused, naming the closest it
    does: Spark would silently ignore ``spark.sql.shuffle.partition``. Its SQL settings are all
    declared in its registry; other namespaces hold settings read without a declaration
    (``spark.local.dir``), and catalogs take free-form keys, so those are left to Spark."""
    asked = [k for k in settings if k.startswith("spark.sql.") and not k.startswith("spark.sql.catalog.")]
    if not asked:
        return
    jvm = session.sparkContext._jvm
    try:
        registry = jvm.org.apache.spark.internal.config.ConfigEntry
        unknown = [key for key in asked if registry.findEntry(key) is None]
    except Exception:  # a JVM without the registry: leave the settings to Spark
        return
    if not unknown:
        return
    key = unknown[0]
    where = getattr(settings, "origin", {}).get(key, "Spark settings")
    near = closest(key, [*_sql_settings(jvm), *BASE_CONF, *LOCAL_CONF])
    hint = f"did you mean {near!r}?" if near else "Spark defines no such setting"
    raise ConfError(f"{where}: {key}: not a Spark setting; {hint}")


def _sql_settings(jvm: Any) -> list[str]:
    """The SQL settings Spark documents (for the closest name to a misspelt one)."""
    try:
        defined = jvm.org.apache.spark.sql.internal.SQLConf.get().getAllDefinedConfs()
        return [str(entry._1()) for entry in jvm.scala.collection.JavaConverters.seqAsJavaList(defined)]
    except Exception:
        return []


def delta_version() -> str | None:
    """The Delta Lake of this Python environment (the delta-spark package), None without it: a
    cluster's runtime brings Delta on its own classpath."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("delta-spark")
    except PackageNotFoundError:
        return None


def hadoop_version() -> str | None:
    """The Hadoop client that pyspark's own jars carry (S3A's hadoop-aws must match it)."""
    import pyspark

    found = sorted(Path(pyspark.__file__).parent.glob("jars/hadoop-client-api-*.jar"))
    return found[-1].stem.removeprefix("hadoop-client-api-") if found else None


def delta_jars(store: bool = False) -> list[str]:
    """Paths of the cached jars of this environment's Delta (``make setup`` caches each stack's in
    ``.jars/``), and with ``store`` the S3A jars of pyspark's Hadoop and their AWS SDK bundle
    where cached (558 MB: a JVM that reads no store starts 3-4 s sooner without it, and a
    cluster's executors need not fetch it); an empty list where this Delta's are not cached."""
    delta = delta_version()
    if not JARS_DIR.is_dir() or delta is None:
        return []
    found = sorted(JARS_DIR.glob(f"delta-spark_*-{delta}.jar")) + sorted(
        JARS_DIR.glob(f"delta-storage-{delta}.jar")
    )
    if len(found) < 2:
        return []
    hadoop = hadoop_version()
    aws = sorted(JARS_DIR.glob(f"hadoop-aws-{hadoop}.jar")) if store and hadoop else []
    # hadoop-aws's own dependencies: the AWS SDK bundle, and from Hadoop 3.4.2 on the S3 analytics
    # accelerator (the newest cached of each)
    patterns = ("bundle-*.jar", "analyticsaccelerator-s3-*.jar") if aws else ()
    companions = [jar for pattern in patterns for jar in sorted(JARS_DIR.glob(pattern))[-1:]]
    return [str(p) for p in (*found, *aws, *companions)]


def delta_packages() -> str:
    """Delta's Maven coordinates for this environment's pyspark and delta-spark (Spark's Ivy
    searches ~/.m2 first, so cached jars need no network); a one-line error naming the extra where
    neither jars nor the Delta package are here."""
    import pyspark

    delta = delta_version()
    if delta is None:
        raise IntentError(
            "Delta Lake's Python package (delta-spark) is not installed: pip install 'intent-spark[spark]', "
            "or run on a Spark that brings Delta (give its jars with spark.jars)"
        )
    return delta_artifact(delta, pyspark.__version__)


def needs_store(*paths: object) -> bool:
    """Whether a session reaches an object store: one of its paths is an ``s3a://`` or ``s3://``
    URI, or ``AWS_ENDPOINT_URL`` names an S3-API store."""
    from intent_spark.lake.files import ENDPOINT_ENV, on_store

    return bool(os.environ.get(ENDPOINT_ENV)) or any(isinstance(p, str) and on_store(p) for p in paths)


def store_conf() -> dict[str, str]:
    """S3A settings of an S3-API store named by ``AWS_ENDPOINT_URL`` (the variable pyarrow and the
    AWS SDKs read too): path-style requests, TLS as the URL says, s3:// read as s3a://. Credentials
    come from S3A's default chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, a role)."""
    conf = {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        conf |= {
            "spark.hadoop.fs.s3a.endpoint": endpoint,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https")).lower(),
        }
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region or endpoint:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region or "us-east-1"
    return conf


def build_session(
    app_name: str = "intent-spark",
    overrides: Mapping[str, str] | None = None,
    *,
    store: bool = False,
) -> SparkSession:
    """Return the active session or build one with Delta configured (and S3A, with ``store``).

    Precedence, lowest first: BASE_CONF and LOCAL_CONF, then ``overrides`` (from a conf
    profile), then whatever ``spark-submit`` already set.
    """
    active = SparkSession.getActiveSession()
    if active is not None:  # a cluster's own session: its settings stand, but for the SQL mode
        for key, value in ANSI_CONF.items():
            active.conf.set(key, value)
        return active
    builder = SparkSession.builder.appName(app_name)
    submitted = _submitted_conf()
    conf = {**BASE_CONF, **store_conf()}
    if "spark.master" not in submitted:
        conf.update(LOCAL_CONF)
    conf.update(overrides or {})
    given = {**submitted, **(overrides or {})}
    if not any(k in given for k in ("spark.jars", "spark.jars.packages")):
        jars = delta_jars(store or needs_store())
        if jars:
            conf["spark.jars"] = ",".join(jars)
        else:  # resolved by Spark's Ivy; ~/.m2 is searched first, so cached jars need no network
            conf["spark.jars.packages"] = delta_packages()
    if not submitted:
        _workers_on_this_interpreter(conf)
    quiet = not submitted and os.environ.get(VERBOSE_ENV) != "1"
    if quiet:
        conf["spark.driver.extraJavaOptions"] = _quiet_java_options(
            conf.get("spark.driver.extraJavaOptions", "")
        )
    for key, value in conf.items():
        if key not in submitted:
            builder = builder.config(key, value)
    with _jvm_output_to_log(quiet):
        session = builder.getOrCreate()
    if quiet:
        LAUNCHED.append(log_file())
    session.sparkContext.setLogLevel(os.environ.get("INTENT_SPARK_LOG_LEVEL", "ERROR"))
    check_known_settings(session, overrides or {})
    return session


PYTHON_ENV = "PYSPARK_PYTHON"
PYTHON_KEY = "spark.pyspark.python"


def _workers_on_this_interpreter(conf: dict[str, str]) -> None:
    """Spark starts its Python workers with ``$PYSPARK_PYTHON``, else ``python3`` from PATH: absent
    on a machine with only ``python3.11``, another minor version (which PySpark refuses) on
    others. The embedded session names the driver's own interpreter unless the environment or the
    settings (``spark.pyspark.python``) name one; PySpark reads only the environment variable."""
    if not os.environ.get(PYTHON_ENV):
        os.environ[PYTHON_ENV] = conf.get(PYTHON_KEY) or sys.executable


def _submitted_conf() -> dict[str, str]:
    """Settings the launcher already gave the JVM; empty when Python starts Spark itself.

    Under ``spark-submit`` the JVM starts first and hands Python a gateway port; the
    settings it was given are then visible through a fresh ``SparkConf``.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return {}
    SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())
