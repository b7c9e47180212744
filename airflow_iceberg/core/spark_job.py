"""What Airflow and the Spark job exchange, defined once for both sides.

- :class:`JobArguments`: the job's command line, the table and its :class:`ProcedureCall` list (no secret ever);
- its secrets file, which the job reads and deletes, is typed in :mod:`airflow_iceberg.core.job_secrets`;
- its result lines (:func:`format_result_line`) and the markers it prints when its run lost the gate, or when a
  pre-started job ended without the go, and what Airflow reads from those lines (:class:`JobAnswers`), whether
  they came on spark-submit's output or through the gate's MySQL (``core/job_report.py``, cluster deploy mode);
- how it removes the delete files a rewrite left dangling (:func:`split_dangling_removal`, :func:`until_it_wins`),
  and which ungated procedures it calls again when a writer's commit beat theirs (``RETRIED_WHEN_BEATEN``).
"""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from airflow_iceberg.core.procedures import build_call, normalize_options
from airflow_iceberg.core.tables import InvalidCallError, TableName, shown

#: How ``--calls`` says its value is base64 of the calls' JSON (:meth:`JobArguments.argv`).
CALLS_BASE64 = "base64:"


#: The line prefix the Spark job prints its procedure result row behind, for the Airflow operator to find.
RESULT_MARKER = "AIRFLOW_ICEBERG_RESULT "


#: The line prefix the Spark job prints behind the reason it stopped: its run no longer holds the write gate.
LEASE_LOST_MARKER = "AIRFLOW_ICEBERG_LEASE_LOST "


#: The line prefix a pre-started job prints behind the reason it ended without a ``CALL``: no go came.
NO_GO_MARKER = "AIRFLOW_ICEBERG_NO_GO "


@dataclass(frozen=True)
class ProcedureCall:
    """One Iceberg procedure for the job to run: its options, ``where`` predicate and other arguments."""

    procedure: str
    options: Mapping[str, Any] = field(default_factory=dict)
    where: str | None = None
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def statement(self, table: TableName) -> str:
        """The checked ``CALL`` on ``table``; :class:`InvalidCallError` names a bad value."""
        return build_call(self.procedure, table, self.options, self.where, self.arguments)

    @classmethod
    def from_json(cls, value: object) -> ProcedureCall:
        """The call a JSON object describes; :class:`InvalidCallError` names an object that is not one."""
        known = {"procedure", "options", "where", "arguments"}
        if not isinstance(value, dict) or not isinstance(value.get("procedure"), str) or set(value) - known:
            raise InvalidCallError(f"a procedure call is an object with a procedure and {known}, got {shown(value)}")
        return cls(**value)


@dataclass(frozen=True)
class JobArguments:
    """The job's command line: everything but its secrets, which travel in its secrets file."""

    table: TableName
    calls: Sequence[ProcedureCall]
    job_secrets: str | None = None  # a path, or in cluster deploy modes the name of a file shipped with --files

    def argv(self) -> list[str]:
        """The command line. The calls travel as base64 of their JSON (:data:`CALLS_BASE64`): YARN takes ``{{`` and
        ``}}`` in a container's command for its own parameter expansion, and turned ``"arguments": {}}`` into
        ``"arguments": {,`` in cluster deploy mode; base64 passes every launcher and shell unchanged."""
        calls = json.dumps([asdict(call) for call in self.calls])
        secrets = ["--job-secrets", self.job_secrets] if self.job_secrets else []
        encoded = CALLS_BASE64 + base64.urlsafe_b64encode(calls.encode()).decode()
        return ["--table", str(self.table), "--calls", encoded, *secrets]

    @staticmethod
    def calls_json(text: str) -> Any:
        """What ``--calls`` holds, decoded: the base64 :meth:`argv` gives, or plain JSON (a job run by hand)."""
        if text.startswith(CALLS_BASE64):
            try:
                text = base64.b64decode(text[len(CALLS_BASE64) :].encode(), altchars=b"-_", validate=True).decode()
            except (ValueError, UnicodeDecodeError) as error:
                raise InvalidCallError(f"--calls is not valid base64: {shown(text)}") from error
        return json.loads(text)

    @classmethod
    def parse(cls, argv: Sequence[str] | None = None) -> JobArguments:
        """The arguments in ``argv``, each checked: a bad one raises before Spark starts."""
        parser = argparse.ArgumentParser(description="Run Iceberg procedures on one table, in order")
        parser.add_argument("--table", required=True, help="catalog.namespace.table")
        parser.add_argument(
            "--calls", required=True, help="JSON list of procedure calls (ProcedureCall), or base64: and its base64"
        )
        parser.add_argument("--job-secrets", default=None, help="the job's secrets file: a path, or a --files name")
        args = parser.parse_args(argv)
        calls = cls.calls_json(args.calls)
        if not isinstance(calls, list) or not calls:
            raise InvalidCallError(f"--calls must be a non-empty JSON list of procedure calls, got {shown(calls)}")
        return cls(TableName.parse(args.table), tuple(ProcedureCall.from_json(c) for c in calls), args.job_secrets)


def format_result_line(result: Mapping[str, object]) -> str:
    """The line the Spark job prints for its result row."""
    return RESULT_MARKER + json.dumps(dict(result), sort_keys=True, default=str)


