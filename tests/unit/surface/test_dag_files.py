"""The compaction DAG files of a folder: their names, which tables each builds, and writing the further ones."""

from __future__ import annotations

from airflow_iceberg.surface.dag_files import (
    dag_file_index,
    dag_file_name,
    dag_file_text,
    files_built_by,
    write_dag_files,
)


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
