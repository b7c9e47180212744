"""pyiceberg's FileIO for a warehouse on HDFS: HDFS locations through hdfs-native, the rest through PyArrow.
(Live against a real HDFS: tests/integration/test_yarn.py's warehouse on HDFS.)"""

from __future__ import annotations

import pytest
from pyiceberg.io import load_file_io
from pyiceberg.io.fsspec import FsspecInputFile
from pyiceberg.io.pyarrow import PyArrowFile

from airflow_iceberg.hooks import hdfs_io
from airflow_iceberg.hooks.hdfs_io import HdfsFileIO

PY_IO_IMPL = {"py-io-impl": "airflow_iceberg.hooks.hdfs_io.HdfsFileIO"}


def test_the_connections_py_io_impl_selects_it_and_local_files_go_through_pyarrow(tmp_path):
    io = load_file_io(PY_IO_IMPL, location="hdfs://namenode:8020/warehouse")
    assert isinstance(io, HdfsFileIO)
    path = f"file://{tmp_path}/metadata.json"
    with io.new_output(path).create() as out:
        out.write(b"{}")
    assert isinstance(io.new_input(path), PyArrowFile) and io.new_input(path).open().read() == b"{}"
    io.delete(path)
    assert not (tmp_path / "metadata.json").exists()


def test_hdfs_locations_get_one_client_per_namenode_and_process(monkeypatch):
    made = []

    def file_system(pid, scheme, host, port):
        made.append((pid, scheme, host, port))
        return object()

    monkeypatch.setattr(hdfs_io, "_hdfs_file_system", file_system)
    io = HdfsFileIO({})
    for location in ("hdfs://nn:8020/w/a.avro", "hdfs://nn:8020/w/b.avro", "viewfs://cluster/w/c.avro"):
        assert isinstance(io.new_input(location), FsspecInputFile)
    pid = hdfs_io.os.getpid()
    assert made == [(pid, "hdfs", "nn", 8020), (pid, "viewfs", "cluster", None)]
    monkeypatch.setattr(hdfs_io.os, "getpid", lambda: pid + 1)  # a forked child: its own client
    io.new_input("hdfs://nn:8020/w/a.avro")
    assert made[-1] == (pid + 1, "hdfs", "nn", 8020)


def test_without_hdfs_native_an_hdfs_location_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "hdfs_native.fsspec", None)
    with pytest.raises(ImportError, match=r"a hdfs:// location needs hdfs-native .* install airflow-iceberg\[hdfs\]"):
        HdfsFileIO({}).new_input("hdfs://nn:8020/w/a.avro")
