"""The conflict rule, cell by cell: which writer pauses for which work, and the reason it is given."""

from __future__ import annotations

import pytest

from airflow_iceberg.core.conflicts import (
    REWRITE_DATA_FILES,
    REWRITE_POSITION_DELETE_FILES,
    UNDESCRIBED,
    BatchStatement,
    Command,
    CommitKind,
    GuardedWork,
    Isolation,
    WriteMode,
    WriterCommits,
    decide_pauses,
    must_pause,
    parse_commit_kind,
    summary,
    widest,
)
from airflow_iceberg.core.iceberg_runtime import IcebergVersion

APPENDS, UPSERTS, ROW_LEVEL = CommitKind.APPENDS, CommitKind.UPSERTS, CommitKind.ROW_LEVEL


def writer(kind: CommitKind | None, version: str | None = "1.11.0", **kwargs) -> WriterCommits:
    return WriterCommits("w", kind, version, kwargs.pop("commits_as", "flink.job-id=f00"), **kwargs)


def compaction(*procedures: str, format_version: int = 2, **kwargs) -> GuardedWork:
    return GuardedWork(
        procedures or (REWRITE_DATA_FILES, REWRITE_POSITION_DELETE_FILES), None, format_version, **kwargs
    )


REWRITES = [REWRITE_DATA_FILES, REWRITE_POSITION_DELETE_FILES]

# --- a compaction's rewrites ------------------------------------------------------------------------------------


@pytest.mark.parametrize("procedure", REWRITES)
@pytest.mark.parametrize("format_version", [1, 2, 3])
def test_appends_never_pause_for_a_rewrite(procedure, format_version):
    decision = must_pause(compaction(procedure, format_version=format_version), writer(APPENDS, None))
    assert not decision.pause
    assert decision.reason == (
        f"it commits appends only (appends), which do not conflict with {procedure}: it keeps committing"
    )


@pytest.mark.parametrize("procedure", REWRITES)
@pytest.mark.parametrize("version", ["1.6.0", "1.6.1", "1.10.1", "1.11.0", "1.12.0", None])
def test_upserts_of_iceberg_1_6_and_later_keep_committing_through_a_rewrite_of_a_v2_table(procedure, version):
    decision = must_pause(compaction(procedure), writer(UPSERTS, version))
    assert not decision.pause, decision.reason
    assert decision.reason.endswith(f"which do not conflict with {procedure}: it keeps committing")


@pytest.mark.parametrize("procedure", REWRITES)
@pytest.mark.parametrize("version", ["1.5.2", "1.5.0", "1.4.3", "0.14.1"])
def test_flinks_upserts_before_iceberg_1_6_pause_for_every_rewrite(procedure, version):
    decision = must_pause(compaction(procedure), writer(UPSERTS, version))
    assert decision.pause
    assert f"(upserts, Iceberg {version})" in decision.reason
    assert "before Iceberg 1.6 writes partition-scoped position deletes" in decision.reason
    assert f"every file {procedure} replaces in their partitions (apache/iceberg#10200)" in decision.reason


def test_upserts_pause_for_a_data_rewrite_that_does_not_keep_its_starting_sequence_number():
    decision = must_pause(compaction(REWRITE_DATA_FILES, use_starting_sequence_number=False), writer(UPSERTS))
    assert decision.pause and "use-starting-sequence-number false" in decision.reason
    # It is rewrite_data_files' option: a position-delete rewrite has no sequence number to keep.
    other = compaction(REWRITE_POSITION_DELETE_FILES, use_starting_sequence_number=False)
    assert not must_pause(other, writer(UPSERTS)).pause
    assert not must_pause(compaction(use_starting_sequence_number=False), writer(APPENDS)).pause


@pytest.mark.parametrize("procedure", REWRITES)
def test_on_format_v3_upserts_keep_committing_only_from_iceberg_1_11_which_writes_deletion_vectors(procedure):
    v3 = compaction(procedure, format_version=3)
    assert not must_pause(v3, writer(UPSERTS, "1.11.0")).pause
    assert not must_pause(v3, writer(UPSERTS, "1.12.0")).pause
    older = must_pause(v3, writer(UPSERTS, "1.10.1"))
    assert older.pause and "deletion vectors for its own files only since Iceberg 1.11" in older.reason
    assert not must_pause(compaction(procedure, format_version=2), writer(UPSERTS, "1.10.1")).pause


