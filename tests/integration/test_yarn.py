"""The compaction DAG on a real YARN, in client and in cluster deploy mode (``devkit/mini_hadoop.py``: Hadoop's
MiniYARNCluster and MiniDFSCluster in one JVM), chosen by the Spark connection alone.

In cluster deploy mode the job's driver runs in a YARN container and its output stays there: the job's answers
reach the task through the gate's MySQL (``core/job_report.py``), so the XCom and the run record are those of
client mode, and a partial failure fails the run as on one machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.surface.dag_factory import full_rewrite_dag_id
from devkit.dag_runs import load_dag
from devkit.live_airflow import free_port, mysql_settings
from devkit.mini_hadoop import MiniHadoop
from devkit.tables import TableStats
from devkit.writer_jobs.ingest_events import expected_rows
from devkit.writers import IngestJob, write_small_files
from tests.integration.conftest import CATALOG_USER_PASSWORD, DB_SUFFIX, GATE_USERS, ROOT, WORKER_SUFFIX, _mysql
from tests.integration.test_partial_progress import a_partial_failure_fails_the_run

# One mini-cluster for every test here; its JVMs (a ResourceManager, a NodeManager, each application's master
# and executor) load both cores, which slowed the timing-bound tests of the other worker: so they run alone.
pytestmark = [pytest.mark.xdist_group("yarn"), pytest.mark.alone]

WRITER_ARGS = ("--days", "2", "--commits", "3", "--files-per-commit", "6", "--delete-commits", "2")
#: What differs between two compactions of two tables written alike, besides where they ran: how long each part
#: took, and the bytes of delete files, which hold their data files' paths (and so the table's name).
TIMINGS = ("call_seconds", "removal_seconds")
#: The kill test ends rewrite_files this long after its application is seen running: inside its work.
KILL_AFTER_RUNNING_SECONDS = 3.0


@pytest.fixture(scope="module")
def yarn(integration_stack) -> Iterator[MiniHadoop]:
    """A YARN and an HDFS for the module, and the Spark connections ``spark_yarn_client`` and
    ``spark_yarn_cluster`` on it, as a user writes them; HADOOP_CONF_DIR set as on a YARN gateway."""
    base = ROOT / "build" / f"test-mini-hadoop{WORKER_SUFFIX}"
    shutil.rmtree(base, ignore_errors=True)
    with MiniHadoop(base) as hadoop, pytest.MonkeyPatch.context() as patch:
        for name, value in hadoop.spark_env().items():
            patch.setenv(name, value)
        for mode in ("client", "cluster"):
            extra = {"deploy-mode": mode, "queue": "default", "yarn_resourcemanager_webapp_address": hadoop.rm_web}
            patch.setenv(
                f"AIRFLOW_CONN_SPARK_YARN_{mode.upper()}",
                json.dumps({"conn_type": "spark", "host": "yarn", "extra": extra}),
            )
        yield hadoop


@pytest.fixture(scope="module")
def hdfs_catalog(yarn: MiniHadoop) -> Iterator[str]:
    """A JDBC catalog (its own database in the suite's MariaDB) whose warehouse is on the mini-cluster's HDFS, as
    the Iceberg connection ``lake_hdfs``: pyiceberg reads it through ``HdfsFileIO`` (the extra ``hdfs``), Spark
    through its own Hadoop client."""
    name, database = "lake_hdfs", f"airflow_iceberg_test_hdfs{DB_SUFFIX}"
    with _mysql() as db, db.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{database}`")
        cursor.execute(f"CREATE DATABASE `{database}`")
    user, password, host, port = (mysql_settings()[key] for key in ("user", "password", "host", "port"))
    auth = f"{user}:{password}" if password else user
    extra = {
        "type": "sql",
        "uri": f"mysql+pymysql://{auth}@{host}:{port}/{database}",
        "warehouse": f"{yarn.default_fs}/warehouse",
        "py-io-impl": "airflow_iceberg.hooks.hdfs_io.HdfsFileIO",
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(f"AIRFLOW_CONN_{name.upper()}", json.dumps({"conn_type": "iceberg", "extra": extra}))
        IcebergHook(name).get_conn()  # the catalog's own tables, before Spark's JDBC catalog looks (conftest)
        yield name


def yarn_spark(hadoop: MiniHadoop) -> dict:
    """A table list entry's ``spark`` block for this cluster, from the stack's Spark environment (whose
    spark-submit is on PATH: its Python, and the PySpark package that is its SPARK_HOME)."""
    python = Path(shutil.which("spark-submit")).parent / "python"
    spark_home = subprocess.run(
        [python, "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return {"conf": hadoop.spark_conf(Path(spark_home), python)}


def load_snapshots(table: str) -> list:
    return IcebergHook("lake").load_table(table.split(".", 1)[1]).snapshots()


def results_without_timings(xcom: dict) -> dict:
    def kept(procedure: str, key: str) -> bool:
        return key not in TIMINGS and not (procedure == "rewrite_position_delete_files" and "bytes" in key)

    return {procedure: {k: v for k, v in row.items() if kept(procedure, k)} for procedure, row in xcom.items()}


def test_cluster_mode_gives_the_xcom_and_run_record_of_client_mode_with_no_secret_in_the_containers(
    yarn, password_protected_catalog, unique_name, table_config, compaction_dag, gate_hook
):
    seen = {}
    for mode in ("client", "cluster"):
        table = f"lake.yarn.{unique_name}_{mode}"
        write_small_files(table_config(table), *WRITER_ARGS)
        before = TableStats.read("lake", table)
        dag = compaction_dag(table, spark_conn_id=f"spark_yarn_{mode}", spark=yarn_spark(yarn))
        run = dag.test()
        assert run.state == "success", {ti.task_id: ti.state for ti in run.get_task_instances()}
        xcom = run.get_task_instance("rewrite_files").xcom_pull(task_ids="rewrite_files")
        record = gate_hook.records.run_records(table)[-1]
        after = TableStats.read("lake", table)
        assert after.rows == before.rows and after.data_files < before.data_files
        [app] = [a for a in yarn.apps() if a["name"].endswith(f"-{table}")]
        seen[mode] = (results_without_timings(xcom), record, app)
        took = app["elapsedTime"] / 1000
        print(f"YARN {mode} mode: {app['id']} {app['state']}/{app['finalStatus']} in {took:.1f} s; "
              f"files {before.data_files} -> {after.data_files}; XCom {json.dumps(xcom)}")  # fmt: skip
    (client, client_record, client_app), (cluster, cluster_record, cluster_app) = seen["client"], seen["cluster"]
    assert cluster == client
    counts = ("outcome", "data_files_before", "data_files_after", "delete_files_before", "delete_files_after")
    assert {k: cluster_record.get(k) for k in counts} == {k: client_record.get(k) for k in counts}, (
        client_record,
        cluster_record,
    )
    assert cluster_app["finalStatus"] == client_app["finalStatus"] == "SUCCEEDED"
    # What the ResourceManager reports of each application, and what the NodeManager ran for each of its
    # containers (the RM's REST API has no container command line or environment: the NM's launch script has
    # both), with no secret.
    for app in (client_app, cluster_app):
        reported = json.dumps(yarn.reported(app["id"]))
        assert app["id"] in reported
        for secret in (CATALOG_USER_PASSWORD, *(password for _, password, _ in GATE_USERS.values())):
            assert secret not in reported, f"a secret is in what the ResourceManager reports of {app['id']}"
        scripts = yarn.container_launch_scripts(app["id"])
        assert scripts, f"no container of {app['id']} found"
        for container, script in scripts.items():
            for secret in (CATALOG_USER_PASSWORD, *(password for _, password, _ in GATE_USERS.values())):
                assert secret not in script, f"a secret is in {container}'s launch script"


def test_a_partial_failure_in_cluster_mode_fails_the_run_and_says_so_as_on_one_machine(
    yarn, unique_name, compaction_dag, gate_hook
):
    """Commit groups that fail under partial progress: the job's result row reaches the task only through its
    report, and the run fails with the sentence it fails with on one machine (``test_partial_progress.py``)."""
    settings = {"spark_conn_id": "spark_yarn_cluster", "spark": yarn_spark(yarn)}
    failure = a_partial_failure_fails_the_run(unique_name, compaction_dag, gate_hook, **settings)
    [app] = [a for a in yarn.apps() if a["name"].endswith(f"-lake.partial.{unique_name}")]
    print(f"YARN cluster mode, partial failure: {app['id']} {app['state']}/{app['finalStatus']}; the run: {failure}")
    assert app["finalStatus"] == "SUCCEEDED"  # Iceberg ends such a rewrite normally: only the report tells


class AppWatch(threading.Thread):
    """Reads the ResourceManager's applications every 0.2 s: when each was first seen running, and when ended.
    With ``kill_after``, it times the task out (SIGALRM, the signal of Airflow's execution_timeout, which the
    task's process runs under) that many seconds after an application was first seen running."""

    def __init__(self, hadoop: MiniHadoop, kill_after: float | None = None) -> None:
        super().__init__(daemon=True)
        self.hadoop, self.running_at, self.ended = hadoop, {}, {}
        self.kill_after, self.killed_at = kill_after, None
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.2):
            for app in self.hadoop.apps():
                if app["state"] == "RUNNING":
                    self.running_at.setdefault(app["id"], time.time())
                    running_for = time.time() - self.running_at[app["id"]]
                    if self.kill_after is not None and self.killed_at is None and running_for >= self.kill_after:
                        self.killed_at = time.time()
                        os.kill(os.getpid(), signal.SIGALRM)
                if app["state"] in ("FINISHED", "FAILED", "KILLED"):
                    self.ended.setdefault(app["id"], (time.time(), app["state"]))

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=10)


