"""Which Iceberg a table's Spark jobs run, and which procedure options that Iceberg takes.

Iceberg's Spark actions refuse an option they do not know (``Cannot use options [...], they are not supported by
the action or the rewriter``), and only once the job runs: behind a closed gate. So the version is known before:
from the Iceberg Spark runtime that the table's ``spark.packages`` or ``spark.jars`` name
(``iceberg-spark-runtime-3.4_2.12:1.5.2``, ``iceberg-spark-runtime-3.4_2.12-1.5.2.jar``), or from the setting
``spark.iceberg_version`` when the cluster brings its own. An option the version lacks is then never sent: a
default of this provider's is left out, and one a table asks for is refused when the table list is parsed, with
an error that names the option and the version.

The releases below were read off each release's ``RewriteDataFilesSparkAction`` and the rewriters and planners
whose ``validOptions()`` it takes (docs/compatibility.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from airflow_iceberg.core.tables import InvalidCallError, shown


@dataclass(frozen=True, order=True)
class IcebergVersion:
    """An Iceberg release, ``major.minor[.patch]``, ordered as releases are."""

    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: object) -> IcebergVersion:
        match = re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text).strip()) if isinstance(text, str | float) else None
        if match is None:
            raise InvalidCallError(f"an Iceberg version is major.minor[.patch], e.g. 1.5.2; got {shown(text)}")
        return cls(int(match[1]), int(match[2]), int(match[3] or 0))

    @classmethod
    def of_release(cls, text: str | None) -> IcebergVersion | None:
        """The release ``text`` starts with, as a writer says it (``1.11.0``, ``1.12.0-SNAPSHOT``); None for None or
        text that names no release."""
        match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text.strip()) if text else None
        return cls(int(match[1]), int(match[2]), int(match[3] or 0)) if match else None

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


#: The oldest Iceberg this provider runs its jobs with: the original design's (Spark 3.4, Flink 1.18).
OLDEST_SUPPORTED = IcebergVersion(1, 5)

#: Iceberg's Spark runtime, as a Maven coordinate (``...:<version>``) or a jar's file name (``...-<version>.jar``).
_RUNTIME = re.compile(
    r"iceberg-spark-runtime-(?P<spark>\d+\.\d+)_(?P<scala>\d+\.\d+)(?::|-)(?P<version>\d+\.\d+\.\d+)(?:\.jar)?$"
)


@dataclass(frozen=True)
class IcebergRuntime:
    """The Iceberg of a table's Spark jobs: its version, the Spark line its runtime is built for (None when given
    as a setting), and what said so, for error messages."""

    version: IcebergVersion
    spark_line: str | None
    source: str

    def describe(self) -> str:
        return f"Iceberg {self.version} ({self.source})"


def runtime_of(
    packages: Iterable[str] = (), jars: Iterable[str] = (), version: str | None = None
) -> IcebergRuntime | None:
    """The Iceberg that ``version`` (the ``spark.iceberg_version`` setting) or the runtime among ``packages`` and
    ``jars`` names; None when nothing does (the cluster's own, unknown here: every option is sent).

    An explicit version wins. Two runtimes of different versions, or one older than :data:`OLDEST_SUPPORTED`,
    are refused.
    """
    if version is not None:
        runtime = IcebergRuntime(IcebergVersion.parse(version), None, "spark.iceberg_version")
    else:
        found = {}
        for item in [*packages, *jars]:
            match = _RUNTIME.search(str(item).rsplit("/", 1)[-1])
            if match:
                found[match.group(0).removesuffix(".jar")] = IcebergRuntime(
                    IcebergVersion.parse(match["version"]), match["spark"], match.group(0).removesuffix(".jar")
                )
        if len({runtime.version for runtime in found.values()}) > 1:
            raise InvalidCallError(f"the Spark jobs would load two Iceberg runtimes: {', '.join(sorted(found))}")
        if not found:
            return None
        runtime = next(iter(found.values()))
    if runtime.version < OLDEST_SUPPORTED:
        raise InvalidCallError(
            f"{runtime.describe()} is older than the oldest Iceberg this provider supports, {OLDEST_SUPPORTED}"
        )
    return runtime


@dataclass(frozen=True)
class Since:
    """The first Iceberg release in which a procedure takes an option, and a later one for Spark lines where it
    came later; ``why`` says why this provider needs the release, where it is the provider's own need."""

    release: IcebergVersion
    on_spark: Mapping[str, IcebergVersion] | None = None
    why: str | None = None

    def release_for(self, spark_line: str | None) -> IcebergVersion:
        return (self.on_spark or {}).get(spark_line or "", self.release)


_V = IcebergVersion

#: Options added after :data:`OLDEST_SUPPORTED`, by procedure: every other option of ``PROCEDURE_OPTIONS`` is in
#: every supported release. Keyed by option, or by ``option=value`` where only that value needs the release.
OPTIONS_SINCE: dict[str, dict[str, Since]] = {
    "rewrite_data_files": {
        "output-spec-id": Since(_V(1, 6)),
        # The Spark 3.4 action took it only from 1.9 on.
        "partial-progress.max-failed-commits": Since(_V(1, 6), on_spark={"3.4": _V(1, 9)}),
        "remove-dangling-deletes": Since(_V(1, 7)),
        "delete-ratio-threshold": Since(_V(1, 8)),
        "partial-progress.enabled=true": Since(
            _V(1, 9),
            why="the Spark job counts the file groups a partial-progress rewrite left uncommitted with Iceberg's "
            "BinPackRewriteFilePlanner (1.9 and later); without that count a run could succeed with files left "
            "behind, so partial progress is refused",
        ),
    },
}


def _since(procedure: str, option: str, value: str) -> Since | None:
    known = OPTIONS_SINCE.get(procedure, {})
    return known.get(option) or known.get(f"{option}={value}")


def missing_option(procedure: str, option: str, value: str, runtime: IcebergRuntime | None) -> str | None:
    """Why ``runtime`` cannot take ``procedure``'s ``option`` (with ``value``, as Spark takes it), or None if it can
    (or if the runtime is unknown)."""
    since = _since(procedure, option, value)
    if runtime is None or since is None:
        return None
    needed = since.release_for(runtime.spark_line)
    if runtime.version >= needed:
        return None
    where = f" with Spark {runtime.spark_line}" if since.on_spark and runtime.spark_line in since.on_spark else ""
    reason = f": {since.why}" if since.why else ""
    return (
        f"{procedure} option {option!r} needs Iceberg {needed.major}.{needed.minor} or newer{where}; "
        f"this table's Spark jobs run {runtime.describe()}{reason}"
    )


def check_options(procedure: str, options: Mapping[str, str], runtime: IcebergRuntime | None) -> None:
    """Refuse, naming option and version, the first of ``options`` (normalized) that ``runtime`` lacks."""
    for option, value in options.items():
        reason = missing_option(procedure, option, value, runtime)
        if reason:
            raise InvalidCallError(reason)


def options_it_takes(procedure: str, options: Mapping[str, str], runtime: IcebergRuntime | None) -> dict[str, str]:
    """``options`` (normalized) without those ``runtime`` lacks: for this provider's own defaults, never sent."""
    return {k: v for k, v in options.items() if missing_option(procedure, k, v, runtime) is None}
