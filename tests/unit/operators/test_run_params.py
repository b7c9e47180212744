"""A manual run's Params: what they change in the rewrites, and errors that name the parameter."""

from __future__ import annotations

import pendulum
import pytest
from airflow.sdk.exceptions import AirflowFailException
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, TimestamptzType

from airflow_iceberg.core.procedures import REWRITE_PROCEDURES
from airflow_iceberg.exceptions import RunParamsError
from airflow_iceberg.operators.plan import PlanCompactionOperator
from airflow_iceberg.operators.run_params import overrides_from_params, run_params
from airflow_iceberg.surface.dag_factory import build_compaction_dag, build_full_rewrite_dag
from airflow_iceberg.table_list.schema import TableConfig

DEFAULTS = {name: param.value for name, param in run_params().items()}


def test_both_dag_kinds_declare_every_param_with_a_schema_and_a_description():
    config = TableConfig(table="lake.sales.orders")
    for dag in (build_compaction_dag(config), build_full_rewrite_dag(config)):
        assert set(dag.params) == set(DEFAULTS)
        for name in DEFAULTS:
            param = dag.params.get_param(name)
            assert param.description, name
            assert param.schema.get("type"), name
        # They join the DAG after it is built, so Airflow does not check them then: each default must be valid.
        assert dag.params.validate() == DEFAULTS


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
        ({"where": ""}, "param 'where' is empty"),
        ({"where": "dt = '2026"}, "param 'where' \"dt = '2026\" is not valid Spark SQL"),
        ({"where": "id > 0; DROP TABLE x"}, "param 'where' .* must be one condition"),
        ({"where": "dt >= '{{ ds }}'"}, "param 'where' .* holds a template, but a run's own where is taken as "),
        ({"rewrite_data_files_where": "dt >= '{{ ds }}'"}, "param 'rewrite_data_files_where' .* holds a template"),
        ({"where": 3}, "param 'where' must be a Spark SQL predicate string"),
    ],
)
def test_a_bad_param_is_refused_by_name(params, named):
    with pytest.raises(ValueError, match=named):
        overrides_from_params({**DEFAULTS, **params})


class FakeIcebergTable:
    """What the check of a run's Params reads of a table when the run is not a dry run: its schema."""

    def schema(self) -> Schema:
        return Schema(NestedField(1, "id", LongType()), NestedField(2, "ts", TimestamptzType()))


def check(op: PlanCompactionOperator, **context) -> dict:
    """plan_compaction's check of a run's Params, on the table as its ``_load_table`` reads it."""
    return op.check_run_params(context, lambda: op._load_table().schema())


def check_operator(where: str | None, monkeypatch: pytest.MonkeyPatch) -> PlanCompactionOperator:
    """plan_compaction, whose first step is the check (``RunParamsCheck``)."""
    op = PlanCompactionOperator(
        task_id="plan_compaction",
        table="lake.db.t",
        iceberg_conn_id="lake",
        write_gate_conn_id="write_gate_default",
        thresholds=None,
        where=dict.fromkeys(REWRITE_PROCEDURES, where),
    )
    monkeypatch.setattr(op, "_load_table", FakeIcebergTable)
    return op


def test_a_predicate_needing_the_logical_date_fails_a_run_without_one_with_a_sentence_that_says_so(monkeypatch):
    op = check_operator("ts >= '{{ ds }}'", monkeypatch)
    with pytest.raises(RunParamsError) as raised:
        check(op, params={"dry_run": False})  # a run triggered with logical_date null: no ds, no logical_date
    message = str(raised.value)
    assert message.startswith(
        "the table's where for rewrite_data_files \"ts >= '{{ ds }}'\" uses the run's logical date ('ds' is undefined)"
    )
    assert "this run has none" in message and "Give the run its own 'where' in its conf" in message
    assert isinstance(raised.value, AirflowFailException)  # not retried: a retry has no logical date either


