"""The rewrite operator: arguments checked at construction, the job it submits, and where it runs.

Where the rewrite runs is set by the Spark connection and the table's spark settings, never by code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from airflow_iceberg.core.job_secrets import JOB_SECRETS_FILE
from airflow_iceberg.core.lease import Lease, LeaseLostError
from airflow_iceberg.core.spark_job import JobArguments, format_result_line
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.spark_submit import IcebergSparkSubmitHook
from airflow_iceberg.operators.procedure import RUN_PROCEDURE_JOB, SPARK_JOBS_DIR
from airflow_iceberg.operators.rewrite import IcebergRewriteOperator
from airflow_iceberg.surface.dag_factory import build_compaction_dag
from airflow_iceberg.table_list.schema import TableConfig
from tests.unit.operators.fake_spark_submit import PushedXCom, fake_spark_submit, flag


def test_rewrite_operator_submits_the_installed_procedure_job():
    op = IcebergRewriteOperator(
        task_id="rewrite_files",
        table="lake.demo.events",
        procedures=["rewrite_data_files", "rewrite_position_delete_files"],
        options={"rewrite_data_files": {"min-input-files": 5}},
        where={"rewrite_data_files": "ts >= '{{ ds }}'"},
    )
    import airflow_iceberg.spark_jobs

    assert SPARK_JOBS_DIR.samefile(airflow_iceberg.spark_jobs.__path__[0])
    assert op.application == str(RUN_PROCEDURE_JOB) and RUN_PROCEDURE_JOB.is_file()
    assert op.py_files is None  # the core's zip is built when the task runs: a constructor does no I/O
    assert op.name == "iceberg-rewrite_data_files,rewrite_position_delete_files-lake.demo.events"
    assert op.table == TableName("lake", "demo", "events")
    assert op.iceberg_conn_id == "lake"  # the catalog's name by default
    assert "where" in op.template_fields
    assert set(IcebergRewriteOperator.template_fields) >= {"application", "conf", "jars", "where"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"table": "demo.events"}, "'demo.events' is not 'catalog.namespace.table'"),
        ({"procedures": ["drop_table"]}, "'drop_table' is not supported"),
        ({"options": {"rewrite_data_files": {"rewrite-all": "maybe"}}}, "option 'rewrite-all' must be a boolean"),
        ({"procedures": "rewrite_data_files"}, "procedures must be a list of distinct procedure names"),
        ({"procedures": []}, "procedures must be a list of distinct procedure names"),
        ({"where": {"rewrite_position_delete_files": "id > 1"}}, "where given for rewrite_position_delete_files"),
    ],
)
def test_rewrite_operator_refuses_bad_input_at_construction(kwargs, message):
    arguments = {"table": "lake.demo.events", "procedures": ["rewrite_data_files"], **kwargs}
    with pytest.raises(ValueError, match=message):  # InvalidCallError is a ValueError
        IcebergRewriteOperator(task_id="t", **arguments)


def spark_submit_command(monkeypatch, connection: dict, spark: dict) -> list[str]:
    """The spark-submit command the rewrite task's own hook builds for this connection and these settings."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps({"conn_type": "spark", **connection}))
    config = TableConfig.model_validate(
        {"table": "dl_test.ods.order_base_stream_v2", "spark_conn_id": "spark_cluster", "spark": spark}
    )
    task = build_compaction_dag(config).get_task("rewrite_files")
    return task._get_hook()._build_spark_submit_command(str(task.application))


def test_the_source_designs_yarn_submission_maps_onto_connection_and_table_settings(monkeypatch):
    # The source design: --master yarn --deploy-mode client --driver-memory 4G --num-executors 4
    # --executor-memory 8G --executor-cores 4 --queue root.default, and four --conf settings.
    command = spark_submit_command(
        monkeypatch,
        {"host": "yarn", "extra": {"deploy-mode": "client", "queue": "root.default"}},
        {
            "packages": ["org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"],
            "driver_memory": "4G",
            "num_executors": 4,
            "executor_memory": "8G",
            "executor_cores": 4,
            "conf": {
                "spark.sql.debug.maxToStringFields": "1000",
                "spark.rpc.message.maxSize": "1024",
                "spark.sql.legacy.timeParserPolicy": "LEGACY",
                "spark.sql.storeAssignmentPolicy": "ANSI",
            },
        },
    )
    assert flag(command, "--master") == "yarn"
    assert flag(command, "--deploy-mode") == "client"
    assert flag(command, "--queue") == "root.default"
    assert flag(command, "--driver-memory") == "4G"
    assert flag(command, "--num-executors") == "4"
    assert flag(command, "--executor-memory") == "8G"
    assert flag(command, "--executor-cores") == "4"
    assert flag(command, "--packages") == "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"
    confs = {command[i + 1] for i, part in enumerate(command) if part == "--conf"}
    assert {
        "spark.sql.debug.maxToStringFields=1000",
        "spark.rpc.message.maxSize=1024",
        "spark.sql.legacy.timeParserPolicy=LEGACY",
        "spark.sql.storeAssignmentPolicy=ANSI",
    } <= confs


