"""Which Iceberg a table's Spark jobs run, and the options each release takes: the rule, without a server."""

from __future__ import annotations

import pytest

from airflow_iceberg.core.iceberg_runtime import (
    OPTIONS_SINCE,
    IcebergVersion,
    check_options,
    missing_option,
    options_it_takes,
    runtime_of,
)
from airflow_iceberg.core.procedures import PROCEDURE_OPTIONS
from airflow_iceberg.core.tables import InvalidCallError

ORIGINAL = ["org.apache.iceberg:iceberg-spark-runtime-3.4_2.12:1.5.2", "org.mariadb.jdbc:mariadb-java-client:3.5.7"]


def test_the_runtime_is_read_from_a_maven_coordinate_or_a_jars_file_name():
    by_package = runtime_of(packages=ORIGINAL)
    assert by_package is not None
    assert (str(by_package.version), by_package.spark_line) == ("1.5.2", "3.4")
    assert by_package.describe() == "Iceberg 1.5.2 (iceberg-spark-runtime-3.4_2.12:1.5.2)"
    by_jar = runtime_of(jars=["/opt/jars/iceberg-spark-runtime-4.1_2.13-1.12.0.jar", "/opt/jars/other.jar"])
    assert by_jar is not None and (str(by_jar.version), by_jar.spark_line) == ("1.12.0", "4.1")


def test_a_setting_names_the_version_when_the_cluster_brings_its_own_runtime():
    assert runtime_of() is None  # unknown: every option is sent, as Iceberg will judge it
    explicit = runtime_of(packages=ORIGINAL, version="1.11.0")
    assert explicit is not None and explicit.describe() == "Iceberg 1.11.0 (spark.iceberg_version)"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"version": "1.4.3"}, "older than the oldest Iceberg this provider supports, 1.5.0"),
        ({"version": "one.five"}, "an Iceberg version is major.minor[.patch], e.g. 1.5.2; got 'one.five'"),
        (
            {"jars": ["iceberg-spark-runtime-3.5_2.12-1.11.0.jar"], "packages": ORIGINAL[:1]},
            "two Iceberg runtimes: iceberg-spark-runtime-3.4_2.12:1.5.2, iceberg-spark-runtime-3.5_2.12-1.11.0",
        ),
    ],
)
def test_a_runtime_that_cannot_be_told_or_is_too_old_is_refused_naming_it(arguments, message):
    with pytest.raises(InvalidCallError, match=message.replace("[", r"\[").replace(".", r"\.")):
        runtime_of(**arguments)


def test_an_option_iceberg_1_5_lacks_is_refused_naming_the_option_and_the_version():
    runtime = runtime_of(packages=ORIGINAL)
    with pytest.raises(InvalidCallError) as refused:
        check_options("rewrite_data_files", {"min-input-files": "5", "remove-dangling-deletes": "true"}, runtime)
    assert str(refused.value) == (
        "rewrite_data_files option 'remove-dangling-deletes' needs Iceberg 1.7 or newer; this table's Spark jobs run "
        "Iceberg 1.5.2 (iceberg-spark-runtime-3.4_2.12:1.5.2)"
    )
    check_options("rewrite_data_files", {"remove-dangling-deletes": "true"}, runtime_of(version="1.7.0"))
    check_options("rewrite_data_files", {"remove-dangling-deletes": "true"}, None)


def test_an_option_that_came_later_to_spark_3_4_is_judged_by_the_runtimes_spark_line():
    option = {"partial-progress.max-failed-commits": "0"}
    on_3_4 = runtime_of(packages=["org.apache.iceberg:iceberg-spark-runtime-3.4_2.12:1.8.1"])
    on_3_5 = runtime_of(packages=["org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.8.1"])
    assert "needs Iceberg 1.9 or newer with Spark 3.4" in str(
        missing_option("rewrite_data_files", *option.popitem(), on_3_4)
    )
    check_options("rewrite_data_files", {"partial-progress.max-failed-commits": "0"}, on_3_5)


def test_partial_progress_is_refused_where_the_job_cannot_count_uncommitted_groups_and_says_why():
    runtime = runtime_of(packages=ORIGINAL)
    reason = missing_option("rewrite_data_files", "partial-progress.enabled", "true", runtime)
    assert reason is not None and "needs Iceberg 1.9 or newer" in reason and "BinPackRewriteFilePlanner" in reason
    assert missing_option("rewrite_data_files", "partial-progress.enabled", "false", runtime) is None
    assert missing_option("rewrite_data_files", "partial-progress.enabled", "true", runtime_of(version="1.9")) is None


def test_the_providers_own_defaults_that_a_version_lacks_are_left_out_not_refused():
    folding = {"delete-file-threshold": "1", "remove-dangling-deletes": "true"}
    assert options_it_takes("rewrite_data_files", folding, runtime_of(packages=ORIGINAL)) == {
        "delete-file-threshold": "1"
    }
    assert options_it_takes("rewrite_data_files", folding, runtime_of(version="1.11.0")) == folding


def test_every_dated_option_is_one_the_procedure_knows():
    for procedure, options in OPTIONS_SINCE.items():
        for key in options:
            assert key.split("=")[0] in PROCEDURE_OPTIONS[procedure], key


def test_versions_order_as_releases_do():
    assert IcebergVersion.parse("1.10.0") > IcebergVersion.parse("1.9.2") > IcebergVersion.parse("1.9")
    assert str(IcebergVersion.parse("1.5")) == "1.5.0"
