"""Which writers must pause for the work a gate guards, by Iceberg's own conflict rules: one pure function.

A pause that protects nothing is a cost, not safety. Iceberg's commits conflict only in a few ways, read from its
source (``core/.../BaseRewriteFiles.java``, ``MergingSnapshotProducer.java``, Spark's ``SparkPositionDeltaWrite``
and ``SparkWrite``) and measured in ``make test-stacks``:

- a rewrite (``RewriteFiles``, as ``rewrite_data_files`` commits it) checks only that no position deletes or
  deletion vectors were added meanwhile for the data files it replaces, and that every file it removes is still
  there. Appends never conflict with it; equality deletes do not either while it keeps its starting sequence number
  (``use-starting-sequence-number``, on by default). A position-delete file that names one data file (file-scoped)
  conflicts only with that file, a partition-scoped one with every replaced file of its partition;
- Flink's upsert sink writes position deletes only for rows of its own commit, file-scoped since Iceberg 1.6
  (apache/iceberg#10200), and on format v3 deletion vectors for its own new files since 1.11 (#14197). Before 1.6
  its position deletes are partition-scoped: the original design's collision. A position-delete rewrite on format
  v3 checks concurrently added deletion vectors per data file (``Found concurrently added DV``), so it conflicts
  with a writer's deletion vectors on the files it rewrites deletes for, never with those on a writer's own new
  files;
- a Spark ``MERGE``, ``UPDATE`` or ``DELETE`` changes rows of existing files, merge-on-read (position deletes,
  deletion vectors) or copy-on-write (files replaced): it conflicts with a rewrite both ways;
- a batch ``DELETE``, ``UPDATE`` or ``MERGE`` itself fails, under serializable isolation (Iceberg's default), when
  another commit adds data its condition could match; under snapshot isolation appends never fail it, a
  merge-on-read ``DELETE`` checks only that the files it deletes from still exist, and an ``UPDATE`` or ``MERGE`` (or
  any copy-on-write statement) fails on delete files added for the files it read;
- removing the delete files a rewrite left dangling fails, from Iceberg 1.12, on any commit since it began: the
  rewrite job runs it on its own, again until it wins (``core/spark_job.split_dangling_removal``), so it is no
  reason to pause anyone.

:func:`decide_pauses` applies them to one closing's work and the table's writers: each writer gets a
:class:`PauseDecision`, pause or not, with its reason in one sentence. A writer that declares nothing (every writer
of the protocol before schema version 9) is taken as one that conflicts. ``docs/writers.md`` shows the rule as a
table generated from :func:`conflict_table`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from airflow_iceberg.core.iceberg_runtime import IcebergVersion
from airflow_iceberg.core.tables import shown


class CommitKind(StrEnum):
    """What a writer's commits do to the table, in the words its users know; the order is the rank of conflict."""

    #: New data files only: an ``INSERT``, Flink's or Kafka Connect's append sink, a Spark streaming append.
    APPENDS = "appends"
    #: Upserts whose deletes touch only its own new files: equality deletes, and position deletes (or, on format
    #: v3, deletion vectors) for rows it wrote in the same commit. Flink's upsert sink, Iceberg 1.6 and later.
    UPSERTS = "upserts"
    #: Row-level changes to existing files: a merge-on-read or copy-on-write ``MERGE``, ``UPDATE`` or ``DELETE``, a
    #: batch GDPR delete, Flink's upsert sink before Iceberg 1.6.
    ROW_LEVEL = "row-level"


#: What each kind means, for messages and the docs.
KIND_WORDS = {
    CommitKind.APPENDS: "appends only",
    CommitKind.UPSERTS: "upserts whose deletes touch only its own new files",
    CommitKind.ROW_LEVEL: "row-level changes to existing files",
}
_RANK = {kind: rank for rank, kind in enumerate(CommitKind)}