def test_kubernetes_submission_comes_from_the_connection_too(monkeypatch):
    command = spark_submit_command(
        monkeypatch,
        {
            "host": "k8s://https://kubernetes.default.svc",
            "port": 443,
            "extra": {"deploy-mode": "cluster", "namespace": "spark"},
        },
        {
            "jars": ["local:///opt/iceberg/iceberg-spark-runtime-3.5_2.12-1.10.2.jar"],
            "conf": {"spark.kubernetes.container.image": "registry.example.com/airflow-iceberg-spark:0.1.0"},
        },
    )
    assert flag(command, "--master") == "k8s://https://kubernetes.default.svc:443"
    assert flag(command, "--deploy-mode") == "cluster"
    assert "spark.kubernetes.namespace=spark" in command
    assert flag(command, "--jars") == "local:///opt/iceberg/iceberg-spark-runtime-3.5_2.12-1.10.2.jar"


def gated_rewrite(where: str | None) -> IcebergRewriteOperator:
    return IcebergRewriteOperator(
        task_id="rewrite_files",
        table="lake.demo.events",
        procedures=["rewrite_data_files"],
        where={"rewrite_data_files": where} if where else None,
        apply_run_params=True,
    )


@pytest.mark.parametrize(
    ("reason", "advice"),
    [
        ("the write gate of lake.demo.events is no longer held by dag 'd' run 'r': its lease ended, another run took "
         "it over, or someone forced it open", "The gate's audit trail (`airflow-iceberg report`) says who took it."),
        ("the write gate of lake.demo.events has 4.0 s of lease left and reached the pause's ceiling "
         "(max_pause_seconds): no work may start or go on", "Raise the table's max_pause_seconds, or rewrite less"),
        ("the lease of the write gate of lake.demo.events ends in under 15 s and could not be renewed: writers resume "
         "when it ends", "Check that the gate's MySQL (connection 'write_gate_default') answers from the workers"),
    ],
    ids=["taken", "ceiling", "not-renewed"],
)  # fmt: skip
def test_a_rewrite_stopped_for_its_lease_says_why_and_what_to_do(reason, advice):
    op = IcebergRewriteOperator(
        task_id="rewrite_files",
        table="lake.demo.events",
        procedures=["rewrite_data_files"],
        write_gate_conn_id="write_gate_default",
    )
    message = str(op._failure(LeaseLostError(reason)))
    assert message.startswith(
        f"rewrite_data_files on lake.demo.events was stopped because its run could not keep the write gate: {reason}."
    )
    assert "Writers may commit now; each commit it completed before it stopped stays" in message
    assert advice in message
    if "no longer held" not in reason:  # the run still held the gate: never say it did not
        assert "no longer hold" not in message


def test_a_runs_own_where_replaces_the_tables_template_unrendered():
    op = gated_rewrite("ts >= '{{ ds }}'")  # would fail to render in a run without a logical date
    own = "note = 'a {{ in a value'"  # the run's text is data, never a template
    op.render_template_fields({"params": {"where": own}})
    assert op.where == {"rewrite_data_files": own}


def test_a_runs_own_where_that_holds_a_template_is_refused_not_taken_literally():
    op = gated_rewrite("ts >= '{{ ds }}'")
    own = "note = '{{ conn.lake.password }}'"
    with pytest.raises(ValueError, match=r"holds a template, but a run's own where is taken as written, never "):
        op.render_template_fields({"params": {"where": own}})
    assert op.where == {"rewrite_data_files": "ts >= '{{ ds }}'"}  # nothing replaced, nothing rendered


