"""The Spark job's report on the machine's real MySQL: what the job says reaches the task in order, once, from any
thread, and a report nobody read is gone after a week."""

from __future__ import annotations

import threading

from airflow_iceberg.core.gate_protocol import owner_connection
from airflow_iceberg.core.job_report import REPORT_TABLE, JobReport, new_report_id, read_report
from airflow_iceberg.core.spark_job import LEASE_LOST_MARKER, JobAnswers, format_result_line


def test_the_lines_a_job_says_reach_the_task_in_order_once_and_give_its_answers(gate_hook):
    settings = gate_hook.connection_settings()
    report_id, printed = new_report_id(), []
    report = JobReport(lambda: owner_connection(**settings), report_id, printed.append)
    data = format_result_line({"procedure": "rewrite_data_files", "rewritten_data_files_count": 12})
    deletes = format_result_line({"procedure": "rewrite_position_delete_files", "rewritten_delete_files_count": 3})
    report.say(data)
    keeper = threading.Thread(target=report.say, args=(LEASE_LOST_MARKER + "the lease ended",))  # the keeper's thread
    keeper.start()
    keeper.join()
    report.say(deletes)

    assert report.unwritten == 0 and printed == [data, LEASE_LOST_MARKER + "the lease ended", deletes]
    lines = gate_hook.job_report(report_id)
    assert lines == printed
    answers = JobAnswers.of(lines)
    assert answers.results == {
        "rewrite_data_files": {"rewritten_data_files_count": 12},
        "rewrite_position_delete_files": {"rewritten_delete_files_count": 3},
    }
    assert answers.lease_lost == "the lease ended"
    assert gate_hook.job_report(report_id) == []  # read once: the report is gone


def test_a_report_of_another_submit_is_never_read_and_one_left_for_a_week_is_removed(gate_hook):
    settings = gate_hook.connection_settings()
    mine, other, old = new_report_id(), new_report_id(), new_report_id()
    for report_id in (mine, other, old):
        JobReport(lambda: owner_connection(**settings), report_id, lambda line: None).say(f"said under {report_id}")
    connection = owner_connection(**settings)
    with connection, connection.cursor() as cursor:
        cursor.execute(f"UPDATE {REPORT_TABLE} SET written_at = NOW(6) - INTERVAL 8 DAY WHERE report_id = %s", (old,))
        connection.commit()
        assert read_report(connection, mine) == [f"said under {mine}"]
        cursor.execute(f"SELECT report_id FROM {REPORT_TABLE} WHERE report_id IN (%s, %s)", (other, old))
        assert [row[0] for row in cursor.fetchall()] == [other]
    assert gate_hook.job_report(other) == [f"said under {other}"]


def test_a_line_the_gates_mysql_does_not_take_is_still_printed_and_counted():
    printed = []

    def unreachable():
        raise OSError("MySQL is away")

    report = JobReport(unreachable, new_report_id(), printed.append)
    report.say("AIRFLOW_ICEBERG_RESULT {}")
    assert report.unwritten == 1
    assert printed == ["AIRFLOW_ICEBERG_RESULT {}", "Could not write that line to the job's report in the gate's "
                       "MySQL: MySQL is away"]  # fmt: skip
