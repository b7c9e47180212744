"""Manual runs with their own settings: the Params of the trigger form, and what they change in the rewrites.

Both DAG kinds declare these Params, each with a JSON schema and a description, so the UI's trigger form shows
them. ``check_run_params``, the first task of each DAG, validates them with the same checks that build the
``CALL`` and fails, naming the parameter, before the gate closes; on a dry run it reports what would be
rewritten and skips the rest of the run, so the gate is never closed and nothing is committed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import Param

from spark_jobs.iceberg_call import InvalidCallError, normalize_arguments, normalize_options

# Param name -> the rewrite option it sets, in both rewrite procedures.
_OPTION_PARAMS = {
    "rewrite_all": "rewrite-all",
    "target_file_size_bytes": "target-file-size-bytes",
    "min_input_files": "min-input-files",
    "partial_progress": "partial-progress.enabled",
}
# Param name -> argument of rewrite_data_files.
_ARGUMENT_PARAMS = ("strategy", "sort_order")


def run_params() -> dict[str, Param]:
    """The Params every table DAG declares. Unset (null) values leave the DAG's configured behaviour."""
    return {
        "where": Param(
            None,
            type=["null", "string"],
            description="Spark SQL predicate selecting the partitions to rewrite, e.g. dt >= '20261120'. "
            "Empty: the DAG's own predicate (recent partitions, or the logical date's partition).",
        ),
        "rewrite_all": Param(
            None, type=["null", "boolean"], description="Rewrite every file, not just small ones (rewrite-all)."
        ),
        "target_file_size_bytes": Param(
            None, type=["null", "integer"], minimum=1, description="Target size of the rewritten files, in bytes."
        ),
        "min_input_files": Param(
            None, type=["null", "integer"], minimum=1, description="Rewrite a file group only from this many files."
        ),
        "partial_progress": Param(
            None, type=["null", "boolean"], description="Commit file groups as they finish (partial-progress)."
        ),
        "strategy": Param(
            "binpack", type="string", enum=["binpack", "sort"], description="binpack, or sort by sort_order."
        ),
        "sort_order": Param(
            None,
            type=["null", "string"],
            description="With strategy sort: e.g. 'id DESC NULLS LAST, ts' or 'zorder(a, b)'. Empty: the "
            "table's own sort order.",
        ),
        "dry_run": Param(
            False,
            type="boolean",
            description="Only report what would be rewritten (files and bytes per partition); never close the gate.",
        ),
    }


@dataclass(frozen=True)
class RunOverrides:
    """What a run's Params change: options and arguments per procedure, the predicate, dry run or not."""

    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    arguments: dict[str, dict[str, Any]] = field(default_factory=dict)
    where: str | None = None
    dry_run: bool = False


def overrides_from_params(params: Mapping[str, Any]) -> RunOverrides:
    """Validate a run's Params; raise ValueError naming the first bad parameter."""
    options: dict[str, dict[str, Any]] = defaultdict(dict)
    arguments: dict[str, dict[str, Any]] = defaultdict(dict)
    for param, option in _OPTION_PARAMS.items():
        value = params.get(param)
        if value is None:
            continue
        for procedure in ("rewrite_data_files", "rewrite_position_delete_files"):
            try:
                normalize_options(procedure, {option: value})
            except InvalidCallError as error:
                raise ValueError(f"param {param!r}: {error}") from None
            options[procedure][option] = value
    chosen = {name: params.get(name) for name in _ARGUMENT_PARAMS if params.get(name) is not None}
    if chosen.get("strategy") == "binpack":
        chosen.pop("strategy")  # binpack is Iceberg's default; say nothing
    try:
        normalize_arguments("rewrite_data_files", chosen)
    except InvalidCallError as error:
        bad = next((name for name in _ARGUMENT_PARAMS if repr(name) in str(error)), "strategy")
        raise ValueError(f"param {bad!r}: {error}") from None
    arguments["rewrite_data_files"].update(chosen)
    where = params.get("where")
    if where is not None and not isinstance(where, str):
        raise ValueError(f"param 'where' must be a Spark SQL predicate string, got {where!r}")
    dry_run = params.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise ValueError(f"param 'dry_run' must be true or false, got {dry_run!r}")
    return RunOverrides(options=dict(options), arguments=dict(arguments), where=where or None, dry_run=dry_run)