@pytest.mark.parametrize("procedure", REWRITES)
@pytest.mark.parametrize("version", ["1.5.2", "1.11.0", None])
def test_row_level_writers_pause_for_every_rewrite(procedure, version):
    decision = must_pause(compaction(procedure), writer(ROW_LEVEL, version))
    assert decision.pause
    assert decision.reason.startswith("it commits row-level changes to existing files (row-level")
    assert decision.reason.endswith(f"and they conflict with {procedure} both ways")


@pytest.mark.parametrize("kind", list(CommitKind))
def test_a_writer_seen_making_row_level_changes_pauses_whatever_it_declared(kind):
    seen = writer(kind, observed=ROW_LEVEL, observed_detail="snapshot 7 (overwrite) deleted rows in 2 older data files")
    decision = must_pause(compaction(), seen)
    assert decision.pause and "they conflict with rewrite_data_files both ways" in decision.reason
    if kind != ROW_LEVEL:
        said = f"it declared {kind} (Iceberg 1.11.0), but the table's history shows row-level changes"
        assert said in decision.reason
        assert "snapshot 7 (overwrite) deleted rows in 2 older data files" in decision.reason


def test_an_observation_narrower_than_the_declaration_changes_nothing():
    assert must_pause(compaction(), writer(ROW_LEVEL, observed=APPENDS)).pause
    assert not must_pause(compaction(), writer(APPENDS, observed=APPENDS)).pause
    assert not must_pause(compaction(), writer(APPENDS, observed=UPSERTS)).pause  # upserts do not conflict


@pytest.mark.parametrize("work", [compaction(), GuardedWork(statement=BatchStatement(Command.DELETE))])
def test_a_writer_that_declares_nothing_pauses_as_one_of_the_previous_protocol(work):
    decision = must_pause(work, writer(None, None, commits_as=None))
    assert decision.pause
    assert decision.reason == (
        "it declares no commit kind (a writer of the previous protocol, or one that said nothing), so it is taken "
        "as one that can conflict"
    )


def test_a_writer_that_would_keep_committing_but_names_nothing_its_snapshots_carry_pauses():
    decision = must_pause(compaction(), writer(APPENDS, commits_as=None))
    assert decision.pause
    assert "which do not conflict with rewrite_data_files and rewrite_position_delete_files" in decision.reason
    assert decision.reason.endswith("could not tell its commits from an unknown writer's")


@pytest.mark.parametrize("procedure", ["expire_snapshots", "remove_orphan_files"])
def test_maintenance_that_commits_nothing_a_writer_validates_pauses_no_one(procedure):
    assert not must_pause(compaction(procedure), writer(UPSERTS)).pause
    assert not must_pause(compaction(procedure), writer(APPENDS)).pause


def test_a_procedure_whose_conflicts_are_not_known_pauses_every_writer():
    decision = must_pause(compaction("rewrite_manifests"), writer(APPENDS))
    assert decision.pause and "rewrite_manifests is not one whose conflicts are known" in decision.reason


def test_the_tables_pause_writers_all_and_an_undescribed_closing_pause_everyone():
    everyone = GuardedWork((REWRITE_DATA_FILES,), pause_all=True)
    assert must_pause(everyone, writer(APPENDS)).reason == "the table's pause_writers is 'all', so every writer pauses"
    assert must_pause(UNDESCRIBED, writer(APPENDS)).reason == (
        "the closing did not say what it does, so every writer pauses"
    )


# --- a batch statement held by GateHolder ------------------------------------------------------------------------

MOR, COW = WriteMode.MERGE_ON_READ, WriteMode.COPY_ON_WRITE
SNAPSHOT, SERIALIZABLE = Isolation.SNAPSHOT, Isolation.SERIALIZABLE

