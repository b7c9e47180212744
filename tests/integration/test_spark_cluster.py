"""The same compaction DAG on a real Spark standalone cluster, chosen by the Spark connection alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit import spark_standalone
from devkit.spark_standalone import StandaloneCluster
from devkit.tables import TableStats
from devkit.writers import write_small_files
from tests.integration.conftest import CATALOG_USER_PASSWORD, GATE_USERS

WRITER_ARGS = ("--days", "2", "--commits", "3", "--files-per-commit", "6", "--delete-commits", "2")


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    """A Spark master and one worker on 127.0.0.1; only the connection changes: the DAG's Spark connection
    (``spark_standalone``) points at the cluster's master."""
    with spark_standalone.standalone_cluster(tmp_path) as cluster:
        yield cluster


def test_compaction_runs_on_the_standalone_cluster_with_the_local_result(
    standalone_cluster, password_protected_catalog, unique_name, table_config, compaction_dag, argv_sampler
):
    table = f"lake.cluster.{unique_name}"
    write_small_files(table_config(table), *WRITER_ARGS)
    before = TableStats.read("lake", table)

    # No secret on any command line: the driver's, the worker's, its executors'.
    with argv_sampler(CATALOG_USER_PASSWORD, GATE_USERS["airflow"][1]) as sampler:
        run = compaction_dag(table, spark_conn_id="spark_standalone", spark={"executor_memory": "1g"}).test()

    assert run.state == "success"
    assert sampler.spark_samples > 0 and sampler.leaks == [], sampler.leaks
    applications = {app["name"]: app for app in standalone_cluster.state()["completedapps"]}
    # Both rewrites ran in one application on the cluster, which gave it executors on the worker.
    application = applications[f"iceberg-rewrite_data_files,rewrite_position_delete_files-{table}"]
    assert application["state"] == "FINISHED"
    assert application["cores"] > 0
    after = TableStats.read("lake", table)
    assert after.rows == before.rows
    assert after.data_files <= 2  # one file per day partition: the 128 MiB target holds each day whole
    assert after.data_files < before.data_files
