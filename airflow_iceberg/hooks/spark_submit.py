"""spark-submit for this provider's Spark jobs: the Spark provider's hook, reading the job's result line, and
dying with the Airflow task that started it.

The Kubernetes clients stay off the DAG-parsing path. When the Kubernetes provider is installed, the Spark
provider's hook module imports its ``kube_client`` as it is imported itself, and with it both Kubernetes clients
(``kubernetes`` and ``kubernetes_asyncio``): about 2.7 s on an idle 2-core machine, in every DAG parse and every
task start, although only a submission to Kubernetes uses them. :func:`defer_kubernetes_client` registers that
module with the standard library's :class:`importlib.util.LazyLoader` before the Spark provider is imported, so it
is executed on its first use instead.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

KUBE_CLIENT = "airflow.providers.cncf.kubernetes.kube_client"


def defer_kubernetes_client() -> None:
    """Make ``kube_client`` a lazy module, if the Kubernetes provider is installed and it is not imported yet."""
    if KUBE_CLIENT in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(KUBE_CLIENT)
    except ModuleNotFoundError:  # no Kubernetes provider: the Spark hook goes without it
        return
    if spec is None or spec.loader is None:
        return
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[KUBE_CLIENT] = module
    spec.loader.exec_module(module)
    parent, _, name = KUBE_CLIENT.rpartition(".")
    setattr(sys.modules[parent], name, module)


defer_kubernetes_client()  # before the Spark provider's hook module, which imports the client at once

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook  # noqa: E402
from requests.auth import AuthBase  # noqa: E402

from airflow_iceberg.core.processes import die_with_parent  # noqa: E402
from airflow_iceberg.core.spark_job import JobAnswers  # noqa: E402

#: Hadoop's IPC client, retrying a server that refuses it ("Retrying connect to server: rm/10.0.0.5:8032. Already
#: tried 3 time(s); ...") and YARN's client, naming the ResourceManager it connects to.
_RETRYING = re.compile(r"Retrying connect to server: (\S+?)\.? Already tried (\d+) time")
_CONNECTING_TO_RM = re.compile(r"Connecting to ResourceManager at (\S+)")
#: Hadoop's client giving up on a server ("Call From vm/127.0.0.1 to rm:8032 failed on connection exception").
_GAVE_UP = re.compile(r"Call From \S+ to (\S+) failed on connection exception")
#: After this many refused tries (a second apart) spark-submit is ended: the server is down or the address wrong.
UNREACHABLE_AFTER_TRIES = 10
#: How long a job's Hadoop client waits for a YARN ResourceManager, unless the table's spark.conf says: 30 s
#: rather than Hadoop's 15 minutes, with the table's writers paused.
RM_CONNECT_WAIT = {"spark.hadoop.yarn.resourcemanager.connect.max-wait.ms": "30000"}


class HadoopSimpleAuth(AuthBase):
    """Hadoop's simple (pseudo) authentication for a YARN ResourceManager's REST API: the caller names itself in
    ``user.name``, as spark-submit does with ``HADOOP_USER_NAME``. Without it such a ResourceManager answers a kill
    with 401 ("Unable to obtain user name"). A Kerberos cluster uses SPNEGO (the Spark provider's own) instead.
    A ``requests`` auth: called with each request before it is sent."""

    def __init__(self, user: str) -> None:
        self.user = user

    def __call__(self, request: Any) -> Any:
        request.prepare_url(request.url, {"user.name": self.user})
        return request


class IcebergSparkSubmitHook(SparkSubmitHook):
    """:class:`SparkSubmitHook` that keeps the result row the job prints, and can hand each output line on.

    In local and client deploy modes spark-submit's output includes the driver's stdout, where the jobs in
    ``airflow_iceberg.spark_jobs`` print a result line per procedure (``format_result_line``); :attr:`answers`
    (``core/spark_job.JobAnswers``) holds what those lines say: each procedure's row by name, the first line that
    reports an Iceberg commit conflict, the reason the job stopped because its run lost the write gate, the reason
    a pre-started job ended without a ``CALL``. Cluster deploy modes keep the driver's output on the cluster; the
    operator then has the job's report through the gate's MySQL (``core/job_report.py``). The hook still
    processes and logs every line itself (application ids, driver ids, the log tail of a failure).

    spark-submit runs with Linux's parent-death signal set to SIGKILL: when the Airflow task's process dies
    (killed, out of memory), spark-submit's JVM dies with it, and in local and client deploy modes so does the
    job's driver, which sets the same signal for itself.

    :param on_line: Called with each stripped line of spark-submit's output, after the hook has seen it.
    :param logger_name: Name of the hook's logger under ``airflow.task.hooks``, as for any Airflow hook (the
        Spark provider's hook does not pass it on).
    :param kwargs: Passed to :class:`SparkSubmitHook`.
    """

    def __init__(
        self,
        *,
        on_line: Callable[[str], None] | None = None,
        logger_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._capture(on_line, logger_name)

    def _capture(self, on_line: Callable[[str], None] | None, logger_name: str | None) -> None:
        self.on_line = on_line
        #: What the job's lines on spark-submit's output said (``core/spark_job.JobAnswers``).
        self.answers = JobAnswers()
        #: The Hadoop server (a YARN ResourceManager) spark-submit could not reach, and the one it set out for.
        self.unreachable: str | None = None
        self.unreachable_how = ""
        self.resource_manager: str | None = None
        if logger_name is not None:
            self._logger_name = logger_name  # what BaseHook(logger_name=...) sets

    @classmethod
    def adopt(cls, hook: SparkSubmitHook) -> IcebergSparkSubmitHook:
        """``hook``, as built by ``SparkSubmitOperator``, turned into this class in place.

        The operator builds its hook from some thirty of its own attributes, and newer provider versions add
        more; taking that very hook, rather than building a second one from a copied argument list, keeps
        every one of them. This class adds behaviour only, so the change of class is safe.
        """
        hook.__class__ = cls
        adopted: IcebergSparkSubmitHook = hook  # type: ignore[assignment]
        adopted._capture(None, None)
        return adopted

    @property
    def result(self) -> dict[str, Any] | None:
        return self.answers.result

    @property
    def results(self) -> dict[str, dict[str, Any]]:
        return self.answers.results

    @property
    def commit_conflict(self) -> str | None:
        return self.answers.commit_conflict

    @property
    def lease_lost(self) -> str | None:
        return self.answers.lease_lost

    @property
    def no_go(self) -> str | None:
        return self.answers.no_go

    def _watch_for_an_unreachable_server(self, line: str) -> None:
        """End spark-submit once it has tried a server :data:`UNREACHABLE_AFTER_TRIES` times in vain, and note the
        server a Hadoop client gave up on: Hadoop's client would go on retrying a ResourceManager for 15 minutes
        (``yarn.resourcemanager.connect.max-wait.ms``) while the table's writers stay paused. (In client deploy
        mode the driver, at ``spark.log.level`` WARN, logs no retry: the rewrite task bounds that wait instead,
        :data:`RM_CONNECT_WAIT`.)"""
        if (rm := _CONNECTING_TO_RM.search(line)) is not None:
            self.resource_manager = rm.group(1).lstrip("/")
        if self.unreachable is None and (gave_up := _GAVE_UP.search(line)) is not None:
            self.unreachable = gave_up.group(1)  # spark-submit fails on its own now
            self.unreachable_how = "it refused every connection until Hadoop's client gave up"
            return
        retrying = _RETRYING.search(line)
        if retrying is None or int(retrying.group(2)) + 1 < UNREACHABLE_AFTER_TRIES or self.unreachable:
            return
        self.unreachable = retrying.group(1)
        self.unreachable_how = f"it refused {UNREACHABLE_AFTER_TRIES} tries"
        self.log.error(
            "spark-submit could not reach %s in %d tries: ending it", self.unreachable, UNREACHABLE_AFTER_TRIES
        )
        if self._submit_sp is not None and self._submit_sp.poll() is None:
            self._submit_sp.kill()

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        kwargs.setdefault("preexec_fn", functools.partial(die_with_parent, os.getpid()))
        return super().submit(application, **kwargs)

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        def read(lines: Iterator[Any]) -> Iterator[Any]:
            for raw in lines:
                yield raw  # the hook handles the line first, so a failing callback never hides its log
                line = str(raw).strip()
                self.answers.take(line)
                self._watch_for_an_unreachable_server(line)
                if self.on_line is not None:
                    self.on_line(line)

        super()._process_spark_submit_log(read(itr))
