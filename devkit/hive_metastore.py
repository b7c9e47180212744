"""A Hive Metastore of a test's own: Hive's standalone metastore (its thrift server) over a MariaDB database of its
own, its tables' data in a local warehouse, on a free loopback port.

``make setup`` resolves its jars (``requirements/hive-metastore.xml``: Hive 4.0.0, see there why not 4.0.1) and
writes their class path to ``build/hive-metastore/classpath``, with the schema tool's SQL scripts under
``build/hive-metastore/dist``. :meth:`HiveMetastore.start` writes ``metastore-site.xml`` into a directory that
goes first on the class path (where the metastore looks for it), creates the schema with Hive's
``MetastoreSchemaTool`` when the database has none, and runs ``HiveMetaStore`` until its thrift port answers.

Typical use::

    with HiveMetastore(tmp_path / "hms", mysql, "hive_metastore") as hms:
        connection = hms.iceberg_connection()  # an Airflow Iceberg connection of type hive
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import pymysql

from devkit import extra_jvm_options
from devkit.jvm_service import CatalogServer, JvmService, JvmServiceError, classpath_of

HMS_BUILD = Path(os.environ.get("AIRFLOW_ICEBERG_HMS_BUILD", Path(__file__).parents[1] / "build" / "hive-metastore"))
HIVE_VERSION = "4.0.0"

#: The jars ship no log4j2 configuration; DataNucleus is loud at INFO.
_LOG4J2 = """\
status = WARN
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %-5p [%t] %c{1}: %m%n
rootLogger.level = INFO
rootLogger.appenderRef.console.ref = console
logger.datanucleus.name = DataNucleus
logger.datanucleus.level = WARN
logger.datanucleus2.name = org.datanucleus
logger.datanucleus2.level = WARN
"""

#: The default list names HiveProtoEventsCleanerTask, which is in hive-exec, not in the standalone metastore.
_HOUSEKEEPING = ",".join(
    f"org.apache.hadoop.hive.metastore.{task}"
    for task in (
        "events.EventCleanerTask",
        "RuntimeStatsCleanerTask",
        "metrics.AcidMetricService",
        "metrics.AcidMetricLogger",
        "ScheduledQueryExecutionsMaintTask",
        "ReplicationMetricsMaintTask",
    )
)


class HiveMetastore(CatalogServer):
    """The metastore, its schema in MySQL database ``database`` (created) and its warehouse under ``base_dir``.
    ``mysql`` holds pymysql's host, port, user and password."""

    def __init__(self, base_dir: Path, mysql: dict[str, Any], database: str, *, heap: str = "512m") -> None:
        super().__init__(base_dir, mysql, database)
        self.uri = f"thrift://127.0.0.1:{self.port}"
        self._conf = self.base_dir / "conf"
        classpath = f"{self._conf}:{classpath_of(HMS_BUILD, 'the Hive Metastore')}"
        self._jvm_options = [
            f"-Dlog4j.configurationFile={self._conf / 'log4j2.properties'}",
            "-Dlog4j2.formatMsgNoLookups=true",
            f"-Dhive.log.dir={self.base_dir}",
        ]
        self._classpath, self._heap = classpath, heap
        self.server = JvmService(
            "hive-metastore",
            self.base_dir,
            classpath,
            "org.apache.hadoop.hive.metastore.HiveMetaStore",
            heap=heap,
            jvm_options=self._jvm_options,
        )

    def _site(self) -> str:
        # Hive takes an empty ConnectionPassword for none and sends its default ("mine"); the MariaDB driver lets a
        # password in the URL override it.
        password = self.mysql.get("password") or ""
        url = f"jdbc:mariadb://{self.mysql['host']}:{self.mysql['port']}/{self.database}?password={password}"
        properties = {
            "javax.jdo.option.ConnectionURL": url,
            "javax.jdo.option.ConnectionDriverName": "org.mariadb.jdbc.Driver",
            "javax.jdo.option.ConnectionUserName": self.mysql["user"],
            "javax.jdo.option.ConnectionPassword": password,
            "metastore.warehouse.dir": f"file://{self.warehouse}",
            "metastore.thrift.port": str(self.port),
            "metastore.thrift.bind.host": "127.0.0.1",
            # clients without Hive's proxy-user set-up may read notifications (Spark's HiveExternalCatalog does)
            "metastore.event.db.notification.api.auth": "false",
            "metastore.schema.verification": "true",
            "metastore.task.threads.always": _HOUSEKEEPING,
        }
        body = "".join(
            f"  <property><name>{name}</name><value>{escape(value)}</value></property>\n"
            for name, value in properties.items()
        )
        return f"<configuration>\n{body}</configuration>\n"

    def _has_schema(self) -> bool:
        connection = pymysql.connect(**self.mysql, autocommit=True)
        with connection, connection.cursor() as cursor:
            # Hive's advice for its index key lengths: latin1. The name is checked in __init__.
            cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{self.database}` CHARACTER SET latin1")
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s AND table_name = 'VERSION'",
                (self.database,),
            )
            return cursor.fetchone()[0] == 1

    def _answers(self) -> bool:
        socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        return True

    def start(self, timeout: float = 120) -> None:
        """Write the configuration, create the schema if the database has none, and run until the port answers."""
        self.warehouse.mkdir(parents=True, exist_ok=True)
        self._conf.mkdir(parents=True, exist_ok=True)
        (self._conf / "metastore-site.xml").write_text(self._site())
        (self._conf / "log4j2.properties").write_text(_LOG4J2)
        if not self._has_schema():
            log = self.base_dir / "schematool.log"
            command = [
                "java",
                f"-Xmx{self._heap}",
                *extra_jvm_options(),
                *self._jvm_options,
                "-cp",
                self._classpath,
                "org.apache.hadoop.hive.metastore.tools.schematool.MetastoreSchemaTool",
                "-dbType",
                "mysql",
                "-initSchema",
            ]
            home = HMS_BUILD / "dist" / f"apache-hive-metastore-{HIVE_VERSION}-bin"  # where it finds its scripts
            env = {**os.environ, "METASTORE_HOME": str(home)}
            with log.open("w") as out:
                done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=300)
            if done.returncode != 0:
                raise JvmServiceError(f"Hive's schema tool failed ({done.returncode}):\n{log.read_text()[-5000:]}")
        self.server.start(self._answers, timeout=timeout)

    def iceberg_connection(self) -> dict[str, Any]:
        """An Airflow connection of type ``iceberg`` for this catalog, as a user would write it."""
        return {
            "conn_type": "iceberg",
            "extra": {"type": "hive", "uri": self.uri, "warehouse": f"file://{self.warehouse}"},
        }
