"""A manual run's Params: what they change in the rewrites, and errors that name the parameter."""

from __future__ import annotations

import pendulum
import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg.config import TableConfig
from airflow_iceberg.dag_factory import build_compaction_dag, build_full_rewrite_dag
from airflow_iceberg.operators.run_params import (
    CheckRunParamsOperator,
    RunParamsError,
    overrides_from_params,
    run_params,
)

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


def check_operator(where: str | None, dry_run_filter: str | None = None) -> CheckRunParamsOperator:
    return CheckRunParamsOperator(
        task_id="check_run_params", table="lake.db.t", iceberg_conn_id="lake", where=where,
        dry_run_filter=dry_run_filter,
    )  # fmt: skip


def test_a_predicate_needing_the_logical_date_fails_a_run_without_one_with_a_sentence_that_says_so():
    op = check_operator("ts >= '{{ ds }}'")
    with pytest.raises(RunParamsError) as raised:
        op._check(params={"dry_run": False})  # a run triggered with logical_date null: no ds, no logical_date
    message = str(raised.value)
    assert message.startswith("the table's where \"ts >= '{{ ds }}'\" uses the run's logical date ('ds' is undefined)")
    assert "this run has none" in message and "Give the run its own 'where' in its conf" in message
    assert isinstance(raised.value, AirflowFailException)  # not retried: a retry has no logical date either


def test_a_run_with_its_own_where_never_renders_the_tables_predicate():
    op = check_operator("ts >= '{{ ds }}'", dry_run_filter="ts >= '{{ ds }}'")
    assert op._check(params={"where": "ts >= '2026-01-01'", "dry_run": False}) is True


def test_with_a_logical_date_the_tables_predicate_renders():
    op = check_operator("ts >= '{{ ds }}'")
    assert op._check(params={}, ds="2026-11-20", logical_date=pendulum.datetime(2026, 11, 20)) is True


def test_a_predicate_that_is_not_a_template_is_named():
    with pytest.raises(RunParamsError, match="is not a valid template: unexpected char") as raised:
        check_operator('ts >= {{ ds "')._check(params={}, ds="2026-11-20", logical_date=pendulum.now())
    assert "the table's where 'ts >= {{ ds \"'" in str(raised.value)


def test_a_bad_param_fails_without_retries():
    with pytest.raises(RunParamsError, match="param 'strategy'"):
        check_operator(None)._check(params={"strategy": "zigzag"})


def test_the_params_declare_draft_7_so_airflow_checks_them_cheaply():
    for name, param in run_params().items():
        assert param.schema["$schema"] == "http://json-schema.org/draft-07/schema#", name
        param.resolve()  # each default is valid under its declared dialect
