"""Iceberg's REST catalog server of a test's own: ``RESTCatalogServer`` (Iceberg's open-api test fixtures, the
server of the apache/iceberg-rest-fixture image) over a JdbcCatalog in a MariaDB database of its own, with a
warehouse on the local file system, on a free loopback port.

``make setup`` resolves its jars (``requirements/rest-catalog.xml``) and writes their class path to
``build/rest-catalog/classpath``. The server takes its catalog's properties from ``CATALOG_*`` environment
variables (``CATALOG_URI`` is ``uri``, ``CATALOG_CATALOG__IMPL`` is ``catalog-impl``, ``CATALOG_REST_PORT`` is
``rest.port``: ``__`` becomes ``-``, ``_`` becomes ``.``). It binds every interface (it has no host setting) and
logs its JDBC password: give it a database user of its own outside a test machine.

Typical use::

    with RestCatalog(tmp_path / "rest", mysql, "iceberg_rest_catalog") as rest:
        connection = rest.iceberg_connection()  # an Airflow Iceberg connection of type rest
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import pymysql

from devkit.jvm_service import CatalogServer, JvmService, classpath_of

REST_BUILD = Path(os.environ.get("AIRFLOW_ICEBERG_REST_BUILD", Path(__file__).parents[1] / "build" / "rest-catalog"))


class RestCatalog(CatalogServer):
    """The server, its catalog's tables in MySQL database ``database`` (created) and its warehouse under
    ``base_dir``. ``mysql`` holds pymysql's host, port, user and password."""

    def __init__(self, base_dir: Path, mysql: dict[str, Any], database: str) -> None:
        super().__init__(base_dir, mysql, database)
        self.uri = f"http://127.0.0.1:{self.port}"
        # nullDatabaseMeansCurrent: the JdbcCatalog looks for its tables with DatabaseMetaData.getTables on no
        # database, which MariaDB's driver answers from every database: another catalog's tables would stop it
        # creating its own.
        jdbc = f"jdbc:mariadb://{mysql['host']}:{mysql['port']}/{database}?nullDatabaseMeansCurrent=true"
        env = {
            "CATALOG_CATALOG__IMPL": "org.apache.iceberg.jdbc.JdbcCatalog",
            "CATALOG_URI": jdbc,
            "CATALOG_JDBC_USER": mysql["user"],
            "CATALOG_JDBC_PASSWORD": mysql.get("password") or "",
            "CATALOG_WAREHOUSE": f"file://{self.warehouse}",
            "CATALOG_REST_PORT": str(self.port),
        }
        self.server = JvmService(
            "rest-catalog",
            self.base_dir,
            classpath_of(REST_BUILD, "Iceberg's REST catalog server"),
            "org.apache.iceberg.rest.RESTCatalogServer",
            env=env,
        )

    def config(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.uri}/v1/config", timeout=5) as response:
            return json.load(response)

    def start(self) -> None:
        """Create the database, then run the server until it answers ``GET /v1/config``."""
        self.warehouse.mkdir(parents=True, exist_ok=True)
        connection = pymysql.connect(**self.mysql, autocommit=True)
        with connection, connection.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{self.database}`")  # checked in __init__
        self.server.start(lambda: "defaults" in self.config(), timeout=60)

    def iceberg_connection(self) -> dict[str, Any]:
        """An Airflow connection of type ``iceberg`` for this catalog, as a user would write it."""
        return {"conn_type": "iceberg", "extra": {"type": "rest", "uri": self.uri}}
