"""The job's CALL of a procedure that runs beside writers: called again when a writer's commit beat it."""

from __future__ import annotations

import pytest

from airflow_iceberg.core.tables import TableName
from spark_jobs.run_procedure import run_call

TABLE = TableName("lake", "db", "events")
BEATEN = "Deleted manifest hdfs://nn/warehouse/db/events/metadata/a-m1.avro could not be found in the latest snapshot 7"


class JavaError:
    """What py4j gives of a Java exception: its class's name, its message, its cause."""

    def __init__(self, name: str, message: str, cause: JavaError | None = None) -> None:
        self.name, self.message, self.cause = name, message, cause

    def getClass(self):  # noqa: N802 (Java's names, as py4j shows them)
        return type("Class", (), {"getName": lambda _: self.name})()

    def getMessage(self):  # noqa: N802
        return self.message

    def getCause(self):  # noqa: N802
        return self.cause


class Py4JError(Exception):
    def __init__(self, java: JavaError) -> None:
        super().__init__(java.message)
        self.java_exception = java


def beaten() -> Py4JError:
    validation = JavaError("org.apache.iceberg.exceptions.ValidationException", BEATEN)
    return Py4JError(JavaError("org.apache.spark.SparkException", "commit failed", validation))


class Spark:
    """A session whose CALLs fail as ``outcomes`` say, in turn (an exception) or return rows."""

    def __init__(self, *outcomes: object) -> None:
        self.outcomes, self.statements, self.refreshed = list(outcomes), [], []
        self.catalog = type("Catalog", (), {"refreshTable": lambda _, name: self.refreshed.append(name)})()

    def sql(self, statement: str):
        self.statements.append(statement)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return type("Frame", (), {"collect": lambda _: [Row(row) for row in outcome]})()


class Row(dict):
    """A Spark Row, as the job reads it."""

    def asDict(self):  # noqa: N802 (PySpark's name)
        return dict(self)


def test_a_manifest_rewrite_beaten_by_a_writers_commit_is_called_again_at_the_newest_snapshot(capsys):
    spark = Spark(beaten(), beaten(), [{"rewritten_manifests_count": 3}])
    row = run_call(spark, TABLE, "rewrite_manifests", "CALL lake.system.rewrite_manifests('db.events')")
    assert row == {"rewritten_manifests_count": 3}
    assert len(spark.statements) == 3 and spark.refreshed == ["lake.db.events", "lake.db.events"]
    said = capsys.readouterr().out.splitlines()
    assert said == [f"rewrite_manifests lost to a writer's commit, called again: {BEATEN}"] * 2


def test_a_manifest_rewrite_beaten_every_time_leaves_the_table_as_it_was_and_says_so(capsys):
    """A writer that commits faster than the rewrite runs would otherwise fail every daily run: the manifests wait
    for the next one."""
    spark = Spark(*(beaten() for _ in range(5)))
    row = run_call(spark, TABLE, "rewrite_manifests", "CALL ...")
    assert len(spark.statements) == 5
    assert row == {"left_as_it_was": f"every one of 5 attempts lost to a writer's commit, the last to: {BEATEN}"}
    said = capsys.readouterr().out.splitlines()
    assert said[-1] == f"rewrite_manifests left the table as it was: {row['left_as_it_was']}"


def test_other_errors_and_other_procedures_are_not_called_again():
    other = Py4JError(JavaError("java.lang.IllegalArgumentException", "no such table"))
    with pytest.raises(Py4JError, match="no such table"):
        run_call(Spark(other), TABLE, "rewrite_manifests", "CALL ...")
    spark = Spark(beaten())
    with pytest.raises(Py4JError):  # a gated rewrite that lost to a commit is reported, never repeated
        run_call(spark, TABLE, "rewrite_data_files", "CALL ...")
    assert len(spark.statements) == 1