def test_a_rewrite_task_killed_while_its_application_runs_kills_it_on_yarn_and_commits_nothing(
    yarn, unique_name, table_config, compaction_dag, gate_hook
):
    """The task killed by its timeout once the application runs: the provider's on_kill kills the application
    through the ResourceManager's REST API; the gate reopens; no commit lands after the kill."""
    table = f"lake.yarn.{unique_name}"
    write_small_files(table_config(table), *WRITER_ARGS)
    before = TableStats.read("lake", table)
    dag = compaction_dag(table, spark_conn_id="spark_yarn_cluster", spark=yarn_spark(yarn))
    # The timeout's handler is in place for the watch's early signal; the timeout itself never comes.
    dag.get_task("rewrite_files").execution_timeout = timedelta(minutes=10)
    dag.get_task("rewrite_files").retries = 0  # one kill, one application
    watch = AppWatch(yarn, kill_after=KILL_AFTER_RUNNING_SECONDS)
    watch.start()
    try:
        run = dag.test()
        rewrite = run.get_task_instance("rewrite_files")
        assert watch.killed_at is not None, "the application was never seen running"
        killed_at = watch.killed_at
        [app] = [a for a in yarn.apps() if a["name"].endswith(f"-{table}")]
        deadline = time.monotonic() + 60
        while app["id"] not in watch.ended and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        watch.stop()
    ended_at, state = watch.ended[app["id"]]
    record = gate_hook.records.run_records(table)[-1]
    after = TableStats.read("lake", table)
    replaced = [s for s in load_snapshots(table) if s.summary.operation.value == "replace"]
    print(
        f"YARN cluster mode, rewrite_files killed ({app['id']} running since "
        f"{killed_at - watch.running_at[app['id']]:.1f} s before): the application ended {state} "
        f"{max(ended_at - killed_at, 0):.1f} s after the kill; writers paused {record['gate_closed_seconds']:.1f} s; "
        f"commits of the rewrite: {len(replaced)}, none after the gate reopened"
    )
    assert run.state == "failed" and rewrite.state == "failed"
    assert state == "KILLED" and ended_at - killed_at < 30
    assert run.get_task_instance("open_gate").state == "success"
    assert not gate_hook.get_state(table).pauses_writers
    [opened] = [e["at"] for e in gate_hook.audit_trail(table) if e["action"] == "open"]
    # Any commit of the rewrite landed while the gate was closed: none after writers resumed.
    assert all(s.timestamp_ms / 1000 < opened.timestamp() for s in replaced), (replaced, opened)
    assert after.rows == before.rows


