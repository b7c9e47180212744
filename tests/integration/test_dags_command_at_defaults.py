"""``airflow-iceberg dags`` at Airflow's defaults: a compaction DAG file it writes is parsed within seconds.

Without the fleet setting's DAG bundle, Airflow's dag-processor lists the DAG folder every 5 minutes
(``[dag_processor] refresh_interval``) and parses ``iceberg_compaction.py`` every 30 s: a table list grown into a
new file would have the tables moving there dropped by ``iceberg_compaction.py`` long before the new file is found.
The command therefore asks the dag-processor to parse the files it writes at once (a priority parsing request, as
the UI's reparse button makes). Here a real ``airflow dag-processor``, on a metadata database of its own and with
every setting at Airflow's default, must store the new file's DAGs well within those 5 minutes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import yaml

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.fleet.dag_files import dag_file_name
from airflow_iceberg.fleet.shards import dag_file_of
from airflow_iceberg.surface.dag_factory import compaction_dag_id
from devkit.faults import wait_for
from devkit.live_airflow import postgres, postgres_url

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
#: How soon the new file's DAGs must be stored after the command: a fifth of Airflow's default listing interval.
PARSED_WITHIN_SECONDS = 60


def _write_list(folder: Path, tables: list[str]) -> None:
    document = {"tables_per_dag_file": 1, "tables": [{"table": name} for name in tables]}
    (folder / "iceberg_tables.yaml").write_text(yaml.safe_dump(document))


def _file_of(database: str, dag_id: str) -> str | None:
    with closing(postgres(database)) as db, db.cursor() as cursor:
        cursor.execute("SELECT relative_fileloc FROM dag WHERE dag_id = %s AND NOT is_stale", (dag_id,))
        row = cursor.fetchone()
    return row[0] if row else None


def test_a_file_the_dags_command_writes_is_parsed_within_seconds_at_airflows_defaults(tmp_path, unique_name):
    database = f"airflow_iceberg_{unique_name}"
    with closing(postgres()) as db, db.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{database}"')
    folder = tmp_path / "dags"
    folder.mkdir()
    # Once the list takes two files of one table each: the first table stays in iceberg_compaction.py, the second
    # goes to iceberg_compaction_1.py, by their names' hashes.
    names = [f"lake.cli.{unique_name}_{n}" for n in range(100)]
    first = next(name for name in names if dag_file_of(name, 2) == 0)
    second = next(name for name in names if dag_file_of(name, 2) == 1)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres_url(database),
        "AIRFLOW__CORE__DAGS_FOLDER": str(folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_ICEBERG_CONFIG": str(folder / "iceberg_tables.yaml"),
    }
    # Airflow's defaults for what this is about, whatever the calling environment sets.
    for name in [n for n in env if n.startswith("AIRFLOW__DAG_PROCESSOR__")]:
        del env[name]
    command = str(Path(sys.executable).with_name("airflow-iceberg"))
    processor = None
    try:
        subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True)
        _write_list(folder, [first])
        subprocess.run([command, "dags", str(folder)], env=env, check=True, capture_output=True)
        log = (tmp_path / "dag-processor.log").open("w")
        processor = subprocess.Popen(
            [AIRFLOW, "dag-processor"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        wait_for("the first table's DAG", lambda: _file_of(database, compaction_dag_id(TableName.parse(first))), 180)

        _write_list(folder, [first, second])
        asked = time.monotonic()
        done = subprocess.run([command, "dags", str(folder)], env=env, check=True, capture_output=True, text=True)
        print(done.stdout)
        assert "asked Airflow's dag-processor to parse iceberg_compaction_1.py of DAG bundle 'dags-folder' now" in (
            done.stdout
        )
        new_dag = compaction_dag_id(TableName.parse(second))
        wait_for(
            f"{new_dag} stored from {dag_file_name(1)}",
            lambda: _file_of(database, new_dag) == dag_file_name(1),
            PARSED_WITHIN_SECONDS,
        )
        print(
            f"{dag_file_name(1)}'s DAGs stored {time.monotonic() - asked:.1f} s after the command "
            f"(Airflow lists the folder every 300 s; goal: {PARSED_WITHIN_SECONDS} s)"
        )
        assert _file_of(database, compaction_dag_id(TableName.parse(first))) == dag_file_name(0)
    finally:
        if processor is not None:
            os.killpg(processor.pid, signal.SIGTERM)
            try:
                processor.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(processor.pid, signal.SIGKILL)
                processor.wait()
        with closing(postgres()) as db, db.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
