"""A manual run's Params: what they change in the rewrites, and errors that name the parameter."""

from __future__ import annotations

import pytest

from airflow_iceberg.config import TableConfig
from airflow_iceberg.dag_factory import build_compaction_dag, build_full_rewrite_dag
from airflow_iceberg.operators.run_params import overrides_from_params, run_params

DEFAULTS = {name: param.value for name, param in run_params().items()}


def test_both_dag_kinds_declare_every_param_with_a_schema_and_a_description():
    config = TableConfig(table="lake.sales.orders")
    for dag in (build_compaction_dag(config), build_full_rewrite_dag(config)):
        assert set(dag.params) == set(DEFAULTS)
        for name in DEFAULTS:
            param = dag.params.get_param(name)
            assert param.description, name
            assert param.schema.get("type"), name


def test_default_params_change_nothing():
    assert overrides_from_params(DEFAULTS) == overrides_from_params({})
    overrides = overrides_from_params(DEFAULTS)
    assert overrides.where is None and not overrides.dry_run
    assert overrides.arguments.get("rewrite_data_files", {}) == {}


def test_params_become_options_arguments_and_predicate():
    overrides = overrides_from_params(
        {
            **DEFAULTS,
            "where": "dt >= '20261120'",
            "rewrite_all": True,
            "target_file_size_bytes": 268435456,
            "min_input_files": 3,
            "partial_progress": True,
            "strategy": "sort",
            "sort_order": "id DESC NULLS LAST",
            "dry_run": True,
        }
    )
    expected = {
        "rewrite-all": True,
        "target-file-size-bytes": 268435456,
        "min-input-files": 3,
        "partial-progress.enabled": True,
    }
    assert overrides.options == {"rewrite_data_files": expected, "rewrite_position_delete_files": expected}
    assert overrides.arguments == {"rewrite_data_files": {"strategy": "sort", "sort_order": "id DESC NULLS LAST"}}
    assert overrides.where == "dt >= '20261120'" and overrides.dry_run


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"min_input_files": 0}, "param 'min_input_files'"),
        ({"target_file_size_bytes": "big"}, "param 'target_file_size_bytes'"),
        ({"partial_progress": "sometimes"}, "param 'partial_progress'"),
        ({"strategy": "zorder"}, "param 'strategy'"),
        ({"strategy": "sort", "sort_order": "id; DROP TABLE x"}, "param 'sort_order'"),
        ({"sort_order": "id"}, "param 'sort_order'"),
        ({"dry_run": "yes"}, "param 'dry_run'"),
    ],
)
def test_a_bad_param_is_refused_by_name(params, named):
    with pytest.raises(ValueError, match=named):
        overrides_from_params({**DEFAULTS, **params})
