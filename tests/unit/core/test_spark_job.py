"""What Airflow hands the Spark job (its arguments) and what it hands back (its result lines)."""

from __future__ import annotations

import pytest

from airflow_iceberg.core.spark_job import (
    Attempts,
    JobArguments,
    ProcedureCall,
    format_result_line,
    parse_result_line,
    split_dangling_removal,
    until_it_wins,
)
from airflow_iceberg.core.tables import InvalidCallError, TableName


def test_result_line_round_trips_and_other_lines_are_ignored():
    line = format_result_line({"rewritten_data_files_count": 210, "added_data_files_count": 3})
    assert parse_result_line(line) == {"rewritten_data_files_count": 210, "added_data_files_count": 3}
    assert parse_result_line("26/11/22 INFO SparkContext: Running Spark version 3.5.9") is None


def test_result_line_survives_spark_progress_output_on_the_same_line():
    line = format_result_line({"rewritten_data_files_count": 24}) + "[Stage 12:=====>          (3 + 2) / 8]"
    assert parse_result_line(line) == {"rewritten_data_files_count": 24}
    assert parse_result_line("[Stage 3:>  (0 + 2) / 2]\r" + format_result_line({"a": 1})) == {"a": 1}
    assert parse_result_line("AIRFLOW_ICEBERG_RESULT {not json") is None


def test_the_job_arguments_round_trip_and_carry_no_secret():
    calls = (
        ProcedureCall("rewrite_data_files", {"min-input-files": 5}, "dt >= '20240620'"),
        ProcedureCall("rewrite_position_delete_files", arguments={}),
    )
    argv = JobArguments(TableName.parse("lake.db.events"), calls, "/tmp/secrets.json").argv()
    assert JobArguments.parse(argv) == JobArguments(TableName.parse("lake.db.events"), calls, "/tmp/secrets.json")
    assert argv[:2] == ["--table", "lake.db.events"] and argv[-2:] == ["--job-secrets", "/tmp/secrets.json"]


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ("[]", "non-empty JSON list"),
        ('{"procedure": "rewrite_data_files"}', "non-empty JSON list"),
        ('[{"options": {}}]', "an object with a procedure"),
        ('[{"procedure": "rewrite_data_files", "wehre": "x"}]', "wehre"),
    ],
)
def test_bad_calls_are_refused_naming_them_before_spark_starts(calls, message):
    with pytest.raises(InvalidCallError, match=message):
        JobArguments.parse(["--table", "lake.db.events", "--calls", calls])


def test_a_call_builds_its_checked_statement():
    call = ProcedureCall("rewrite_data_files", {"min-input-files": 5}, "dt = '1'")
    assert call.statement(TableName.parse("lake.db.events")) == (
        "CALL `lake`.system.rewrite_data_files(table => 'db.events', options => map('min-input-files', '5'), "
        "where => 'dt = \\'1\\'')"
    )


@pytest.mark.parametrize("asked", [True, "true", "TRUE"])
def test_a_rewrite_that_removes_dangling_deletes_leaves_the_removal_to_the_job(asked):
    call = ProcedureCall("rewrite_data_files", {"remove-dangling-deletes": asked, "min-input-files": 2}, "k > 1")
    rewrite, removes = split_dangling_removal(call)
    assert removes
    assert rewrite == ProcedureCall(
        "rewrite_data_files", {"remove-dangling-deletes": False, "min-input-files": 2}, "k > 1"
    )
    assert "'remove-dangling-deletes', 'false'" in rewrite.statement(TableName.parse("lake.db.events"))


@pytest.mark.parametrize(
    "call",
    [
        ProcedureCall("rewrite_data_files", {"remove-dangling-deletes": False}),
        ProcedureCall("rewrite_data_files", {"min-input-files": 2}),
        ProcedureCall("rewrite_position_delete_files"),
    ],
)
def test_a_call_that_removes_nothing_dangling_runs_as_given(call):
    assert split_dangling_removal(call) == (call, False)


class Lost(Exception):
    pass


def losing(times: int, then: int = 3):
    """An attempt that loses ``times`` times to a commit, then removes ``then`` files; and the attempts it saw."""
    made = []

    def attempt() -> int:
        made.append(len(made) + 1)
        if len(made) <= times:
            raise Lost(f"current snapshot changed ({len(made)})")
        return then

    return attempt, made


def lost_to(error: Exception) -> str | None:
    return str(error) if isinstance(error, Lost) else None


def test_the_removal_is_tried_again_until_a_commit_no_longer_beats_it():
    attempt, made = losing(2)
    assert until_it_wins(attempt, lost_to, attempts=5) == Attempts(
        3, 3, ("current snapshot changed (1)", "current snapshot changed (2)")
    )
    assert made == [1, 2, 3]


def test_a_removal_that_loses_every_attempt_gives_up_with_what_it_lost_to():
    attempt, made = losing(9)
    outcome = until_it_wins(attempt, lost_to, attempts=4)
    assert outcome.result is None and outcome.attempts == 4 and made == [1, 2, 3, 4]
    assert outcome.lost_to[-1] == "current snapshot changed (4)"


def test_an_error_that_is_not_a_lost_commit_is_raised_at_once():
    made = []

    def attempt() -> int:
        made.append(1)
        raise OSError("the warehouse is gone")

    with pytest.raises(OSError, match="warehouse is gone"):
        until_it_wins(attempt, lost_to)
    assert made == [1]


def test_the_jobs_answers_from_its_report_come_first_and_its_output_gives_only_what_the_report_lacks():
    from airflow_iceberg.core.spark_job import JobAnswers

    data = format_result_line({"procedure": "rewrite_data_files", "rewritten_data_files_count": 2})
    conflict = "org.apache.iceberg.exceptions.ValidationException: Cannot commit, found new position delete"
    reported = JobAnswers.of([data])
    printed = JobAnswers.of(["Running: CALL ...", format_result_line({"procedure": "x", "n": 1}), conflict])
    merged = reported.before(printed)
    assert merged.results == {"rewrite_data_files": {"rewritten_data_files_count": 2}}
    assert merged.commit_conflict == conflict and merged.lease_lost is None and merged.no_go is None
    assert JobAnswers().before(printed).results == {"x": {"n": 1}}


def test_the_calls_travel_as_base64_with_no_brace_pair_that_yarn_would_expand_and_parse_back_alike():
    calls = (
        ProcedureCall("rewrite_data_files", {"min-input-files": 2}, "ts >= TIMESTAMP '2026-12-03 00:00:00'", {}),
        ProcedureCall("rewrite_position_delete_files", {"rewrite-all": True}, None, {}),
    )
    argv = JobArguments(TableName.parse("lake.db.events"), calls, "secrets.json").argv()
    assert not any("{{" in a or "}}" in a or "'" in a for a in argv)  # YARN's {{VAR}}, and a shell's quotes
    assert JobArguments.parse(argv) == JobArguments(TableName.parse("lake.db.events"), calls, "secrets.json")
    by_hand = ["--table", "lake.db.events", "--calls", '[{"procedure": "rewrite_data_files"}]']
    assert JobArguments.parse(by_hand).calls[0].procedure == "rewrite_data_files"  # plain JSON still reads
    with pytest.raises(InvalidCallError, match="--calls is not valid base64"):
        JobArguments.parse(["--table", "lake.db.events", "--calls", "base64:%%%"])
