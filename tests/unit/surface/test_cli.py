"""``airflow-iceberg dags``: the DAG files a deployment needs come from the wheel, not from a checkout."""

from __future__ import annotations

import io
from pathlib import Path

from airflow_iceberg.surface import cli

DAGS = Path(__file__).resolve().parents[3] / "dags"


def test_dags_writes_the_shipped_dag_files_and_the_example_table_list(tmp_path: Path):
    out = io.StringIO()
    assert cli._dags(cli.parser().parse_args(["dags", str(tmp_path)]), out) == 0
    for name in (*cli.DAG_FILES, cli.EXAMPLE_TABLE_LIST):
        assert (tmp_path / name).read_text() == (DAGS / name).read_text(), name
    assert f"wrote {tmp_path / 'iceberg_compaction.py'}" in out.getvalue()


def test_dags_refreshes_the_dag_files_but_never_overwrites_a_table_list(tmp_path: Path):
    (tmp_path / "iceberg_tables.yaml").write_text("tables: [{table: lake.sales.orders}]\n")
    (tmp_path / "iceberg_compaction.py").write_text("# an older provider's file\n")
    out = io.StringIO()
    cli._dags(cli.parser().parse_args(["dags", str(tmp_path)]), out)
    assert (tmp_path / "iceberg_tables.yaml").read_text() == "tables: [{table: lake.sales.orders}]\n"
    assert (tmp_path / "iceberg_compaction.py").read_text() == (DAGS / "iceberg_compaction.py").read_text()
    assert f"left {tmp_path / 'iceberg_tables.yaml'} as it is" in out.getvalue()


def test_dags_names_a_folder_that_is_not_there(tmp_path: Path, capsys):
    missing = tmp_path / "no-such-folder"
    assert cli.main(["dags", str(missing)]) == 2
    assert f"{missing} is not a directory" in capsys.readouterr().err
    assert not missing.exists()