#: (command, isolation, mode) -> whether appends, upserts pause for it (row-level writers always do).
STATEMENT_CELLS = {
    (Command.DELETE, SNAPSHOT, MOR): (False, False),
    (Command.UPDATE, SNAPSHOT, MOR): (False, True),
    (Command.MERGE, SNAPSHOT, MOR): (False, True),
    **{(command, SNAPSHOT, COW): (False, True) for command in Command},
    **{(command, SERIALIZABLE, mode): (True, True) for command in Command for mode in WriteMode},
}


@pytest.mark.parametrize(("cell", "expected"), STATEMENT_CELLS.items(), ids=lambda v: "-".join(map(str, v)))
def test_each_batch_statement_pauses_the_writers_its_validation_would_fail_on(cell, expected):
    statement = BatchStatement(*cell)
    work = GuardedWork(statement=statement, format_version=2)
    paused = tuple(must_pause(work, writer(kind)).pause for kind in (APPENDS, UPSERTS))
    assert paused == expected
    row_level = must_pause(work, writer(ROW_LEVEL))
    assert row_level.pause and row_level.reason.endswith(f"they conflict with {statement}")


def test_a_statement_names_its_mode_command_and_isolation_and_says_why_it_fails():
    statement = BatchStatement(Command.MERGE, SERIALIZABLE, MOR)
    assert str(statement) == "a merge-on-read MERGE under serializable isolation"
    reason = must_pause(GuardedWork(statement=statement), writer(APPENDS)).reason
    assert "fails when a commit adds data its condition could match (Found conflicting files" in reason
    update = must_pause(GuardedWork(statement=BatchStatement(Command.UPDATE, SNAPSHOT, MOR)), writer(UPSERTS)).reason
    assert "fails on delete files added meanwhile for the files it read, and an upsert adds some" in update


def test_a_statement_and_a_rewrite_together_pause_for_either():
    work = GuardedWork((REWRITE_DATA_FILES,), BatchStatement(Command.DELETE, SNAPSHOT, MOR), 2)
    assert not must_pause(work, writer(UPSERTS)).pause
    assert must_pause(work, writer(UPSERTS, "1.5.2")).pause


# --- the pieces -----------------------------------------------------------------------------------------------


def test_decisions_keep_the_writers_order_and_summarize_in_a_line():
    writers = [
        WriterCommits("cdc#0", UPSERTS, "1.11.0", "flink.job-id=a"),
        WriterCommits("merge", ROW_LEVEL, None, "spark.app.id=b"),
    ]
    decisions = decide_pauses(compaction(), writers)
    assert [(d.writer_id, d.pause) for d in decisions] == [("cdc#0", False), ("merge", True)]
    assert summary(decisions) == "pauses merge; cdc#0 keeps committing"
    assert summary(decisions[:1]) == "no writer must pause (cdc#0 keeps committing)"
    assert summary(()) == "no writer registered"
    assert decisions[0].as_xcom() == {"writer": "cdc#0", "pause": False, "reason": decisions[0].reason}


def test_an_unknown_commit_kind_is_refused_naming_the_value_and_the_kinds():
    with pytest.raises(ValueError) as refused:
        parse_commit_kind("merges")
    assert str(refused.value) == (
        "unknown commit kind 'merges': a writer commits one of 'appends' (appends only), 'upserts' (upserts whose "
        "deletes touch only its own new files), 'row-level' (row-level changes to existing files)"
    )
    with pytest.raises(ValueError, match="unknown commit_kind 3"):
        parse_commit_kind(3, where="commit_kind")
    assert parse_commit_kind("upserts") is UPSERTS and parse_commit_kind(None) is None


def test_the_widest_kind_is_the_one_that_conflicts_most_and_versions_read_as_numbers():
    assert widest(APPENDS, None, ROW_LEVEL, UPSERTS) is ROW_LEVEL and widest(None) is None
    release = IcebergVersion.of_release
    assert release("1.11.0") == IcebergVersion(1, 11, 0) > release("1.6") == IcebergVersion(1, 6)
    assert release("1.12.0-SNAPSHOT") == IcebergVersion(1, 12) and release("main") is None and release(None) is None
