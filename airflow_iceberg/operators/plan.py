"""Plan a run from table health before the gate closes, and record every run, skipped ones included.

``plan_compaction`` (:class:`PlanCompactionOperator`) checks the run's Params (``run_params.RunParamsCheck``),
then reads the table's health from metadata (``health.read_health``), decides (``health.make_plan``) and pushes
the plan to XCom. With nothing to do, or on a dry run, it writes the run's record and skips everything after it,
so no gate is closed and no Spark application starts. Otherwise each rewrite takes the predicate the plan gives it.

``record_run`` (:class:`RecordRunOperator`) is the run's last teardown: whatever the rewrites did, it completes
the record with the table's health after, the seconds the gate was closed and the rewrites took, and the outcome.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from airflow.providers.standard.operators.python import ShortCircuitOperator
from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowSkipException

from airflow_iceberg.core.conflicts import GuardedWork
from airflow_iceberg.core.gate_state import AuditAction
from airflow_iceberg.core.iceberg_runtime import IcebergRuntime
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.exceptions import WriteGateUnreachableError
from airflow_iceberg.hooks.catalogs import load_iceberg_table
from airflow_iceberg.hooks.run_records import FAILURE_XCOM_KEY, Outcome
from airflow_iceberg.hooks.write_gate import WriteGateHook, run_owner
from airflow_iceberg.operators.run_params import RunParamsCheck, overrides_from_params
from airflow_iceberg.planning.health import HealthThresholds, read_health
from airflow_iceberg.planning.history import Observation, observe_writers
from airflow_iceberg.planning.plan import Decision, plan_table

#: Decisions that run no rewrite, and the outcome their record gets.
_ENDS_HERE = {Decision.SKIP: Outcome.SKIPPED}


def _check_predicates(predicates: Mapping[str, str | None]) -> None:
    """Parse every predicate the plan hands to the rewrite task, so that task need not, with writers paused."""
    from airflow_iceberg.planning.predicates import check_predicate  # sqlglot: off the parse path

    for procedure, predicate in predicates.items():
        if predicate is not None:  # None: the whole table
            check_predicate(predicate, f"the plan's where for {procedure}")


def guarded_work(predicates: Mapping[str, str | None], format_version: int, options: Mapping[str, Any]) -> GuardedWork:
    """What the run does while it holds the gate, for the conflict rule: the rewrites it runs, on a table of this
    format, with ``rewrite_data_files``' options."""
    keep = options.get("use-starting-sequence-number", True)
    return GuardedWork(
        procedures=tuple(predicates),
        format_version=format_version,
        use_starting_sequence_number=str(keep).lower() not in ("false", "0"),
    )


def health_watch_reasons(context: Mapping[str, Any]) -> list[str]:
    """Why the health watch started this run, from the asset events that triggered it (empty for other runs)."""
    reasons = []
    for events in (context.get("triggering_asset_events") or {}).values():
        for event in events:
            payload = (event.extra or {}).get("payload")
            if isinstance(payload, Mapping) and "reason" in payload:
                reasons.append(
                    f"{payload['reason']} (snapshot {payload.get('snapshot_id')}, checked at "
                    f"{payload.get('checked_at')})"
                )
    return reasons


