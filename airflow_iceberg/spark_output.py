"""Read what a Spark job prints while ``SparkSubmitHook`` logs it as usual."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook


def tap_spark_output(hook: SparkSubmitHook, on_line: Callable[[str], None]) -> SparkSubmitHook:
    """Make ``hook`` call ``on_line`` with each stripped line of spark-submit's output; return ``hook``.

    In local and client deploy modes that output includes the driver's stdout, which is how the Spark jobs
    here report their results. The hook keeps processing every line itself (logging, application ids).
    """
    process_log = hook._process_spark_submit_log

    def process_and_tap(lines: Iterator[Any]) -> None:
        def tapped() -> Iterator[Any]:
            for line in lines:
                on_line(str(line).strip())
                yield line

        process_log(tapped())

    hook._process_spark_submit_log = process_and_tap  # type: ignore[method-assign]
    return hook