def parse_commit_kind(value: object, *, where: str = "commit kind") -> CommitKind | None:
    """``value`` as a :class:`CommitKind` (None stays None: declared nothing); a ValueError naming the value and
    the kinds otherwise."""
    if value is None or isinstance(value, CommitKind):
        return value
    if isinstance(value, str):
        try:
            return CommitKind(value)
        except ValueError:
            pass
    kinds = ", ".join(f"{k.value!r} ({KIND_WORDS[k]})" for k in CommitKind)
    raise ValueError(f"unknown {where} {shown(value)}: a writer commits one of {kinds}")


def widest(*kinds: CommitKind | None) -> CommitKind | None:
    """The kind that conflicts the most of ``kinds`` (None among them is left out; all None: None)."""
    known = [k for k in kinds if k is not None]
    return max(known, key=_RANK.__getitem__) if known else None


class Isolation(StrEnum):
    """A batch statement's isolation level (``write.delete.isolation-level`` and its kin)."""

    SERIALIZABLE = "serializable"
    SNAPSHOT = "snapshot"


class WriteMode(StrEnum):
    """How a batch statement changes rows (``write.delete.mode`` and its kin; copy-on-write is Iceberg's default)."""

    COPY_ON_WRITE = "copy-on-write"
    MERGE_ON_READ = "merge-on-read"


class Command(StrEnum):
    DELETE = "delete"
    UPDATE = "update"
    MERGE = "merge"


@dataclass(frozen=True)
class BatchStatement:
    """A batch ``DELETE``, ``UPDATE`` or ``MERGE`` that a job runs while it holds the gate (``GateHolder``).

    Its isolation level and mode are the table's ``write.<command>.isolation-level`` and ``write.<command>.mode``
    (``spark_writers.exclusive_write`` reads them); the text of each is checked here.
    """

    command: Command
    isolation: Isolation = Isolation.SERIALIZABLE
    mode: WriteMode = WriteMode.COPY_ON_WRITE

    def __post_init__(self) -> None:
        for field, kind in (("command", Command), ("isolation", Isolation), ("mode", WriteMode)):
            value = getattr(self, field)
            try:
                object.__setattr__(self, field, kind(value))
            except ValueError:
                known = ", ".join(repr(k.value) for k in kind)
                raise ValueError(f"a batch statement's {field} must be one of {known}, got {shown(value)}") from None

    def __str__(self) -> str:
        return f"a {self.mode} {self.command.upper()} under {self.isolation} isolation"


#: The rewrite procedures a compaction runs while it holds the gate.
REWRITE_DATA_FILES = "rewrite_data_files"
REWRITE_POSITION_DELETE_FILES = "rewrite_position_delete_files"
#: Procedures that no writer's commit can fail, nor they it (they commit nothing a writer validates against).
_HARMLESS = frozenset({"expire_snapshots", "remove_orphan_files"})


@dataclass(frozen=True)
class GuardedWork:
    """What the gate's holder does while it holds the gate, as far as conflicts go.

    :param procedures: The Iceberg procedures it runs (``rewrite_data_files``, ``rewrite_position_delete_files``).
    :param statement: The batch statement it runs, for a job that holds the gate itself.
    :param format_version: The table's format version; None: not known.
    :param use_starting_sequence_number: ``rewrite_data_files``'s option of that name (Iceberg's default: true).
    :param pause_all: The table's ``pause_writers: all``: every writer pauses, as before schema version 9.
    """

    procedures: tuple[str, ...] = ()
    statement: BatchStatement | None = None
    format_version: int | None = None
    use_starting_sequence_number: bool = True
    pause_all: bool = False

    def __str__(self) -> str:
        parts = [*self.procedures, *([str(self.statement)] if self.statement else [])]
        return " and ".join(parts) or "no work"

    def as_xcom(self) -> dict[str, Any]:
        """As JSON (a plan's XCom, a trigger's arguments); :meth:`from_xcom` reads it back."""
        statement = self.statement
        return {
            "procedures": list(self.procedures),
            "statement": None
            if statement is None
            else [str(statement.command), str(statement.isolation), str(statement.mode)],
            "format_version": self.format_version,
            "use_starting_sequence_number": self.use_starting_sequence_number,
            "pause_all": self.pause_all,
        }

    @classmethod
    def from_xcom(cls, value: Mapping[str, Any]) -> GuardedWork:
        statement = value.get("statement")
        return cls(
            procedures=tuple(value.get("procedures") or ()),
            statement=None if statement is None else BatchStatement(*map(str, statement)),  # type: ignore[arg-type]
            format_version=value.get("format_version"),
            use_starting_sequence_number=bool(value.get("use_starting_sequence_number", True)),
            pause_all=bool(value.get("pause_all", False)),
        )