def test_without_a_runs_where_the_tables_template_is_rendered():
    op = gated_rewrite("ts >= '{{ ds }}'")
    op.render_template_fields({"params": {"where": None}, "ds": "2026-11-20"})
    assert op.where == {"rewrite_data_files": "ts >= '2026-11-20'"}


def rewrite_with_spark_submit(tmp_path: Path, monkeypatch, script: str) -> IcebergRewriteOperator:
    """An ungated rewrite whose spark-submit is a shell script (its output, then its exit status)."""
    fake_spark_submit(tmp_path, monkeypatch, script)
    op = gated_rewrite(None)
    op.apply_run_params = False
    return op


def test_a_commit_conflict_fails_the_rewrite_without_retries(tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    op = rewrite_with_spark_submit(
        tmp_path,
        monkeypatch,
        "echo 'py4j.protocol.Py4JJavaError: An error occurred while calling o42.sql.'\n"
        "echo ': org.apache.iceberg.exceptions.ValidationException: Cannot commit, found new position delete for "
        "replaced data file'\nexit 1\n",
    )
    with pytest.raises(AirflowFailException, match="lost an Iceberg commit conflict") as raised:
        op.execute({"outlet_events": {}})
    assert "Cannot commit, found new position delete" in str(raised.value)


#: Catalog connections with every kind of secret they can hold, and the secrets themselves.
SECRET_CATALOGS = {
    "jdbc-password": (
        {"extra": {"type": "sql", "uri": "mysql+pymysql://etl:Jdbc-s3cret@db:3306/cat", "warehouse": "s3://w/"}},
        ["Jdbc-s3cret"],
    ),
    "rest-token-and-header": (
        {
            "host": "https://catalog.example.com/api",
            "login": "client",
            "password": "Rest-s3cret",
            "extra": {"type": "rest", "token": "Rest-t0ken", "header.X-Api-Key": "Rest-h3ader"},
        },
        ["Rest-s3cret", "Rest-t0ken", "Rest-h3ader"],
    ),
    "glue-keys": (
        {"extra": {"type": "glue", "warehouse": "s3://w/", "glue.access-key-id": "AKIAGLUEKEY",
                   "glue.secret-access-key": "Glue-s3cret", "glue.session-token": "Glue-t0ken"}},
        ["AKIAGLUEKEY", "Glue-s3cret", "Glue-t0ken"],
    ),
}  # fmt: skip
GATE_PASSWORD = "Gate-s3cret"
#: Every deploy mode: the Spark connection, and whether the driver runs on the cluster.
DEPLOY_MODES = {
    "local": ({"host": "local[2]"}, False),
    "standalone-client": ({"host": "spark://master:7077", "extra": {"deploy-mode": "client"}}, False),
    "yarn-client": ({"host": "yarn", "extra": {"deploy-mode": "client", "queue": "etl"}}, False),
    "yarn-cluster": ({"host": "yarn", "extra": {"deploy-mode": "cluster"}}, True),
    "kubernetes-client": ({"host": "k8s://https://kube:6443", "extra": {"deploy-mode": "client"}}, False),
    "kubernetes-cluster": (
        {"host": "k8s://https://kube:6443", "extra": {"deploy-mode": "cluster", "namespace": "spark"}},
        True,
    ),
}


class StandingLease:
    """A lease whose renewals always leave five minutes."""

    table = "lake.demo.events"

    def renew(self) -> Lease:
        return Lease(seconds_left=300, at_pause_deadline=False)


EXITED = RuntimeError("spark-submit exited with 1")
REWROTE_NOTHING = format_result_line({"procedure": "rewrite_data_files", "rewritten_data_files_count": 0})


def submitted(
    monkeypatch,
    tmp_path,
    spark: dict,
    catalog: dict,
    report: Sequence[str] = (REWROTE_NOTHING,),
    output: Sequence[str] = (),
    ti: Any = None,
    fails: BaseException | None = None,
    **rewrite: Any,
) -> tuple[list[str], dict, int, Path]:
    """Run the gated rewrite task's execute with these connections, up to spark-submit, which is not started.

    ``rewrite`` overrides the operator's arguments (one ``rewrite_data_files`` on the whole table by default).
    The job is taken to have said ``report`` through the gate's MySQL and ``output`` on spark-submit's output, and
    to have failed with ``fails``, if given.
    Returns the command it would run, the secrets file's contents and mode at that moment, and the file.
    """
    from airflow_iceberg.core.gate_state import GateState
    from airflow_iceberg.hooks.write_gate import WriteGateHook

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", **spark}))
    monkeypatch.setenv("AIRFLOW_CONN_LAKE", json.dumps({"conn_type": "iceberg", **catalog}))
    gate = {"conn_type": "iceberg_write_gate", "host": "gate-db", "login": "airflow", "password": GATE_PASSWORD}
    monkeypatch.setenv("AIRFLOW_CONN_WRITE_GATE_DEFAULT", json.dumps({**gate, "schema": "gates"}))
    held = GateState("lake.demo.events", "closed", None, None, None, None, None, lease_seconds=300)
    # Renewing the lease needs the gate's MySQL, which these commands never reach.
    monkeypatch.setattr(WriteGateHook, "renew_lease", lambda self, table, owner: held)
    monkeypatch.setattr(WriteGateHook, "lease", lambda self, table, owner: StandingLease())
    seen = {}

    def job_report(hook, report_id: str) -> list[str]:  # what a job would have said through the gate's MySQL
        seen["report_id"] = report_id
        return list(report)

    monkeypatch.setattr(WriteGateHook, "job_report", job_report)

    def submit(hook, application: str = "", **kwargs):
        seen["command"] = hook._build_spark_submit_command(application)
        path = Path(flag(seen["command"], "--job-secrets"))
        local = path if path.is_absolute() else Path(flag(seen["command"], "--files").split(",")[-1])
        seen["file"], seen["secrets"], seen["mode"] = local, json.loads(local.read_text()), local.stat().st_mode
        for line in output:
            hook.answers.take(line)
        if fails is not None:
            raise fails
        return None

    monkeypatch.setattr(IcebergSparkSubmitHook, "submit", submit)
    op = IcebergRewriteOperator(
        **{
            "task_id": "rewrite_files",
            "table": "lake.demo.events",
            "procedures": ["rewrite_data_files"],
            "write_gate_conn_id": "write_gate_default",
            **rewrite,
        },
        durable=False,  # YARN cluster mode resumes only through the ResourceManager's REST API, not set up here
    )

    class Dag:
        dag_id = "iceberg_compact__lake__demo__events"

    class TaskInstance:  # where the task's XComs go; this test reads none of them
        def xcom_push(self, key, value):
            pass

    context = {"outlet_events": {}, "dag": Dag, "run_id": "manual__1", "params": {}, "ti": ti or TaskInstance()}
    op.execute(context)
    assert seen["report_id"] == seen["secrets"]["gate"]["report_id"]  # the task read the report it asked for
    return seen["command"], seen["secrets"], seen["mode"], seen["file"]


@pytest.mark.parametrize("catalog", list(SECRET_CATALOGS))
@pytest.mark.parametrize("mode", list(DEPLOY_MODES))
def test_no_secret_is_on_the_command_line_or_in_any_conf_in_any_deploy_mode(monkeypatch, tmp_path, mode, catalog):
    spark, cluster = DEPLOY_MODES[mode]
    connection, secrets = SECRET_CATALOGS[catalog]

    command, shipped, file_mode, secrets_file = submitted(monkeypatch, tmp_path, spark, connection)

    for secret in [*secrets, GATE_PASSWORD]:
        assert not any(secret in argument for argument in command), f"{secret} is on the command line"
    assert not any(a.startswith(("spark.yarn.appMasterEnv", "spark.kubernetes.driverEnv")) for a in command)
    # The job gets them in its secrets file, readable by this user alone, gone once the task is done.
    assert stat_mode(file_mode) == 0o600
    assert all(secret in json.dumps(shipped) for secret in [*secrets, GATE_PASSWORD])
    assert shipped["gate"]["lease_seconds"] == 300 and shipped["gate"]["run_id"] == "manual__1"
    assert len(shipped["gate"]["report_id"]) == 32  # where the job reports: the gate's MySQL, not its output
    assert not secrets_file.exists()
    job_secrets = flag(command, "--job-secrets")
    if cluster:  # shipped by spark-submit and found by name where the driver runs
        assert job_secrets == JOB_SECRETS_FILE and str(secrets_file) in flag(command, "--files").split(",")
    else:
        assert job_secrets == str(secrets_file) and "--files" not in command


def stat_mode(mode: int) -> int:
    return mode & 0o777


def test_a_python_job_in_cluster_mode_on_a_standalone_master_is_refused_before_anything_runs(monkeypatch, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    standalone_cluster = {"host": "spark://master:7077", "extra": {"deploy-mode": "cluster"}}
    with pytest.raises(AirflowFailException, match="'spark_default' asks for cluster deploy mode on a standalone"):
        submitted(monkeypatch, tmp_path, standalone_cluster, SECRET_CATALOGS["jdbc-password"][0])


@pytest.mark.parametrize(
    ("counts", "sentence"),
    [
        ({"failed_data_files_count": 29}, "left 29 data files as they were: 29 failed to rewrite"),
        (
            {"failed_data_files_count": 0, "planned_data_files_count": 40, "uncommitted_data_files_count": 7},
            "left 7 data files of 40 planned as they were: 7 were rewritten but their commit failed",
        ),
        (
            {"failed_data_files_count": 2, "planned_data_files_count": 40, "uncommitted_data_files_count": 7},
            "left 9 data files of 40 planned as they were: 2 failed to rewrite and 7 were rewritten but their "
            "commit failed",
        ),
    ],
)
def test_file_groups_that_failed_under_partial_progress_fail_the_rewrite_without_retries_and_say_so(
    tmp_path, monkeypatch, counts, sentence
):
    from airflow.sdk.exceptions import AirflowFailException

    result = {"rewritten_data_files_count": 4, "added_data_files_count": 1, **counts}
    line = format_result_line({"procedure": "rewrite_data_files", **result})
    op = rewrite_with_spark_submit(tmp_path, monkeypatch, f"echo '{line}'\n")
    ti = PushedXCom()
    with pytest.raises(AirflowFailException, match=f"On lake.demo.events, rewrite_data_files {sentence}") as raised:
        op.execute({"outlet_events": {}, "ti": ti})
    assert "file groups that did succeed were committed" in str(raised.value)
    assert ti.pushed == {"results": {"rewrite_data_files": result}, "partial_failure": f"rewrite_data_files {sentence}"}


@pytest.mark.parametrize("mode", ["yarn-cluster", "kubernetes-cluster", "yarn-client"])
def test_the_jobs_report_through_the_gates_mysql_gives_the_answers_of_its_output_in_every_deploy_mode(
    tmp_path, monkeypatch, mode
):
    """In cluster deploy mode the driver's output stays on the cluster: the report gives the same answers, a
    partial failure included, as spark-submit's output gives in client mode."""
    from airflow.sdk.exceptions import AirflowFailException

    result = {"rewritten_data_files_count": 4, "failed_data_files_count": 0, "planned_data_files_count": 40}
    result["uncommitted_data_files_count"] = 7
    line = format_result_line({"procedure": "rewrite_data_files", **result})
    output = [] if DEPLOY_MODES[mode][1] else [line]  # client mode: the output has it too
    ti = PushedXCom()
    with pytest.raises(AirflowFailException, match="rewrite_data_files left 7 data files of 40 planned as they were"):
        submitted(monkeypatch, tmp_path, DEPLOY_MODES[mode][0], SECRET_CATALOGS["jdbc-password"][0], [line], output, ti)
    assert ti.pushed["results"] == {"rewrite_data_files": result}


def test_a_cluster_mode_job_that_reported_nothing_fails_the_run_naming_the_gates_connection(tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(
        AirflowFailException,
        match="reported no result rows, neither through the gate's MySQL "
        r"\(connection 'write_gate_default'\)",
    ):
        submitted(monkeypatch, tmp_path, DEPLOY_MODES["yarn-cluster"][0], SECRET_CATALOGS["jdbc-password"][0], [])


def test_the_report_comes_first_and_the_output_gives_what_it_lacks(tmp_path, monkeypatch):
    """A line the job could not write to its report (the gate's MySQL away a moment) still counts from the output
    in client mode; a commit conflict named in the report fails the run as one named on the output does."""
    from airflow.sdk.exceptions import AirflowFailException

    partial = {"rewritten_data_files_count": 4, "failed_data_files_count": 3}
    line = format_result_line({"procedure": "rewrite_data_files", **partial})
    ti = PushedXCom()
    client, catalog = DEPLOY_MODES["yarn-client"][0], SECRET_CATALOGS["jdbc-password"][0]
    with pytest.raises(AirflowFailException, match="rewrite_data_files left 3 data files as they were"):
        submitted(monkeypatch, tmp_path, client, catalog, [], [line], ti)
    assert ti.pushed["results"] == {"rewrite_data_files": partial}
    conflict = "org.apache.iceberg.exceptions.ValidationException: Cannot commit, found new position delete"
    with pytest.raises(AirflowFailException, match="lost an Iceberg commit conflict.*found new position delete"):
        submitted(monkeypatch, tmp_path, DEPLOY_MODES["yarn-cluster"][0], catalog, [conflict], fails=EXITED)


def test_a_partial_progress_rewrite_that_committed_every_planned_file_succeeds(tmp_path, monkeypatch):
    result = {
        "rewritten_data_files_count": 40,
        "failed_data_files_count": 0,
        "planned_data_files_count": 40,
        "uncommitted_data_files_count": 0,
    }
    line = format_result_line({"procedure": "rewrite_data_files", **result})
    op = rewrite_with_spark_submit(tmp_path, monkeypatch, f"echo '{line}'\n")
    ti = PushedXCom()
    assert op.execute({"outlet_events": {}, "ti": ti}) == {"rewrite_data_files": result}
    assert "partial_failure" not in ti.pushed


def test_both_rewrites_go_to_one_spark_submit_in_order_each_with_its_own_predicate(monkeypatch, tmp_path):
    both = ["rewrite_data_files", "rewrite_position_delete_files"]
    command, *_ = submitted(
        monkeypatch,
        tmp_path,
        DEPLOY_MODES["local"][0],
        SECRET_CATALOGS["jdbc-password"][0],
        procedures=both,
        options={"rewrite_data_files": {"min-input-files": 5}, "rewrite_position_delete_files": {"rewrite-all": True}},
        where={"rewrite_data_files": "dt >= '20240620'"},
    )
    assert [c["procedure"] for c in JobArguments.calls_json(flag(command, "--calls"))] == both
    data, deletes = JobArguments.calls_json(flag(command, "--calls"))
    assert (data["options"], data["where"]) == ({"min-input-files": 5}, "dt >= '20240620'")
    assert (deletes["options"], deletes["where"]) == ({"rewrite-all": True}, None)
    assert command.count(str(RUN_PROCEDURE_JOB)) == 1


def test_a_where_of_its_own_is_parsed_before_spark_starts_and_a_bad_one_fails_naming_it():
    from airflow.sdk.exceptions import AirflowFailException

    op = gated_rewrite("ts >= '2026-11-20'; DROP TABLE lake.db.events")
    op.apply_run_params = False
    with pytest.raises(AirflowFailException, match="rewrite_data_files's where") as raised:
        op._calls({"params": {}})
    assert "DROP TABLE" in str(raised.value)


def test_each_compaction_folds_deletes_unless_the_table_says_otherwise_and_the_full_rewrite_always_does():
    from airflow_iceberg.surface.dag_factory import build_full_rewrite_dag

    def options(dag, procedure: str) -> dict:
        return dag.get_task("rewrite_files").options[procedure]

    folding = {"delete-file-threshold": 1, "remove-dangling-deletes": True}
    plain = TableConfig.model_validate({"table": "lake.cdc.orders"})
    assert options(build_compaction_dag(plain), "rewrite_data_files") == folding
    # Every delete file of the partitions it takes: it drops those the data rewrite left dangling, a single one too.
    assert options(build_compaction_dag(plain), "rewrite_position_delete_files") == {"rewrite-all": True}
    keeps_small_groups = TableConfig.model_validate(
        {"table": "lake.cdc.orders", "rewrite_position_delete_files": {"rewrite-all": False}}
    )
    assert options(build_compaction_dag(keeps_small_groups), "rewrite_position_delete_files") == {"rewrite-all": False}
    own = TableConfig.model_validate(
        {"table": "lake.cdc.orders", "rewrite_data_files": {"delete-file-threshold": 5, "min-input-files": 2}}
    )
    assert options(build_compaction_dag(own), "rewrite_data_files") == {
        "delete-file-threshold": 5,
        "remove-dangling-deletes": True,
        "min-input-files": 2,
    }
    full = build_full_rewrite_dag(plain)
    assert options(full, "rewrite_data_files")["remove-dangling-deletes"] is True
    assert options(full, "rewrite_data_files")["rewrite-all"] is True
    assert "remove-dangling-deletes" not in options(full, "rewrite_position_delete_files")  # not an option of it


def test_what_the_rewrite_task_does_before_spark_submit_imports_neither_pyiceberg_nor_sqlglot():
    # Writers are paused while the rewrite task runs: it reads its Iceberg connection and follows the plan,
    # whose predicates the plan task parsed before the gate closed, without loading either library (0.7 s).
    script = """
import sys
from unittest import mock
from airflow_iceberg.hooks.catalogs import spark_settings_for_connection
from airflow_iceberg.operators.rewrite import IcebergRewriteOperator
spark_settings_for_connection("lake", "lake")
op = IcebergRewriteOperator(task_id="rewrite_files", table="lake.db.events", plan_task_id="plan_compaction",
                            procedures=["rewrite_data_files"])
plan = {"predicates": {"rewrite_data_files": "ts >= TIMESTAMP '2026-11-22 00:00:00+00:00'"},
        "partitions": {"rewrite_data_files": ["ts_day=2026-11-22"]}, "decision": "compact", "reason": "r"}
ti = mock.Mock(xcom_pull=mock.Mock(return_value=plan))
[call] = op._calls({"ti": ti, "params": {}})
assert call.where == plan["predicates"]["rewrite_data_files"], call
loaded = sorted(m for m in sys.modules if m.startswith(("pyiceberg", "sqlglot")))
assert not loaded, loaded
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.splitlines()[-1] == "ok", result.stderr[-3000:]


def test_a_rewrite_takes_its_predicates_from_a_plan_or_from_where_never_both():
    with pytest.raises(ValueError, match="takes where or plan_task_id, not both") as raised:
        IcebergRewriteOperator(
            task_id="rewrite_files",
            table="lake.db.t",
            plan_task_id="plan_compaction",
            where={"rewrite_data_files": "x"},
        )
    assert "'plan_compaction'" in str(raised.value) and "'rewrite_data_files': 'x'" in str(raised.value)


def test_a_pre_started_try_after_a_stop_ends_before_spark_starts(monkeypatch):
    """A retry of a pre-started rewrite whose run was told to stop (the idle wait failed, or saw the try before go
    silent) fails at once, starting no Spark: the writers wait for it to end."""
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_iceberg.core.gate_state import GateOwner
    from airflow_iceberg.core.gate_work import WorkLook

    reason = "wait_until_snapshot_idle failed: the rewrite's Spark application has not said it is alive for 11 s"
    stops: list[str] = []

    class Handshake:
        attempt = 0
        table = "lake.demo.events"

        def look(self):
            return WorkLook(GateOwner("d", "r"), datetime.now(timezone.utc), stop_reason=reason)

        def stop(self, why):
            stops.append(why)

        def close(self):
            pass

    def no_spark(*args, **kwargs):
        raise AssertionError("spark-submit started")

    op = IcebergRewriteOperator(
        task_id="rewrite_files",
        table="lake.demo.events",
        procedures=["rewrite_data_files"],
        write_gate_conn_id="gate",
        wait_for_go_seconds=60,
    )
    monkeypatch.setattr(op, "_handshake", lambda context: Handshake())
    monkeypatch.setattr(SparkSubmitOperator, "execute", no_spark)
    context = {
        "ti": SimpleNamespace(try_number=2),
        "dag": SimpleNamespace(dag_id="d"),
        "run_id": "r",
        "dag_run": SimpleNamespace(clear_number=0),
        "params": {},
    }
    with pytest.raises(AirflowFailException, match=r"did not run: wait_until_snapshot_idle failed: .* No CALL ran"):
        op.execute(context)
    assert stops and stops[0].startswith("rewrite_files failed: ")  # the stop stays said, for any later try


def test_yarn_cluster_mode_with_the_resource_managers_address_is_tracked_and_killed_there_as_the_submitting_user(
    monkeypatch, tmp_path
):
    import requests

    from airflow_iceberg.hooks.spark_submit import HadoopSimpleAuth

    monkeypatch.setenv("HADOOP_USER_NAME", "etl")
    extra = {"deploy-mode": "cluster", "yarn_resourcemanager_webapp_address": "http://rm:8088"}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "yarn", "extra": extra}))
    op = IcebergRewriteOperator(task_id="rewrite_files", table="lake.demo.events", procedures=["rewrite_data_files"])
    assert op.durable is False  # each try submits its own application
    hook = op._get_hook()
    assert hook._yarn_track_via_rm_api and isinstance(hook._yarn_rm_auth, HadoopSimpleAuth)
    sent = requests.Request("PUT", "http://rm:8088/ws/v1/cluster/apps/application_1_1/state").prepare()
    assert hook._yarn_rm_auth(sent).url.endswith("/state?user.name=etl")  # else: 401, user not authenticated
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "yarn"}))
    plain = IcebergRewriteOperator(task_id="r", table="lake.demo.events", procedures=["rewrite_data_files"])
    assert not plain._get_hook()._yarn_track_via_rm_api  # client mode, or no address: spark-submit waits


def test_a_rewrite_whose_spark_submit_fails_or_times_out_ends_its_application(monkeypatch, tmp_path):
    """Airflow calls on_kill only for a task killed from outside; in cluster mode the application outlives the
    failed try unless the task ends it."""
    from airflow.sdk.exceptions import AirflowTaskTimeout

    killed = []
    monkeypatch.setattr(IcebergSparkSubmitHook, "on_kill", lambda hook: killed.append(hook))
    cluster, catalog = DEPLOY_MODES["yarn-cluster"][0], SECRET_CATALOGS["jdbc-password"][0]
    with pytest.raises(RuntimeError, match="spark-submit exited with 1"):
        submitted(monkeypatch, tmp_path, cluster, catalog, fails=EXITED)
    with pytest.raises(AirflowTaskTimeout):  # a BaseException: execution_timeout's
        submitted(monkeypatch, tmp_path, cluster, catalog, fails=AirflowTaskTimeout("Timeout, PID: 1"))
    assert len(killed) == 2


def test_a_resource_manager_that_refuses_spark_submit_fails_the_rewrite_naming_the_connection_and_what_to_check(
    tmp_path, monkeypatch
):
    """Hadoop's client would retry for 15 minutes with writers paused: spark-submit is ended after 10 refused
    tries, and the task says which server, through which connection, and where its address comes from."""
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv("HADOOP_CONF_DIR", "/etc/hadoop/conf")
    retry = (
        "echo 'INFO Client: Retrying connect to server: rm.example.com/10.0.0.5:8032. Already tried {n} time(s); "
        "retry policy is RetryUpToMaximumCountWithFixedSleep(maxRetries=10, sleepTime=1000 MILLISECONDS)'\n"
    )
    script = "echo 'INFO Connecting to ResourceManager at rm.example.com/10.0.0.5:8032'\n"
    script += "".join(retry.format(n=n) for n in range(10)) + "exec sleep 30\n"  # it would go on: 0 if let be
    op = rewrite_with_spark_submit(tmp_path, monkeypatch, script)
    with pytest.raises(
        AirflowFailException, match="did not start: spark-submit of Spark connection 'spark_default'"
    ) as raised:
        op.execute({"outlet_events": {}})
    message = str(raised.value)
    assert "could not reach YARN's ResourceManager at rm.example.com/10.0.0.5:8032" in message
    assert "it refused 10 tries" in message and "HADOOP_CONF_DIR (/etc/hadoop/conf)" in message
    assert "Nothing was submitted" in message


@pytest.mark.parametrize("mode", ["yarn-client", "yarn-cluster", "local", "kubernetes-cluster"])
def test_on_yarn_the_jobs_wait_for_the_resource_manager_is_30_s_not_hadoops_15_minutes(monkeypatch, tmp_path, mode):
    command, *_ = submitted(monkeypatch, tmp_path, DEPLOY_MODES[mode][0], SECRET_CATALOGS["jdbc-password"][0])
    bounded = "spark.hadoop.yarn.resourcemanager.connect.max-wait.ms=30000"
    assert (bounded in command) == mode.startswith("yarn")
    if mode == "yarn-client":  # the table's own spark.conf wins
        conf = {"spark.hadoop.yarn.resourcemanager.connect.max-wait.ms": "120000"}
        command, *_ = submitted(
            monkeypatch, tmp_path, DEPLOY_MODES[mode][0], SECRET_CATALOGS["jdbc-password"][0], conf=conf
        )
        assert "spark.hadoop.yarn.resourcemanager.connect.max-wait.ms=120000" in command and bounded not in command