def test_a_run_with_its_own_where_never_renders_the_tables_predicate(monkeypatch):
    op = check_operator("ts >= '{{ ds }}'", monkeypatch)
    assert check(op, params={"where": "ts >= '2026-01-01'", "dry_run": False}) == dict.fromkeys(
        REWRITE_PROCEDURES, "ts >= '2026-01-01'"
    )


def test_a_predicate_per_procedure_overrides_where_for_that_procedure_only(monkeypatch):
    op = check_operator("ts >= '{{ ds }}'", monkeypatch)
    params = {"where": "id > 1", "rewrite_position_delete_files_where": "id > 2"}
    assert check(op, params=params) == {"rewrite_data_files": "id > 1", "rewrite_position_delete_files": "id > 2"}


def test_with_a_logical_date_the_tables_predicate_renders(monkeypatch):
    op = check_operator("ts >= '{{ ds }}'", monkeypatch)
    rendered = check(op, params={}, ds="2026-11-20", logical_date=pendulum.datetime(2026, 11, 20))
    assert rendered == dict.fromkeys(REWRITE_PROCEDURES, "ts >= '2026-11-20'")


def test_a_predicate_that_is_not_a_template_is_named(monkeypatch):
    with pytest.raises(RunParamsError, match="is not a valid template: unexpected char") as raised:
        check(check_operator('ts >= {{ ds "', monkeypatch), params={}, ds="2026-11-20", logical_date=pendulum.now())
    assert "the table's where for rewrite_data_files 'ts >= {{ ds \"'" in str(raised.value)


def test_a_bad_param_fails_without_retries(monkeypatch):
    with pytest.raises(RunParamsError, match="param 'strategy'"):
        check(check_operator(None, monkeypatch), params={"strategy": "zigzag"})


def test_partial_progress_on_a_table_whose_iceberg_cannot_check_it_fails_before_the_gate_naming_the_version(
    monkeypatch,
):
    config = TableConfig(
        table="lake.db.t", spark={"packages": ["org.apache.iceberg:iceberg-spark-runtime-3.4_2.12:1.5.2"]}
    )
    plan = build_compaction_dag(config).get_task("plan_compaction")
    monkeypatch.setattr(plan, "_load_table", FakeIcebergTable)
    with pytest.raises(RunParamsError) as refused:
        check(plan, params={**DEFAULTS, "partial_progress": True})
    assert str(refused.value).startswith(
        "param 'partial_progress': rewrite_data_files option 'partial-progress.enabled' needs Iceberg 1.9 or newer; "
        "this table's Spark jobs run Iceberg 1.5.2 (iceberg-spark-runtime-3.4_2.12:1.5.2): the Spark job counts"
    )
    check(plan, params={**DEFAULTS, "partial_progress": False})


@pytest.mark.parametrize(
    ("table_where", "params", "message"),
    [
        (None, {"where": "region = 'eu'"}, "param 'where' \"region = 'eu'\" names 'region', which table lake.db.t"),
        ("id > 0; DROP TABLE x", {}, "the table's where .* must be one condition"),
        ("ts >= '{{ ds }}' AND nope = 1", {}, "the table's where .* names 'nope'"),
        (None, {"where": "id = 'seven'"}, "param 'where' \"id = 'seven'\" does not fit the table's columns"),
        (None, {"where": "id = 1 OR id = ts"}, None),  # Spark may apply what metadata cannot: not refused
        (None, {"where": "ts >= date_sub('2026-11-20', 2)"},
         r"param 'where' .* calls the function 'date_sub'.* \(a run's own where is taken as written, never "
         r"rendered\)$"),
        ("ts >= date_sub('{{ ds }}', 2)", {}, r"the table's where .* calls the function 'date_sub'.* a template "
                                              r"such as '\{\{ macros.ds_add\(ds, -2\) \}\}'"),
    ],
    ids=["unknown-column", "separator", "unknown-column-in-template", "wrong-type", "column-to-column",
         "function-in-a-runs-where", "function-in-the-tables-where"],
)  # fmt: skip
def test_a_predicate_spark_would_refuse_fails_the_check_before_the_gate(monkeypatch, table_where, params, message):
    op = check_operator(table_where, monkeypatch)
    context = {"params": params, "ds": "2026-11-20", "logical_date": pendulum.datetime(2026, 11, 20)}
    if message is None:
        assert check(op, **context) == dict.fromkeys(REWRITE_PROCEDURES, params["where"])
        return
    with pytest.raises(RunParamsError, match=message):
        check(op, **context)


