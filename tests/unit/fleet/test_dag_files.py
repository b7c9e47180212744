"""The compaction DAG files of a folder: their names, which tables each builds, and writing the further ones."""

from __future__ import annotations

from pathlib import Path

from airflow_iceberg.fleet.dag_files import (
    dag_file_index,
    dag_file_name,
    dag_file_text,
    dag_files_in_use,
    dag_files_taken,
    files_built_by,
    write_dag_files,
)
from airflow_iceberg.fleet.shards import dag_file_of
from airflow_iceberg.table_list.loader import read_table_list


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "iceberg_tables.yaml"
    path.write_text(text)
    return path


def test_file_zero_is_the_shipped_file_and_the_others_are_numbered():
    assert [dag_file_name(k) for k in range(3)] == [
        "iceberg_compaction.py",
        "iceberg_compaction_1.py",
        "iceberg_compaction_2.py",
    ]
    assert [dag_file_index(dag_file_name(k)) for k in range(12)] == list(range(12))
    # A copy under a name of one's own is file 0, as the shipped file is.
    assert dag_file_index("my_compaction.py") == dag_file_index("iceberg_compaction_0.py") == 0


def test_file_zero_builds_the_tables_of_each_file_missing_beside_it(tmp_path):
    zero = tmp_path / "iceberg_compaction.py"
    zero.touch()
    assert files_built_by(zero, 1) == {0}
    assert files_built_by(zero, 3) == {0, 1, 2}
    (tmp_path / "iceberg_compaction_2.py").touch()
    assert files_built_by(zero, 3) == {0, 1}
    assert files_built_by(tmp_path / "iceberg_compaction_2.py", 3) == {2}


def test_a_file_the_list_no_longer_reaches_builds_nothing(tmp_path):
    assert files_built_by(tmp_path / "iceberg_compaction_3.py", 3) == set()
    assert files_built_by(tmp_path / "iceberg_compaction_3.py", 4) == {3}


def test_writing_adds_the_missing_files_mends_changed_ones_and_removes_only_numbered_surplus_on_request(tmp_path):
    written, removed = write_dag_files(tmp_path, 3)
    assert [p.name for p in written] == ["iceberg_compaction_1.py", "iceberg_compaction_2.py"] and removed == []
    assert (tmp_path / "iceberg_compaction_2.py").read_text() == dag_file_text(2)
    assert "compaction_dag_file(__file__)" in dag_file_text(2)

    (tmp_path / "iceberg_compaction_1.py").write_text("# edited by hand\n")
    written, _ = write_dag_files(tmp_path, 3)
    assert [p.name for p in written] == ["iceberg_compaction_1.py"]  # file 2 was already the provider's text

    (tmp_path / "iceberg_compaction_backup.py").write_text("# the user's own\n")
    written, removed = write_dag_files(tmp_path, 2)
    assert written == [] and removed == []  # without remove_surplus, a surplus file stays (it builds nothing)
    written, removed = write_dag_files(tmp_path, 2, remove_surplus=True)
    assert [p.name for p in removed] == ["iceberg_compaction_2.py"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iceberg_compaction_1.py", "iceberg_compaction_backup.py"]


def test_a_list_takes_one_dag_file_per_started_tables_per_dag_file(tmp_path):
    listed = ", ".join(f"{{table: lake.db.t{n}}}" for n in range(7))
    assert dag_files_taken(read_table_list(write(tmp_path, f"tables: [{listed}]"))) == 1
    assert dag_files_taken(read_table_list(write(tmp_path, f"tables_per_dag_file: 3\ntables: [{listed}]"))) == 3


def test_the_dag_files_in_use_are_those_the_valid_names_hash_to(tmp_path):
    """Five tables and two bad entries take four files; the five names' hashes leave one of them empty, and a bad
    entry takes none."""
    listed = ", ".join(f"{{table: lake.db.t{n}}}" for n in range(5))
    document = read_table_list(write(tmp_path, f"tables_per_dag_file: 2\ntables: [{listed}, 7, {{table: 'a b'}}]"))
    expected = {dag_file_of(f"lake.db.t{n}", dag_files_taken(document)) for n in range(5)}
    assert dag_files_taken(document) == 4
    assert dag_files_in_use(document) == expected
    assert expected < set(range(4))