class PlanCompactionOperator(ShortCircuitOperator, RunParamsCheck):
    """Check the run's Params, read the table's health and plan the run; end it here when nothing needs a rewrite,
    or on a dry run.

    The check comes first (:class:`RunParamsCheck`: a bad Param or predicate fails the task, naming it, before
    anything changes), on the table the plan then reads: one task process and one table load a run for both.

    Pushes the plan to XCom under ``plan``: the decision and its reason, the predicate and partitions of each
    rewrite that runs, and the health (totals, and every partition needing work with its reasons). A rewrite
    left out of the plan's predicates is skipped. With ``thresholds`` None (the daily full rewrite, or health
    planning switched off) every rewrite runs with its predicate unchanged; so it does when the run's Params
    say ``force``.

    :param table: The table: a :class:`TableName`, or its text ``catalog.namespace.table``.
    :param iceberg_conn_id: Iceberg connection of the table's catalog.
    :param write_gate_conn_id: Connection of the gate's database, where the run record is written.
    :param thresholds: When a partition needs work; None to rewrite whatever health says.
    :param options: The DAG's ``rewrite_data_files`` options (its target file size defines small files).
    :param without_health: The decision and reason recorded when ``thresholds`` is None.
    :param where: Per procedure, the table's Spark SQL predicate, a template (rendered only if the run uses it).
    :param iceberg_runtime: The Iceberg of the table's Spark jobs, if known: an option the run asks for that it
        lacks fails, naming the version.
    """

    def __init__(
        self,
        *,
        table: TableName | str,
        iceberg_conn_id: str,
        write_gate_conn_id: str,
        thresholds: HealthThresholds | None,
        options: Mapping[str, Any] | None = None,
        without_health: tuple[Decision, str] = (Decision.FULL, "health planning is off for this DAG"),
        where: Mapping[str, str | None] | None = None,
        iceberg_runtime: IcebergRuntime | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(python_callable=self._plan, ignore_downstream_trigger_rules=True, **kwargs)
        self.table = TableName.of(table)
        self.iceberg_conn_id = iceberg_conn_id
        self.write_gate_conn_id = write_gate_conn_id
        self.thresholds = thresholds
        self.options = dict(options or {})
        self.without_health = without_health
        self.where = dict(where or {})
        self.iceberg_runtime = iceberg_runtime

    def _plan(self, **context: Any) -> bool:
        try:
            return self._plan_and_record(context)
        except WriteGateUnreachableError as error:  # nowhere to record it: say which table it stopped
            raise WriteGateUnreachableError(error.args[0], f"cannot plan {self.table}: {error}") from error
        except Exception as error:
            owner = run_owner(context)
            WriteGateHook(self.write_gate_conn_id).records.record_failed_run(
                self.table, owner.dag_id, owner.run_id, self.task_id, error
            )
            raise

    def _verify_writers(self, gate: WriteGateHook, iceberg_table: Any) -> list[Observation]:
        """Trust, then verify: read what the table's writers committed since the last check (``planning/history.py``),
        and record each that committed more than it declared, so that the closing to come pauses it."""
        name = str(self.table)
        state = gate.get_state(name)
        observed = observe_writers(iceberg_table, state.writers, state.history_checked_ms)
        for observation in observed:
            gate.store.observe(
                name, observation.writer_id, observation.kind, observation.snapshot_id, observation.detail
            )
            self.log.warning(
                "Writer %s declared %s, but %s: it is taken as %s from now on, and pauses when that conflicts",
                observation.writer_id,
                next((w.commit_kind for w in state.writers if w.writer_id == observation.writer_id), None),
                observation.detail,
                observation.kind,
            )
        snapshots = iceberg_table.metadata.snapshots
        if snapshots:
            gate.store.history_checked(name, max(s.timestamp_ms for s in snapshots))
        return observed

    def _plan_and_record(self, context: Mapping[str, Any]) -> bool:
        ti = context["ti"]
        load = functools.cache(self._load_table)  # once: by the check if a predicate needs its schema, else here
        predicates = self.check_run_params(context, lambda: load().schema())
        overrides = overrides_from_params(context["params"], parse_where=False)  # checked just now
        iceberg_table = load()
        thresholds = self.thresholds or HealthThresholds()
        options = {**self.options, **overrides.options.get("rewrite_data_files", {})}
        health, plan = plan_table(
            iceberg_table,
            str(self.table),
            thresholds,
            predicates,
            options,
            force=overrides.force or self.thresholds is None,
        )
        if self.thresholds is None and not overrides.force:
            plan.decision, plan.reason = self.without_health
        for watched in health_watch_reasons(context):
            self.log.info("Started by the health watch: %s", watched)
        _check_predicates(plan.predicates)
        self.log.info(
            "Health of %s read in %.2f s: %s",
            self.table,
            health.read_seconds,
            json.dumps({k: v for k, v in plan.health.items() if k != "unhealthy"}),
        )
        for partition in plan.health["unhealthy"]:
            self.log.info("Needs work: %s: %s", partition["partition"], "; ".join(partition["reasons"]))
        self.log.info("Plan: %s (%s); rewrites: %s", plan.decision, plan.reason, plan.predicates or "none")
        outcome = Outcome.DRY_RUN if overrides.dry_run else _ENDS_HERE.get(plan.decision, Outcome.RUNNING)
        work = guarded_work(plan.predicates, iceberg_table.metadata.format_version, options)
        gate = WriteGateHook(self.write_gate_conn_id)
        observed = self._verify_writers(gate, iceberg_table) if outcome == Outcome.RUNNING else []
        ti.xcom_push(
            key="plan",
            value={
                **plan.as_xcom(),
                "outcome": outcome.value,
                "work": work.as_xcom(),
                "observed": [o.as_xcom() for o in observed],
            },
        )
        owner = run_owner(context)
        gate.records.record_run(
            {
                "table_name": self.table,
                "dag_id": owner.dag_id,
                "run_id": owner.run_id,
                "decision": plan.decision,
                "reason": plan.reason[:1000],
                "partitions": json.dumps(plan.partitions),
                "data_files_before": health.data_files,
                "delete_files_before": health.all_delete_files,
                "bytes_before": health.data_bytes,
                "health_score": plan.score,
                "outcome": outcome,
            },
            finished=outcome != Outcome.RUNNING,
        )
        if outcome == Outcome.DRY_RUN:
            self.log.info("Dry run: the plan is in XCom under 'plan'; no gate is closed and nothing is rewritten")
        elif outcome == Outcome.SKIPPED:
            self.log.info("Skipped: %s. The gate stays open and no Spark application starts.", plan.reason)
        return outcome == Outcome.RUNNING


class RecordRunOperator(BaseOperator):
    """Complete the run's record: health after, gate and rewrite seconds, each writer and whether the run paused it,
    and the outcome (the run's teardown).

    The outcome is ``success`` when the rewrite task completed (it pushes its wall time only then), else
    ``failed``, with the rewrite's partial failure (the planned files it left as they were) as its detail.

    :param table: The table: a :class:`TableName`, or its text ``catalog.namespace.table``.
    :param iceberg_conn_id: Iceberg connection of the table's catalog.
    :param write_gate_conn_id: Connection of the gate's database.
    :param plan_task_id: The task that pushed the plan.
    :param rewrite_task_id: The task that ran the rewrites.
    :param close_task_id: The task that closed the gate: its XCom says which writers paused, and why.
    """

    def __init__(
        self,
        *,
        table: TableName | str,
        iceberg_conn_id: str,
        write_gate_conn_id: str,
        plan_task_id: str = "plan_compaction",
        rewrite_task_id: str = "rewrite_files",
        close_task_id: str = "close_gate",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = TableName.of(table)
        self.iceberg_conn_id = iceberg_conn_id
        self.write_gate_conn_id = write_gate_conn_id
        self.plan_task_id = plan_task_id
        self.rewrite_task_id = rewrite_task_id
        self.close_task_id = close_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        plan = ti.xcom_pull(task_ids=self.plan_task_id, key="plan")
        if plan is None:
            raise RuntimeError(f"{self.plan_task_id} pushed no plan: nothing to record")
        if plan["outcome"] != Outcome.RUNNING:  # a short-circuit skips every task after it but teardowns
            raise AirflowSkipException(f"{self.plan_task_id} ended the run ({plan['outcome']}) and recorded it")
        seconds = ti.xcom_pull(task_ids=self.rewrite_task_id, key="seconds")
        partial = ti.xcom_pull(task_ids=self.rewrite_task_id, key="partial_failure")
        closing = ti.xcom_pull(task_ids=self.close_task_id) or {}
        owner = run_owner(context)
        gate = WriteGateHook(self.write_gate_conn_id)
        trail = [
            row
            for row in gate.audit_trail(self.table)
            if (row["owner_dag_id"], row["owner_run_id"]) == (owner.dag_id, owner.run_id)
        ]
        closed = [row["at"] for row in trail if row["action"] == AuditAction.CLOSE]
        opened = [row["at"] for row in trail if row["action"] in (AuditAction.OPEN, AuditAction.FORCE_OPEN)]
        gate_seconds = (max(opened) - min(closed)).total_seconds() if closed and opened else None
        # Totals only: which files count as small does not matter here.
        health = read_health(
            load_iceberg_table(self.iceberg_conn_id, self.table), str(self.table), small_file_ratio=0.75
        )
        record = {
            "table_name": self.table,
            "dag_id": owner.dag_id,
            "run_id": owner.run_id,
            "data_files_after": health.data_files,
            "delete_files_after": health.all_delete_files,
            "bytes_after": health.data_bytes,
            "gate_closed_seconds": gate_seconds,
            "rewrite_seconds": seconds,
            "outcome": Outcome.FAILED if seconds is None else Outcome.SUCCESS,
            "detail": (partial or self._what_failed(context))[:1000] if seconds is None else None,
            "writers": json.dumps(closing["writers"]) if "writers" in closing else None,
        }
        gate.records.record_run(record, finished=True)
        self.log.info("Run record of %s: %s", self.table, record)
        return {**record, "table_name": str(self.table)}

    def _what_failed(self, context: Context) -> str:
        """Which task ended the run before its rewrites completed, and why, as far as that task left its reason
        (XCom ``failure``; the idle wait does); the rewrite task itself when nothing before it failed."""
        ti = context["ti"]
        owner = run_owner(context)
        states = ti.get_task_states(dag_id=owner.dag_id, run_ids=[owner.run_id]).get(owner.run_id, {})
        # The steps before the gate opens: upstream of the rewrite and, with a pre-started rewrite that runs beside
        # the gate's tasks, upstream of the gate's teardown too.
        steps = {self.rewrite_task_id}
        for task_id in (self.rewrite_task_id, *self.dag.get_task(self.rewrite_task_id).downstream_task_ids):
            if task_id != self.task_id:
                steps |= self.dag.get_task(task_id).get_flat_relative_ids(upstream=True)
        steps -= {self.task_id, *(t for t in steps if self.dag.get_task(t).is_teardown)}
        failed = sorted(task_id for task_id in steps if states.get(task_id) == "failed")
        # A gate's task that failed first: the rewrite did not run its CALLs (a pre-started one ended without the go).
        before = [task_id for task_id in failed if task_id != self.rewrite_task_id]
        if before:
            why = ti.xcom_pull(task_ids=before[0], key=FAILURE_XCOM_KEY) if len(before) == 1 else None
            return f"{', '.join(before)} failed, so {self.rewrite_task_id} did not run: {why or 'see its log'}"
        if failed:
            return f"{self.rewrite_task_id} failed: see its log"
        return f"{self.rewrite_task_id} ended {states.get(self.rewrite_task_id) or 'without a state'}"