def parse_result_line(line: str) -> dict[str, object] | None:
    """The result row from a line printed by :func:`format_result_line`, or None for any other line.

    Text after the JSON object is ignored: spark-submit's stderr (Spark's console progress bar, which ends
    its updates with a carriage return, not a newline) can land on the same line of the merged output.
    """
    start = line.find(RESULT_MARKER)
    if start < 0:
        return None
    try:
        result, _ = json.JSONDecoder().raw_decode(line, start + len(RESULT_MARKER))
    except ValueError:
        return None
    return result if isinstance(result, dict) else None


#: ``rewrite_data_files``' option that removes, after its rewrite, the delete files that then apply to nothing.
REMOVE_DANGLING = "remove-dangling-deletes"
#: How many times the job tries that removal, each time at the table's newest snapshot, before it leaves the
#: dangling files to the next run.
DANGLING_REMOVAL_ATTEMPTS = 5
#: The procedures that run beside writers, with the gate open, and whose commit a writer's can beat: Iceberg's
#: RewriteManifests refuses to commit once a writer's commit has replaced a manifest it rewrote ("Deleted manifest
#: ... could not be found in the latest snapshot"). The job calls them again, each time at the newest snapshot, at
#: most this many times: a manifest rewrite is metadata only, so each try costs seconds.
RETRIED_WHEN_BEATEN = frozenset({"rewrite_manifests"})


#: Iceberg's exceptions for a commit that lost to a concurrent one: another writer committed to the same
#: files while the job ran ("Cannot commit, found new position delete for replaced data file", ...).
COMMIT_CONFLICT_EXCEPTIONS = (
    "org.apache.iceberg.exceptions.CommitFailedException",
    "org.apache.iceberg.exceptions.ValidationException",
)


@dataclass
class JobAnswers:
    """What the job's lines say: each procedure's result row by name (in the order they came), the first line that
    reports an Iceberg commit conflict, the reason the job stopped because its run lost the write gate, and the
    reason a pre-started job ended without a ``CALL``. Any other line says nothing."""

    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    commit_conflict: str | None = None
    lease_lost: str | None = None
    no_go: str | None = None
    #: The last result row seen, with or without a procedure's name.
    result: dict[str, Any] | None = None

    def take(self, line: str) -> None:
        result = parse_result_line(line)
        if result is not None:
            procedure = result.pop("procedure", None)
            self.result = result
            if isinstance(procedure, str):
                self.results[procedure] = result
        if self.commit_conflict is None and any(name in line for name in COMMIT_CONFLICT_EXCEPTIONS):
            self.commit_conflict = line
        if LEASE_LOST_MARKER in line:
            self.lease_lost = line.split(LEASE_LOST_MARKER, 1)[1]
        if NO_GO_MARKER in line:
            self.no_go = line.split(NO_GO_MARKER, 1)[1]

    @classmethod
    def of(cls, lines: Sequence[str]) -> JobAnswers:
        answers = cls()
        for line in lines:
            answers.take(line)
        return answers

    def before(self, other: JobAnswers) -> JobAnswers:
        """These answers, each one that is missing taken from ``other``: the job's report first, its output after."""
        return JobAnswers(
            results=self.results or other.results,
            commit_conflict=self.commit_conflict or other.commit_conflict,
            lease_lost=self.lease_lost or other.lease_lost,
            no_go=self.no_go or other.no_go,
            result=self.result if self.results else other.result,
        )


def split_dangling_removal(call: ProcedureCall) -> tuple[ProcedureCall, bool]:
    """``call`` without :data:`REMOVE_DANGLING`, and whether it asked for it: the job then runs the removal itself,
    after the procedure.

    Iceberg 1.12's removal (``RemoveDanglingDeleteFilesAction``) fails when any snapshot was committed since it
    began (``Cannot remove dangling deletes: current snapshot changed``), and ``rewrite_data_files`` fails with it,
    after its rewrite committed: every writer's commit, an append too, could fail the run. Run on its own, the
    removal commits nothing when it loses, and is tried again (:func:`until_it_wins`); on earlier releases it is
    the same action the procedure runs.
    """
    if call.procedure != "rewrite_data_files":
        return call, False
    if normalize_options(call.procedure, call.options).get(REMOVE_DANGLING) != "true":
        return call, False
    return replace(call, options={**call.options, REMOVE_DANGLING: False}), True


@dataclass(frozen=True)
class Attempts:
    """What :func:`until_it_wins` did: the attempt's result (None when every attempt lost), how many it made, and
    what each lost attempt lost to."""

    result: Any
    attempts: int
    lost_to: tuple[str, ...] = ()


def until_it_wins(
    attempt: Callable[[], Any], lost: Callable[[Exception], str | None], attempts: int = DANGLING_REMOVAL_ATTEMPTS
) -> Attempts:
    """Run ``attempt`` until it returns, at most ``attempts`` times; ``lost`` says what an error lost to (a commit
    that beat it), or None for an error that is not such a loss, which is raised at once."""
    losses: list[str] = []
    for made in range(1, attempts + 1):
        try:
            return Attempts(attempt(), made, tuple(losses))
        except Exception as error:
            reason = lost(error)
            if reason is None:
                raise
            losses.append(reason)
    return Attempts(None, attempts, tuple(losses))