def test_the_params_declare_draft_7_so_airflow_checks_them_cheaply():
    for name, param in run_params().items():
        assert param.schema["$schema"] == "http://json-schema.org/draft-07/schema#", name
        param.resolve()  # each default is valid under its declared dialect


def test_a_conf_key_that_is_no_param_is_refused_naming_it_and_the_nearest_param(monkeypatch):
    op = check_operator("ts >= '{{ ds }}'", monkeypatch)
    with pytest.raises(RunParamsError) as raised:
        check(op, params={**DEFAULTS, "wher": "ts >= '2026-11-29'"})  # Airflow merges the conf into params
    message = str(raised.value)
    assert message.startswith("the run's conf has 'wher', which is no Param of this DAG; did you mean 'where'?")
    assert "'ds' is undefined" not in message  # refused before the table's predicate is rendered
    assert isinstance(raised.value, AirflowFailException)


def test_every_unknown_key_is_named_and_one_with_no_near_param_gets_no_guess(monkeypatch):
    op = check_operator(None, monkeypatch)
    with pytest.raises(RunParamsError) as raised:
        check(op, params={**DEFAULTS, "zzz": 1, "qqq": 2})
    message = str(raised.value)
    assert message.startswith("the run's conf has 'qqq' (and 'zzz'), which is no Param of this DAG. Its Params: ")
    assert "did you mean" not in message


def test_the_params_a_dag_declares_are_all_known_to_its_check(monkeypatch):
    dag = build_compaction_dag(TableConfig(table="lake.db.t", iceberg_conn_id="lake"))
    plan = dag.get_task("plan_compaction")
    assert plan._declared_params() == set(dag.params)


def test_a_runs_own_where_is_parsed_once_by_the_check_and_not_again_by_the_tasks_after_it(monkeypatch):
    from airflow_iceberg.planning import predicates

    parsed = []
    real = predicates.parse_predicate
    monkeypatch.setattr(predicates, "parse_predicate", lambda text, **kw: parsed.append(text) or real(text, **kw))
    params = {**DEFAULTS, "where": "id > 1"}
    op = check_operator("ts >= '{{ ds }}'", monkeypatch)
    assert check(op, params=params) == dict.fromkeys(REWRITE_PROCEDURES, "id > 1")
    assert parsed == ["id > 1"]  # one predicate for both rewrites: parsed once
    overrides_from_params(params, parse_where=False)  # the plan after its check, and rewrite_files
    assert parsed == ["id > 1"]


def test_a_typo_or_an_unrenderable_predicate_is_named_before_the_table_is_read(monkeypatch):
    """The check runs first in plan_compaction: what needs no table fails without one, even with the catalog down."""
    op = check_operator("ts >= '{{ ds }}'", monkeypatch)

    def catalog_down():
        raise ConnectionError("catalog down")

    monkeypatch.setattr(op, "_load_table", catalog_down)
    with pytest.raises(RunParamsError, match="the run's conf has 'wher'"):
        check(op, params={**DEFAULTS, "wher": "ts >= '2026-11-29'"})
    with pytest.raises(RunParamsError, match="uses the run's logical date"):
        check(op, params={**DEFAULTS})
    with pytest.raises(ConnectionError):  # a predicate to check against the columns: now the table is read
        check(op, params={**DEFAULTS, "where": "id > 1"})
