"""pyiceberg on a warehouse on HDFS without Hadoop's native library.

pyiceberg reads ``hdfs://`` and ``viewfs://`` only through pyarrow's ``HadoopFileSystem``, which loads Hadoop's
``libhdfs.so`` and a JVM with Hadoop's jars on its class path: a Spark gateway has them, an Airflow worker seldom
does. :class:`HdfsFileIO` reads and writes those locations with ``hdfs-native`` (the extra ``airflow-iceberg[hdfs]``),
an HDFS client speaking HDFS's own protocol, through pyiceberg's fsspec files; every other location goes to
pyiceberg's default, ``PyArrowFileIO``, as before.

Select it in the Iceberg connection's extra, as pyiceberg selects any FileIO::

    {"type": "sql", "uri": "mysql+pymysql://...", "warehouse": "hdfs://namenode:8020/warehouse",
     "py-io-impl": "airflow_iceberg.hooks.hdfs_io.HdfsFileIO"}

``hdfs://host:port/`` locations reach that NameNode; ``hdfs:///path`` and ``viewfs://`` locations are resolved
by hdfs-native from ``HADOOP_CONF_DIR``'s ``core-site.xml``, as Hadoop's client resolves them. Spark reads the
same locations with its own Hadoop client: the property is pyiceberg's alone and never reaches Spark.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any
from urllib.parse import urlparse

from pyiceberg.io import FileIO, InputFile, OutputFile
from pyiceberg.io.fsspec import FsspecInputFile, FsspecOutputFile
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.typedef import Properties

#: The schemes hdfs-native serves; its fsspec file systems, by scheme.
HDFS_SCHEMES = frozenset({"hdfs", "viewfs"})


class HdfsFileIO(FileIO):
    """``hdfs://`` and ``viewfs://`` through hdfs-native; anything else through ``PyArrowFileIO``."""

    def __init__(self, properties: Properties = {}) -> None:  # noqa: B006 (pyiceberg's own default)
        super().__init__(properties=properties)
        self._other = PyArrowFileIO(properties)
        self._file_system = lru_cache(maxsize=None)(_hdfs_file_system)

    def new_input(self, location: str) -> InputFile:
        if (fs := self._hdfs(location)) is None:
            return self._other.new_input(location)
        return FsspecInputFile(location=location, fs=fs)

    def new_output(self, location: str) -> OutputFile:
        if (fs := self._hdfs(location)) is None:
            return self._other.new_output(location)
        return FsspecOutputFile(location=location, fs=fs)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        path = location if isinstance(location, str) else location.location
        if (fs := self._hdfs(path)) is None:
            self._other.delete(path)
        else:
            fs.rm(path)

    def _hdfs(self, location: str) -> Any:
        uri = urlparse(location)
        if uri.scheme not in HDFS_SCHEMES:
            return None
        # Keyed by process: a forked child gets clients of its own (an inherited one's runtime threads are gone).
        return self._file_system(os.getpid(), uri.scheme, uri.hostname, uri.port)

    def __getstate__(self) -> dict[str, Any]:
        # Pickled into pyiceberg's scan workers: the file systems (each a live client) are made again there.
        return {"properties": self.properties}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["properties"])  # type: ignore[misc]


def _hdfs_file_system(pid: int, scheme: str, host: str | None, port: int | None) -> Any:
    try:
        from hdfs_native.fsspec import HdfsFileSystem, ViewfsFileSystem
    except ImportError:
        raise ImportError(
            f"a {scheme}:// location needs hdfs-native for airflow_iceberg.hooks.hdfs_io.HdfsFileIO: install "
            "airflow-iceberg[hdfs] where Airflow reads the catalog"
        ) from None
    file_system = ViewfsFileSystem if scheme == "viewfs" else HdfsFileSystem
    # Not in fsspec's instance cache: fsspec clears it in every forked child, before exec too (a spark-submit
    # started with a preexec_fn), and dropping a client there waits for runtime threads the child does not have.
    return file_system(host=host, port=port, skip_instance_cache=True)
