"""A long table list split across several compaction DAG files, as Airflow's DagBag loads the folder: every
table's DAGs exactly once, each in the file its name's hash picks, with a clear import error while files are
missing, and few DAGs moving when the list grows."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import yaml
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.definitions.context import _AIRFLOW_PARSING_CONTEXT_DAG_ID, _AIRFLOW_PARSING_CONTEXT_TASK_ID

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.fleet.dag_files import dag_file_name
from airflow_iceberg.fleet.shards import dag_file_of
from airflow_iceberg.surface import cli
from airflow_iceberg.surface.dag_factory import compaction_dag_id, full_rewrite_dag_id

PER_FILE = 10


def tables(count: int) -> list[str]:
    return [f"lake.fleet.t{n:03d}" for n in range(count)]


def dag_folder(tmp_path: Path, monkeypatch, count: int) -> Path:
    """The provider's DAG files in a folder of their own (``airflow-iceberg dags``), with a list of ``count``
    tables at ``PER_FILE`` a file; the further files are those the command wrote."""
    folder = tmp_path / "dags"
    folder.mkdir(exist_ok=True)
    write_list(folder, count)
    monkeypatch.setenv("AIRFLOW_ICEBERG_CONFIG", str(folder / "iceberg_tables.yaml"))
    assert cli._dags(cli.parser().parse_args(["dags", str(folder)]), io.StringIO()) == 0
    return folder


def write_list(folder: Path, count: int) -> None:
    document = {"tables_per_dag_file": PER_FILE, "tables": [{"table": name} for name in tables(count)]}
    (folder / "iceberg_tables.yaml").write_text(yaml.safe_dump(document))


def files_of_dags(folder: Path) -> dict[str, str]:
    bag = DagBag(dag_folder=str(folder))
    assert bag.import_errors == {}, bag.import_errors
    return {dag_id: Path(dag.fileloc).name for dag_id, dag in bag.dags.items()}


def test_a_list_of_25_tables_at_10_a_file_is_built_by_three_files_each_table_by_its_hashs_file(tmp_path, monkeypatch):
    folder = dag_folder(tmp_path, monkeypatch, 25)
    assert sorted(p.name for p in folder.glob("iceberg_compaction*.py")) == [
        "iceberg_compaction.py",
        "iceberg_compaction_1.py",
        "iceberg_compaction_2.py",
    ]
    where = files_of_dags(folder)
    expected = {}
    for name in tables(25):
        table = TableName.parse(name)
        expected[compaction_dag_id(table)] = expected[full_rewrite_dag_id(table)] = dag_file_name(dag_file_of(name, 3))
    assert where == expected
    assert len(set(where.values())) == 3  # each file builds some


def test_while_files_are_missing_file_zero_builds_their_tables_and_the_check_file_says_how_to_make_them(
    tmp_path, monkeypatch
):
    folder = dag_folder(tmp_path, monkeypatch, 25)
    (folder / "iceberg_compaction_2.py").unlink()
    bag = DagBag(dag_folder=str(folder))
    assert len(bag.dags) == 50  # no table lost its DAGs
    moved = {
        Path(bag.dags[compaction_dag_id(TableName.parse(n))].fileloc).name for n in tables(25) if dag_file_of(n, 3) == 2
    }
    assert moved == {"iceberg_compaction.py"}
    [(path, message)] = bag.import_errors.items()
    assert path.endswith("iceberg_table_list_check.py")
    assert "lists 25 tables, which take 3 compaction DAG files of at most 10 tables (tables_per_dag_file)" in message
    assert f"{folder} lacks iceberg_compaction_2.py" in message
    assert f"Run `airflow-iceberg dags {folder}`" in message


def test_growing_the_list_by_a_file_moves_only_the_tables_the_new_file_takes(tmp_path, monkeypatch):
    before = files_of_dags(dag_folder(tmp_path, monkeypatch, 30))
    after = files_of_dags(dag_folder(tmp_path, monkeypatch, 35))
    moved = {dag_id for dag_id in before if before[dag_id] != after[dag_id]}
    assert {after[dag_id] for dag_id in moved} == {"iceberg_compaction_3.py"}
    assert 0 < len(moved) < len(before) / 2
    assert set(after) - set(before) == {
        f(TableName.parse(n)) for n in tables(35)[30:] for f in (compaction_dag_id, full_rewrite_dag_id)
    }


def _parse_requests(bundle: str) -> list[str]:
    from airflow.models.dagbag import DagPriorityParsingRequest
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(DagPriorityParsingRequest.relative_fileloc).where(
            DagPriorityParsingRequest.bundle_name == bundle
        )
        return sorted(session.scalars(query))


def test_the_command_asks_airflow_to_parse_the_files_it_writes_at_once(tmp_path, monkeypatch):
    """At Airflow's defaults the dag-processor lists a DAG folder every 5 minutes, and parses iceberg_compaction.py,
    which no longer builds the tables that moved, every 30 s: a request in Airflow's metadata database (the UI's
    reparse) has it list the folder and parse the new file first."""
    bundle = f"split-{os.getpid()}"
    folder = tmp_path / "dags"
    folder.mkdir()
    config = [{"name": bundle, "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle", "kwargs": {}}]
    config[0]["kwargs"]["path"] = str(tmp_path)  # the bundle holds the folder, a level up
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(config))
    try:
        write_list(folder, 15)
        monkeypatch.setenv("AIRFLOW_ICEBERG_CONFIG", str(folder / "iceberg_tables.yaml"))
        out = io.StringIO()
        assert cli._dags(cli.parser().parse_args(["dags", str(folder)]), out) == 0
        assert _parse_requests(bundle) == ["dags/iceberg_compaction_1.py"]
        said = f"asked Airflow's dag-processor to parse dags/iceberg_compaction_1.py of DAG bundle {bundle!r} now"
        assert said in out.getvalue()

        write_list(folder, 25)  # grown again before the dag-processor claimed the first request: no duplicate
        assert cli._dags(cli.parser().parse_args(["dags", str(folder)]), io.StringIO()) == 0
        assert _parse_requests(bundle) == ["dags/iceberg_compaction_1.py", "dags/iceberg_compaction_2.py"]
    finally:
        from airflow.models.dagbag import DagPriorityParsingRequest
        from airflow.utils.session import create_session
        from sqlalchemy import delete

        with create_session() as session:
            session.execute(delete(DagPriorityParsingRequest).where(DagPriorityParsingRequest.bundle_name == bundle))


def test_a_folder_in_no_dag_bundle_gets_its_files_and_says_when_airflow_finds_them(tmp_path, monkeypatch):
    out = io.StringIO()
    folder = tmp_path / "dags"
    folder.mkdir()
    write_list(folder, 15)
    monkeypatch.setenv("AIRFLOW_ICEBERG_CONFIG", str(folder / "iceberg_tables.yaml"))
    assert cli._dags(cli.parser().parse_args(["dags", str(folder)]), out) == 0
    assert (folder / "iceberg_compaction_1.py").exists()
    assert f"{folder} is in none of Airflow's DAG bundles here: Airflow finds them at its next listing" in (
        out.getvalue()
    )


def test_shrinking_the_list_removes_the_files_it_no_longer_takes(tmp_path, monkeypatch):
    dag_folder(tmp_path, monkeypatch, 25)
    folder = dag_folder(tmp_path, monkeypatch, 8)
    assert sorted(p.name for p in folder.glob("iceberg_compaction*.py")) == ["iceberg_compaction.py"]
    assert set(files_of_dags(folder).values()) == {"iceberg_compaction.py"}


def test_a_task_builds_its_own_dag_from_whichever_file_it_parses(tmp_path, monkeypatch):
    """A table that moved to another file since the run started still gets its DAG in the task's process."""
    folder = dag_folder(tmp_path, monkeypatch, 25)
    name = next(n for n in tables(25) if dag_file_of(n, 3) == 1)
    dag_id = compaction_dag_id(TableName.parse(name))
    # Airflow's parsing context, as a task's process has it (monkeypatch, not Airflow's own context manager, which
    # leaves the variables set in this process after it).
    monkeypatch.setenv(_AIRFLOW_PARSING_CONTEXT_DAG_ID, dag_id)
    monkeypatch.setenv(_AIRFLOW_PARSING_CONTEXT_TASK_ID, "open_gate")
    for file in ("iceberg_compaction_1.py", "iceberg_compaction_2.py"):
        bag = DagBag(dag_folder=str(folder / file), collect_dags=False)
        bag.process_file(str(folder / file))
        assert bag.dag_ids == [dag_id], file


def test_the_parsing_context_is_gone_after_a_test_that_set_it():
    """The test above sets Airflow's parsing context; left in the process, every later parse would build one DAG."""
    assert _AIRFLOW_PARSING_CONTEXT_DAG_ID not in os.environ
