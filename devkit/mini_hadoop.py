"""A real YARN and HDFS of a test's own, in one JVM: Hadoop's MiniDFSCluster and MiniYARNCluster from Maven
Central's ``hadoop-client-minicluster`` (``devkit/mini_hadoop/``, built by ``make setup`` into
``build/mini-hadoop``), a ResourceManager and a NodeManager of 8 GiB and 4 vcores, a NameNode and a DataNode, on
free ports.

:meth:`MiniHadoop.start` runs it until it prints its ``READY`` line; it has then written ``core-site.xml``,
``hdfs-site.xml`` and ``yarn-site.xml`` into :attr:`conf_dir`, which a Spark submit finds through
``HADOOP_CONF_DIR`` (:meth:`spark_env`). :meth:`spark_conf` gives what a PySpark job needs on it (the Python of
the Spark environment, its jars from the local disk rather than uploaded for every application, one attempt, one
small executor, every address on loopback). :meth:`apps` and :meth:`kill` use the ResourceManager's REST API;
:meth:`container_launch_scripts` reads what the NodeManager ran for each container (its command line and its
environment).

Typical use::

    with MiniHadoop(tmp_path / "hadoop") as hadoop:
        env = hadoop.spark_env()  # HADOOP_CONF_DIR and friends, for spark-submit --master yarn
"""

from __future__ import annotations

import getpass
import json
import os
import re
import urllib.request
from pathlib import Path
from typing import Any

from devkit.jvm_service import JvmService, OnJvm, add_opens, classpath_of

HADOOP_BUILD = Path(os.environ.get("AIRFLOW_ICEBERG_HADOOP_BUILD", Path(__file__).parents[1] / "build" / "mini-hadoop"))

#: Guice and cglib in YARN's web apps reach into the JDK.
_ADD_OPENS = add_opens(
    "java.lang",
    "java.lang.reflect",
    "java.util",
    "java.io",
    "java.net",
    "java.nio",
    "sun.nio.ch",
    "java.util.concurrent",
)
_READY = re.compile(r"^READY fs\.defaultFS=(\S+) rm=(\S+) rm\.web=(\S+) ", re.MULTILINE)


class MiniHadoop(OnJvm):
    """HDFS and YARN under ``base_dir`` (created): their data, the containers' logs and directories, the
    configuration for clients (``base_dir/conf``)."""

    def __init__(self, base_dir: Path, *, heap: str = "1g") -> None:
        self.base_dir = Path(base_dir)
        self.conf_dir = self.base_dir / "conf"
        self.tmp = self.base_dir / "tmp"
        self.default_fs = self.rm_address = self.rm_web = ""
        jars = classpath_of(HADOOP_BUILD, "the Hadoop mini-cluster")
        classpath = f"{HADOOP_BUILD / 'target' / 'mini-hadoop.jar'}:{jars}"
        self.server = JvmService(
            "mini-hadoop",
            self.base_dir,
            classpath,
            "airflowiceberg.devkit.MiniHadoop",
            [str(self.conf_dir), str(self.base_dir)],
            heap=heap,
            jvm_options=[*_ADD_OPENS, f"-Djava.io.tmpdir={self.tmp}"],
            cwd=self.base_dir,  # MiniYARNCluster writes under ./target
        )

    def _ready(self) -> bool:
        log = self.server.log_file
        found = _READY.search(log.read_text(errors="replace")) if log.exists() else None
        if found is None:
            return False
        self.default_fs, self.rm_address, self.rm_web = found.groups()
        return True

    def start(self, timeout: float = 180) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.server.start(self._ready, timeout=timeout)

    def spark_env(self) -> dict[str, str]:
        """The environment of a ``spark-submit --master yarn`` to this cluster."""
        return {
            "HADOOP_CONF_DIR": str(self.conf_dir),
            "YARN_CONF_DIR": str(self.conf_dir),
            "HADOOP_USER_NAME": getpass.getuser(),
            "SPARK_LOCAL_IP": "127.0.0.1",  # this machine's name resolves to 127.0.0.1: Spark would take eth0's
        }

    def spark_conf(self, spark_home: Path, python: Path) -> dict[str, str]:
        """What a PySpark job needs on this cluster, for the Spark environment at ``spark_home`` with ``python``."""
        return {
            "spark.pyspark.python": str(python),  # the driver's (in the application master in cluster mode), executors'
            "spark.yarn.jars": f"local:{spark_home}/jars/*",  # the NodeManager is on this machine: no upload
            "spark.yarn.maxAppAttempts": "1",
            "spark.executor.instances": "1",
            "spark.executor.cores": "1",
            "spark.executor.memory": "1g",
            "spark.driver.memory": "1g",
            "spark.yarn.am.memory": "512m",
            "spark.yarn.appMasterEnv.SPARK_LOCAL_IP": "127.0.0.1",
            "spark.executorEnv.SPARK_LOCAL_IP": "127.0.0.1",
            "spark.local.dir": str(self.tmp),
        }

    def _rest(self, path: str, method: str = "GET", body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"http://{self.rm_web.removeprefix('http://')}/ws/v1/cluster/{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def apps(self) -> list[dict[str, Any]]:
        """Every application the ResourceManager knows, as its REST API gives them (``state``, ``finalStatus``...)."""
        return (self._rest("apps").get("apps") or {}).get("app") or []

    def app(self, app_id: str) -> dict[str, Any]:
        return self._rest(f"apps/{app_id}")["app"]

    def reported(self, app_id: str) -> dict[str, Any]:
        """All the ResourceManager's REST API says of application ``app_id``: the application (its name, its
        diagnostics, its AM's host and logs ...) and its attempts. It reports no container's command line or
        environment: those are in :meth:`container_launch_scripts`."""
        return {"app": self.app(app_id), "attempts": self._rest(f"apps/{app_id}/appattempts")}

    def container_launch_scripts(self, app_id: str) -> dict[str, str]:
        """Each container's ``launch_container.sh`` of application ``app_id``, by container id: the NodeManager's
        script that exports the container's environment and runs its command line."""
        found = {}
        for script in self.base_dir.glob(f"target/**/{app_id}/container_*/launch_container.sh"):
            found[script.parent.name] = script.read_text(errors="replace")
        return found
