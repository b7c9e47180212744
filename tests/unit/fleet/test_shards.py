"""Which compaction DAG file builds a table's DAGs: stable, balanced, and moving few tables when the list grows."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from airflow_iceberg.fleet.shards import dag_file_count, dag_file_of, jump_hash

NAMES = [f"lake.fleet.t{n:05d}" for n in range(10_000)]


@pytest.mark.parametrize(
    ("tables", "per_file", "files"), [(0, 1000, 1), (1, 1000, 1), (1000, 1000, 1), (1001, 1000, 2), (5000, 1000, 5)]
)
def test_a_list_takes_one_file_per_started_thousand_tables(tables, per_file, files):
    assert dag_file_count(tables, per_file) == files


def test_a_size_of_less_than_one_table_per_file_is_refused_naming_it():
    with pytest.raises(ValueError, match="got 0"):
        dag_file_count(10, 0)
    with pytest.raises(ValueError, match="got 0"):
        jump_hash(1, 0)


def test_a_tables_file_is_the_same_in_another_process_whatever_its_hash_seed():
    here = [dag_file_of(name, 7) for name in NAMES[:200]]
    code = (
        "from airflow_iceberg.fleet.shards import dag_file_of; "
        "print([dag_file_of(f'lake.fleet.t{n:05d}', 7) for n in range(200)])"
    )
    there = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONHASHSEED": "12345"}, capture_output=True, text=True, check=True
    )
    assert there.stdout.strip() == str(here)


@pytest.mark.parametrize("files", [1, 2, 5, 13])
def test_tables_spread_evenly_over_the_files(files):
    counts = Counter(dag_file_of(name, files) for name in NAMES)
    assert set(counts) == set(range(files))
    even = len(NAMES) / files
    assert all(abs(count - even) < 0.1 * even for count in counts.values()), counts


@pytest.mark.parametrize("files", [1, 2, 4, 9])
def test_one_file_more_moves_only_the_tables_it_takes(files):
    before = {name: dag_file_of(name, files) for name in NAMES}
    after = {name: dag_file_of(name, files + 1) for name in NAMES}
    moved = [name for name in NAMES if before[name] != after[name]]
    assert all(after[name] == files for name in moved)  # every moved table went to the new file
    expected = len(NAMES) / (files + 1)
    assert abs(len(moved) - expected) < 0.15 * expected