def test_beside_a_gated_writer_local_yarn_client_and_yarn_cluster_compactions_lose_no_commit(
    yarn, unique_name, table_config, compaction_dag, gate_hook, tmp_path
):
    """One table, a gated Spark streaming MERGE writer committing every 3 s beside three compactions: on
    ``local[2]``, on YARN in client and in cluster mode; each run's gate-closed seconds, from the same run."""
    table = f"lake.yarn.{unique_name}"
    stream = IngestJob(table_config(table), tmp_path / "stream", trigger_seconds=3.0, writer_id="events-merge")
    closed = {}
    try:
        stream.start().wait_for_batches(2)
        for where, conn_id in (("local[2]", "spark_default"), ("yarn client", "spark_yarn_client"),
                               ("yarn cluster", "spark_yarn_cluster")):  # fmt: skip
            stream.wait_for_batches(len(stream.batches()) + 2)
            spark = {} if conn_id == "spark_default" else yarn_spark(yarn)
            dag = compaction_dag(table, spark_conn_id=conn_id, spark=spark, idle_seconds=1800, max_pause_seconds=4000)
            run = dag.test()
            assert run.state == "success", (where, {ti.task_id: ti.state for ti in run.get_task_instances()})
            closed[where] = gate_hook.records.run_records(table)[-1]["gate_closed_seconds"]
    finally:
        final = stream.stop()
    print(
        "gate closed, s, beside a gated writer: "
        + ", ".join(f"{where} {seconds:.1f}" for where, seconds in closed.items())
        + f"; the writer: {final['batches']} batches, {final['failed_commits']} failed commits"
    )
    assert (final["failed_commits"], final["exit_error"]) == (0, None), final["failures"]
    assert stream.processes_left() == []
    arrow = IcebergHook("lake").load_table(table.split(".", 1)[1]).scan().to_arrow()
    keys = arrow["key"].to_pylist()
    assert len(keys) == len(set(keys))
    rows = dict(zip(keys, zip(arrow["value"].to_pylist(), arrow["payload"].to_pylist(), strict=True), strict=True))
    assert rows == expected_rows(final["max_value"], stream.keys)