#: Work nobody described (a gate closed without saying what for): every writer pauses.
UNDESCRIBED = GuardedWork(pause_all=True)


@dataclass(frozen=True)
class WriterCommits:
    """What a writer said of its commits when it registered, and what the table's history showed it commit.

    :param writer_id: Its name at the gate.
    :param declared: The kind it declared; None: nothing (a writer of the previous protocol).
    :param iceberg_version: The Iceberg release it commits with, as it said; None: not said.
    :param commits_as: What its snapshots' summaries name it by (``flink.job-id=...``); None: nothing, so its
        commits cannot be told from an unknown writer's.
    :param observed: The widest kind the table's history showed it commit, when wider than it declared.
    :param observed_detail: The snapshot and what it did, for messages.
    """

    writer_id: str
    declared: CommitKind | None
    iceberg_version: str | None = None
    commits_as: str | None = None
    observed: CommitKind | None = None
    observed_detail: str | None = None

    @property
    def kind(self) -> CommitKind | None:
        """What it is taken to commit: the wider of what it declared and what it was seen to commit."""
        return widest(self.declared, self.observed) if self.declared is not None else None


@dataclass(frozen=True)
class PauseDecision:
    """Whether one writer must pause for a closing, and why, in one sentence (``because``: the part of it about the
    work, without what the writer commits)."""

    writer_id: str
    pause: bool
    reason: str
    because: str = ""

    def as_xcom(self) -> dict[str, object]:
        return {"writer": self.writer_id, "pause": self.pause, "reason": self.reason}


def _before(version: str | None, release: IcebergVersion) -> bool:
    """The writer's Iceberg is known, and older than ``release``."""
    said = IcebergVersion.of_release(version)
    return said is not None and said < release


def _what_it_commits(writer: WriterCommits) -> str:
    """``it commits ... (kind, Iceberg x.y.z)``, or what the history showed instead of what it declared."""
    version = f", Iceberg {writer.iceberg_version}" if writer.iceberg_version else ""
    kind = writer.kind
    assert kind is not None and writer.declared is not None
    if kind != writer.declared:
        seen = f": {writer.observed_detail}" if writer.observed_detail else ""
        release = f" (Iceberg {writer.iceberg_version})" if writer.iceberg_version else ""
        return f"it declared {writer.declared}{release}, but the table's history shows {KIND_WORDS[kind]}{seen}"
    return f"it commits {KIND_WORDS[kind]} ({kind}{version})"


def _against_procedure(procedure: str, work: GuardedWork, writer: WriterCommits, kind: CommitKind) -> str | None:
    """Why ``writer`` conflicts with ``procedure``, or None if it does not."""
    if procedure in _HARMLESS:
        return None
    if procedure not in (REWRITE_DATA_FILES, REWRITE_POSITION_DELETE_FILES):
        return f"{procedure} is not one whose conflicts are known, so every writer pauses for it"
    if kind == CommitKind.ROW_LEVEL:
        return f"they conflict with {procedure} both ways"
    if kind == CommitKind.APPENDS:
        return None
    # Upserts: equality deletes, and position deletes or deletion vectors for rows of its own commit.
    if _before(writer.iceberg_version, IcebergVersion(1, 6)):
        return (
            f"Flink's upsert sink before Iceberg 1.6 writes partition-scoped position deletes, which conflict with "
            f"every file {procedure} replaces in their partitions (apache/iceberg#10200)"
        )
    if procedure == REWRITE_DATA_FILES and not work.use_starting_sequence_number:
        return (
            "rewrite_data_files runs with use-starting-sequence-number false, so the equality deletes it commits "
            "meanwhile conflict with the files it replaces"
        )
    if (
        work.format_version is not None
        and work.format_version >= 3
        and _before(writer.iceberg_version, IcebergVersion(1, 11))
    ):
        return (
            f"on a format-v{work.format_version} table Flink's upsert sink writes deletion vectors for its own "
            "files only since Iceberg 1.11 (apache/iceberg#14197)"
        )
    # A position-delete rewrite on format v3 checks concurrently added deletion vectors per data file (Found
    # concurrently added DV): an upsert's name only its own new files, for which it never writes one.
    return None


