"""Who a closing pauses, on the machine's real MySQL: the store decides per writer in the close's transaction, each
writer's own look at the gate says whether it pauses, and a writer of the previous protocol pauses as it always did.

The rule itself, cell by cell, is ``tests/unit/core/test_conflicts.py``.
"""

from __future__ import annotations

import pymysql
import pytest

from airflow_iceberg.core.conflicts import (
    REWRITE_DATA_FILES,
    REWRITE_POSITION_DELETE_FILES,
    BatchStatement,
    CommitKind,
    GuardedWork,
)
from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.gate_store import Closing
from devkit.writer_jobs import previous_protocol

RUN = GateOwner("iceberg_compact__lake__gate__t", "manual__2026-12-01T00:00:00+00:00")
COMPACTION = GuardedWork((REWRITE_DATA_FILES, REWRITE_POSITION_DELETE_FILES), format_version=2)


class PreviousProtocolWriter:
    """A writer built before schema version 9: it runs the previous protocol's statements
    (``devkit/writer_jobs/previous_protocol.py``), as the writer user."""

    def __init__(self, gate_table: str, writer_id: str) -> None:
        from airflow_iceberg.hooks.write_gate import WriteGateHook

        self.table, self.writer_id = gate_table, writer_id
        self.settings = WriteGateHook("write_gate_writer").connection_settings()

    def paused(self) -> bool:
        connection = pymysql.connect(**self.settings, autocommit=True)
        with connection:
            with connection.cursor() as cursor:
                cursor.execute(previous_protocol.REGISTER_SQL, (self.table, self.writer_id))
            return previous_protocol.previous_check(connection, self.table)


def test_a_compaction_pauses_only_the_writers_that_can_conflict_and_the_others_see_the_gate_open(
    gate_hook, gate_writer, gate_table
):
    stream = gate_writer(gate_table, writer_id="cdc#0", commit_kind="upserts", iceberg_version="1.11.0",
                         commits_as="flink.job-id=f00")  # fmt: skip
    merge = gate_writer(gate_table, writer_id="merge", commit_kind="row-level", commits_as="spark.app.id=local-1")
    silent = gate_writer(gate_table, writer_id="silent")
    previous = PreviousProtocolWriter(gate_table, "old-job")
    assert stream.may_commit() and merge.may_commit() and silent.may_commit() and not previous.paused()

    attempt = gate_hook.close_gate_waiting(gate_table, RUN, Closing(60, work=COMPACTION), timeout=0, poke_interval=1)

    decided = {d.writer_id: d.pause for d in attempt.pauses}
    assert decided == {"cdc#0": False, "merge": True, "silent": True, "old-job": True}
    assert stream.may_commit(), "an upsert writer of Iceberg 1.11 keeps committing through a compaction"
    assert not merge.may_commit() and not silent.may_commit() and previous.paused()
    state = gate_hook.get_state(gate_table)
    assert [w.writer_id for w in state.writers_keeping_on()] == ["cdc#0"]
    assert {w.writer_id for w in state.writers_to_wait_for()} == {"merge", "silent", "old-job"}
    [close] = gate_hook.audit_trail(gate_table)
    assert close["detail"] == "pauses merge, old-job, silent; cdc#0 keeps committing"
    reasons = {w.writer_id: w.pause_reason for w in state.writers}
    assert "which do not conflict with rewrite_data_files and rewrite_position_delete_files" in reasons["cdc#0"]
    assert reasons["old-job"].startswith("it declares no commit kind (a writer of the previous protocol")
    assert attempt.as_xcom()["paused"] == ["merge", "old-job", "silent"]

    gate_hook.open_gate(gate_table, RUN)
    assert merge.may_commit() and previous.paused() is False


def test_a_closing_whose_work_nobody_described_pauses_every_writer(gate_hook, gate_writer, gate_table):
    stream = gate_writer(gate_table, writer_id="cdc#0", commit_kind="upserts", commits_as="flink.job-id=f00")
    assert stream.may_commit()
    gate_hook.close_gate(gate_table, RUN, lease_seconds=60)  # as every caller of the previous release does
    assert not stream.may_commit()
    assert gate_hook.audit_trail(gate_table)[-1]["detail"] == "pauses cdc#0"


def test_a_writer_that_declares_anew_mid_closing_pauses_at_once(gate_hook, gate_writer, gate_table):
    stream = gate_writer(gate_table, writer_id="cdc#0", commit_kind="appends", commits_as="flink.job-id=f00")
    assert stream.may_commit()
    gate_hook.close_gate(gate_table, RUN, lease_seconds=60, work=COMPACTION)
    assert stream.may_commit()
    stream.declare(commit_kind="row-level")  # it restarted as a job that MERGEs
    assert not stream.may_commit()
    assert gate_hook.get_state(gate_table).writers_to_wait_for()[0].writer_id == "cdc#0"


def test_a_writer_the_history_showed_committing_more_than_it_declared_pauses_at_the_next_closing(
    gate_hook, gate_writer, gate_table
):
    liar = gate_writer(gate_table, writer_id="liar", commit_kind="appends", commits_as="spark.app.id=local-7")
    assert liar.may_commit()
    detail = "snapshot 42 (overwrite) deleted rows in 3 data files older than its own commit (such as f.parquet)"
    assert gate_hook.store.observe(gate_table, "liar", CommitKind.ROW_LEVEL, 42, detail)
    assert not gate_hook.store.observe(gate_table, "liar", CommitKind.UPSERTS, 43, "narrower")  # kept: the widest

    attempt = gate_hook.store.close(gate_table, RUN, Closing(60, work=COMPACTION))

    [decision] = attempt.pauses
    assert decision.pause and not liar.may_commit()
    assert decision.reason.startswith("it declared appends, but the table's history shows row-level changes")
    assert "snapshot 42 (overwrite)" in decision.reason
    [writer] = gate_hook.get_state(gate_table).writers
    assert (writer.observed_kind, writer.observed_snapshot_id) == (CommitKind.ROW_LEVEL, 42)


def test_a_batch_statement_under_snapshot_isolation_pauses_only_what_its_validation_fails_on(
    gate_hook, gate_writer, gate_table
):
    stream = gate_writer(gate_table, writer_id="cdc#0", commit_kind="upserts", commits_as="flink.job-id=f00")
    appends = gate_writer(gate_table, writer_id="ingest", commit_kind="appends", commits_as="spark.app.id=a")
    assert stream.may_commit() and appends.may_commit()
    delete = GuardedWork(statement=BatchStatement("delete", "snapshot", "merge-on-read"), format_version=2)
    gate_hook.store.close(gate_table, RUN, Closing(60, work=delete))
    assert stream.may_commit() and appends.may_commit()
    gate_hook.open_gate(gate_table, RUN)
    merge = GuardedWork(statement=BatchStatement("merge", "snapshot", "merge-on-read"), format_version=2)
    gate_hook.store.close(gate_table, RUN, Closing(60, work=merge))
    assert not stream.may_commit() and appends.may_commit()


def test_the_tables_check_constraint_refuses_a_kind_no_writer_client_would_send(gate_hook, gate_table):
    from airflow_iceberg.core.gate_protocol import WRITER_REGISTER_SQL

    with gate_hook.get_conn() as connection, connection.cursor() as cursor:
        with pytest.raises(pymysql.err.MySQLError, match="iceberg_write_gate_writer_kind"):
            cursor.execute(WRITER_REGISTER_SQL, (gate_table, "w", "merges", None, None))