def test_a_resource_manager_that_does_not_answer_fails_the_rewrite_naming_it_and_the_gate_is_open(
    yarn, unique_name, table_config, compaction_dag, gate_hook, tmp_path, monkeypatch, capfd
):
    """HADOOP_CONF_DIR names a ResourceManager address where nothing listens: spark-submit is ended after its
    tenth refused try (Hadoop's client would retry for 15 minutes), the task says what to check, the gate opens."""
    table = f"lake.yarn.{unique_name}"
    write_small_files(table_config(table), *WRITER_ARGS)
    before = TableStats.read("lake", table)
    wrong = tmp_path / "conf"
    shutil.copytree(yarn.conf_dir, wrong)
    site = wrong / "yarn-site.xml"
    port = free_port()
    site.write_text(site.read_text().replace(yarn.rm_address.split(":")[-1] + "<", f"{port}<"))
    monkeypatch.setenv("HADOOP_CONF_DIR", str(wrong))
    monkeypatch.setenv("YARN_CONF_DIR", str(wrong))
    dag = compaction_dag(table, spark_conn_id="spark_yarn_client", spark=yarn_spark(yarn))
    dag.get_task("rewrite_files").retries = 0
    started = time.monotonic()
    run = dag.test()
    took = time.monotonic() - started
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    output = capfd.readouterr()
    [said] = {line[line.index("rewrite_data_files") :] for line in (output.out + output.err).splitlines()
              if "did not start: spark-submit of Spark connection" in line}  # fmt: skip
    print(f"ResourceManager unreachable: the run ended {run.state} in {took:.1f} s, {states}; the task said: {said}")
    # The driver logs at WARN: no retry line, the client's giving up after RM_CONNECT_WAIT's 30 s names it.
    assert f"at localhost:{port} (it refused every connection until Hadoop's client gave up)" in said
    assert "Spark connection 'spark_yarn_client'" in said and str(wrong) in said
    assert run.state == "failed" and states["rewrite_files"] == "failed" and states["open_gate"] == "success"
    assert not gate_hook.get_state(table).pauses_writers
    assert TableStats.read("lake", table) == before