def _against_statement(statement: BatchStatement, writer: WriterCommits, kind: CommitKind) -> str | None:
    """Why ``writer`` conflicts with the batch ``statement``, or None if it does not."""
    if kind == CommitKind.ROW_LEVEL:
        return f"they conflict with {statement}"
    if statement.isolation == Isolation.SERIALIZABLE:
        return (
            f"{statement} fails when a commit adds data its condition could match (Found conflicting files that "
            "can contain records matching ...)"
        )
    if kind == CommitKind.APPENDS:
        return None
    if statement.mode == WriteMode.MERGE_ON_READ and statement.command == Command.DELETE:
        return None  # it checks only that the data files it deletes from still exist
    return f"{statement} fails on delete files added meanwhile for the files it read, and an upsert adds some"


#: Why a writer that keeps committing may: the part of its reason that is about the work.
NO_CONFLICT = "nothing it commits can conflict with this work"
#: Why a writer that could keep committing pauses all the same: its commits cannot be told from an unknown writer's.
UNNAMED = (
    "it names nothing its snapshots carry (commits_as), so the idle wait could not tell its commits from an unknown "
    "writer's"
)


def must_pause(work: GuardedWork, writer: WriterCommits) -> PauseDecision:
    """Whether ``writer`` must pause while ``work`` holds the gate, and why (:mod:`the module's rules <.conflicts>`)."""
    name = writer.writer_id
    if work.pause_all:
        why = "the table's pause_writers is 'all'" if work != UNDESCRIBED else "the closing did not say what it does"
        because = f"{why}, so every writer pauses"
        return PauseDecision(name, True, because, because)
    if writer.declared is None:
        because = (
            "it declares no commit kind (a writer of the previous protocol, or one that said nothing), so it is taken "
            "as one that can conflict"
        )
        return PauseDecision(name, True, because, because)
    kind = writer.kind
    assert kind is not None  # declared
    said = _what_it_commits(writer)
    reasons = [_against_procedure(p, work, writer, kind) for p in work.procedures]
    if work.statement is not None:
        reasons.append(_against_statement(work.statement, writer, kind))
    conflict = next((reason for reason in reasons if reason is not None), None)
    if conflict is not None:
        return PauseDecision(name, True, f"{said}, and {conflict}", conflict)
    if writer.commits_as is None:
        return PauseDecision(name, True, f"{said}, which do not conflict with {work}, but {UNNAMED}", UNNAMED)
    return PauseDecision(name, False, f"{said}, which do not conflict with {work}: it keeps committing", NO_CONFLICT)


def decide_pauses(work: GuardedWork, writers: Iterable[WriterCommits]) -> tuple[PauseDecision, ...]:
    """:func:`must_pause` for each of ``writers``, in their order."""
    return tuple(must_pause(work, writer) for writer in writers)


def summary(decisions: Iterable[PauseDecision]) -> str:
    """The decisions in a line, for the audit trail: who pauses and who does not."""
    decisions = list(decisions)
    paused = [d.writer_id for d in decisions if d.pause]
    free = [d.writer_id for d in decisions if not d.pause]
    keep = f"{', '.join(free)} {'keeps' if len(free) == 1 else 'keep'} committing"
    if not decisions:
        return "no writer registered"
    if not paused:
        return f"no writer must pause ({keep})"
    return f"pauses {', '.join(paused)}" + (f"; {keep}" if free else "")
