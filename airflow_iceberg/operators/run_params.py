"""The first task of every table DAG: check the run's Params before the gate closes; report dry runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.providers.standard.operators.python import ShortCircuitOperator

from airflow_iceberg.rewrite_plan import plan_rewrite
from airflow_iceberg.run_params import overrides_from_params
from spark_jobs.iceberg_call import TableName


class CheckRunParamsOperator(ShortCircuitOperator):
    """Validate the run's Params; on a dry run, report what would be rewritten and skip everything after.

    Invalid values fail this task, naming the parameter, so the gate is never closed. A dry run pushes the
    plan (files, bytes and file groups per partition, from table metadata) to XCom under ``plan`` and
    skips every downstream task, teardown included: no gate is closed and nothing is committed.

    :param table: The table, ``catalog.namespace.table``.
    :param iceberg_conn_id: Iceberg connection of the table's catalog.
    :param options: The DAG's own ``rewrite_data_files`` options, which the Params override.
    :param dry_run_filter: pyiceberg row filter for the DAG's own partitions, used when the run gives no
        ``where``. (templated)
    """

    template_fields: Sequence[str] = (*ShortCircuitOperator.template_fields, "dry_run_filter")

    def __init__(
        self,
        *,
        table: str,
        iceberg_conn_id: str,
        options: Mapping[str, Any] | None = None,
        dry_run_filter: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(python_callable=self._check, ignore_downstream_trigger_rules=True, **kwargs)
        TableName.parse(table)
        self.table = table
        self.iceberg_conn_id = iceberg_conn_id
        self.options = dict(options or {})
        self.dry_run_filter = dry_run_filter

    def _check(self, **context: Any) -> bool:
        overrides = overrides_from_params(context["params"])
        if not overrides.dry_run:
            return True
        options = {**self.options, **overrides.options.get("rewrite_data_files", {})}
        plan = plan_rewrite(self.iceberg_conn_id, self.table, overrides.where or self.dry_run_filter, options)
        self.log.info(
            "Dry run: %d data files, %d bytes in %d file groups would be rewritten: %s",
            plan["data_files"], plan["bytes"], plan["file_groups"], plan["partitions"],
        )  # fmt: skip
        context["ti"].xcom_push(key="plan", value=plan)
        return False