def test_on_a_warehouse_on_hdfs_compaction_in_cluster_mode_and_the_daily_full_rewrite_lose_no_commit(
    yarn, hdfs_catalog, unique_name, table_config, compaction_dag, gate_hook, tmp_path
):
    """A table whose warehouse is on HDFS, a gated Spark streaming MERGE writer committing every 3 s: the
    compaction DAG on YARN in cluster mode, then the daily full rewrite (with its upkeep: expiry, orphan files) on
    YARN in client mode; the health of the table read by pyiceberg from HDFS throughout."""
    table = TableName(hdfs_catalog, "yarn", unique_name)
    stream = IngestJob(table_config(str(table)), tmp_path / "stream", trigger_seconds=3.0, writer_id="events-merge")
    runs, closed = {}, {}
    try:
        stream.start().wait_for_batches(3)
        location = IcebergHook(hdfs_catalog).load_table(table.in_catalog).location()
        assert location.startswith(f"{yarn.default_fs}/warehouse/"), location
        before = TableStats.read(hdfs_catalog, table)
        for what, mode in (("compaction", "cluster"), ("full rewrite", "client")):
            stream.wait_for_batches(len(stream.batches()) + 2)
            settings = {"spark_conn_id": f"spark_yarn_{mode}", "spark": yarn_spark(yarn)}
            dag = compaction_dag(str(table), **settings, idle_seconds=1800, max_pause_seconds=4000)
            if what == "full rewrite":
                dag = load_dag(full_rewrite_dag_id(table))
            run = dag.test()
            assert run.state == "success", (what, {ti.task_id: ti.state for ti in run.get_task_instances()})
            runs[what] = run.get_task_instance("rewrite_files").xcom_pull(task_ids="rewrite_files")
            closed[what] = gate_hook.records.run_records(str(table))[-1]["gate_closed_seconds"]
    finally:
        final = stream.stop()
    after = TableStats.read(hdfs_catalog, table)
    files = IcebergHook(hdfs_catalog).load_table(table.in_catalog).inspect.files().to_pylist()
    apps = [(a["name"], a["finalStatus"]) for a in yarn.apps() if a["name"].endswith(f"-{table}")]
    counts = {what: xcom["rewrite_data_files"]["rewritten_data_files_count"] for what, xcom in runs.items()}
    print(
        f"warehouse on HDFS ({location}): data files {before.data_files} -> {after.data_files}; rewritten "
        + ", ".join(f"{what} {counts[what]} (gate closed {closed[what]:.1f} s)" for what in runs)
        + f"; YARN applications {apps}; the writer: {final['batches']} batches, {final['failed_commits']} failed"
    )
    assert (final["failed_commits"], final["exit_error"]) == (0, None), final["failures"]
    assert stream.processes_left() == []
    assert all(count > 0 for count in counts.values()), runs
    assert files and all(f["file_path"].startswith(f"{yarn.default_fs}/") for f in files)
    assert len(apps) >= 2 and {status for _, status in apps} == {"SUCCEEDED"}, apps
    arrow = IcebergHook(hdfs_catalog).load_table(table.in_catalog).scan().to_arrow()
    keys = arrow["key"].to_pylist()
    assert len(keys) == len(set(keys))
    rows = dict(zip(keys, zip(arrow["value"].to_pylist(), arrow["payload"].to_pylist(), strict=True), strict=True))
    assert rows == expected_rows(final["max_value"], stream.keys)
