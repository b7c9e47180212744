"""A class-data-sharing archive of Spark's own classes, for the test suite's Spark drivers.

A Spark driver that lives for seconds spends most of its CPU loading and verifying Spark's classes. The JVM can map
them from an archive made by an earlier run instead (``-XX:SharedArchiveFile``, JDK 13 and later): about 45 % less
CPU for a short job on this machine (docs/development.md). The archive holds the classes of Spark's own jars
(``$SPARK_HOME/jars``); the ones ``--jars`` adds, Iceberg's, load as before. Made once per stack, by a short Spark
job, and kept under the stack's build directory, named after what it depends on, so a new PySpark, JDK or set of
options makes a new one.

Only the tests use it. The benches and the product leave the JVM's options to the user.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from airflow_iceberg.table_list.schema import TableConfig

#: Short statements that load what a compaction's driver loads from Spark's own jars: the SQL parser and planner,
#: the local scheduler, a shuffle, and Parquet's reader and writer.
_WARM_UP = (
    "SELECT count(*) AS n FROM range(1000)",
    "SELECT max(s) AS m FROM (SELECT id % 7 AS k, sum(id) AS s FROM range(1000) GROUP BY id % 7)",
    "INSERT OVERWRITE DIRECTORY '{scratch}' USING parquet SELECT id, cast(id AS string) AS v FROM range(100)",
    "SELECT count(*) AS n FROM parquet.`{scratch}`",
)
#: The JVM says nothing about the archive: a mismatch only makes a start as slow as without it.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _java_version() -> str:
    java = Path(os.environ["JAVA_HOME"], "bin", "java") if "JAVA_HOME" in os.environ else "java"
    return subprocess.run([java, "-version"], capture_output=True, text=True, check=True).stderr


def archive_options(config: TableConfig, options: str) -> str:
    """``options`` plus the archive of this stack's Spark, made first if need be by a job on ``config``'s Spark
    (its jars and conf, with ``options`` as the driver's); one process makes it while the others wait."""
    from devkit.writers import run_statements

    spark_home = Path(os.environ["SPARK_HOME"]).resolve()
    key = "\n".join([str(spark_home), *sorted(p.name for p in (spark_home / "jars").glob("*.jar")), _java_version()])
    key += "\n" + options
    build = Path(os.environ["AIRFLOW_ICEBERG_STACK_BUILD"]) / "spark-cds"
    build.mkdir(parents=True, exist_ok=True)
    archive = build / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"
    with open(build / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not archive.is_file():
            partial = archive.with_suffix(".partial")
            partial.unlink(missing_ok=True)
            conf = dict(config.spark.conf)
            conf["spark.driver.extraJavaOptions"] = f"{options} -XX:ArchiveClassesAtExit={partial} {_QUIET}"
            warm_up = config.model_copy(update={"spark": config.spark.model_copy(update={"conf": conf})})
            scratch = build / "scratch"
            try:
                run_statements(warm_up, [s.format(scratch=scratch) for s in _WARM_UP])
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            if not partial.is_file():
                raise RuntimeError(f"a Spark job with -XX:ArchiveClassesAtExit={partial} left no archive")
            partial.rename(archive)
    return f"{options} -XX:SharedArchiveFile={archive} {_QUIET}"
