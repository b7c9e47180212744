"""``airflow-iceberg``: commands for the people who run the provider, beside Airflow's own CLI.

``airflow-iceberg migrate`` creates or upgrades the write gate's tables in the database of an
``iceberg_write_gate`` connection. It is the explicit schema step: run it once when installing or upgrading
the provider (``make setup`` does, for the embedded default); tasks never change the schema.

``airflow-iceberg force-open TABLE --reason TEXT`` opens a table's gate whoever holds it, for a run that died
with its gate closed: writers resume at once instead of when the lease ends. The audit trail records the run
that held the gate, its lease, and the reason.

``airflow-iceberg dags DIR`` puts the provider's DAG files into the DAG folder DIR (again after an upgrade: they
are the provider's), and the example table list ``iceberg_tables.yaml`` beside them unless DIR already has one. A
table list of more than ``tables_per_dag_file`` tables takes further compaction DAG files (``iceberg_compaction_1.py``
...): it writes those too, asks Airflow's dag-processor to parse the new ones at once (where Airflow's metadata
database is reachable), and removes those the list no longer takes.

``airflow-iceberg report [--table T] [--html DIR]`` prints, for each table of the table list, its gate (and who
holds it, the lease left, the writers' acknowledgements), its health now from Iceberg metadata, and its last
compaction from the run records; ``--html DIR`` also writes a static page with the history as PNG charts.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path
from typing import TextIO

from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.hooks.write_gate_schema import gate_schema


def _migrate(args: argparse.Namespace, out: TextIO) -> int:
    before, after = WriteGateHook(args.conn_id).migrate()
    schema = gate_schema()
    applied = [f"{v.number} ({v.summary})" for v in schema.versions if before < v.number <= after]
    where = f"write gate schema of connection {args.conn_id!r}"
    if applied:
        print(f"{where}: version {before} -> {after}; applied {', '.join(applied)}", file=out)
    else:
        print(f"{where}: at version {after}, the newest; nothing to do", file=out)
    return 0


def _force_open(args: argparse.Namespace, out: TextIO) -> int:
    opened = WriteGateHook(args.conn_id).force_open(args.table, args.reason)
    print(f"write gate of {args.table}: {'forced open' if opened else 'was already open'} ({args.reason})", file=out)
    return 0


#: What ``airflow-iceberg dags`` copies from the wheel's ``airflow_iceberg/example_dags``.
DAG_FILES = ("iceberg_compaction.py", "iceberg_table_list_check.py")
EXAMPLE_TABLE_LIST = "iceberg_tables.yaml"


def _dags(args: argparse.Namespace, out: TextIO) -> int:
    from importlib.resources import files

    shipped, folder = files("airflow_iceberg.example_dags"), args.folder
    if not folder.is_dir():
        print(f"{folder} is not a directory: give Airflow's DAG folder ([core] dags_folder)", file=sys.stderr)
        return 2
    for name in DAG_FILES:
        (folder / name).write_text(shipped.joinpath(name).read_text())
        print(f"wrote {folder / name}", file=out)
    table_list = folder / EXAMPLE_TABLE_LIST
    if table_list.exists():
        print(f"left {table_list} as it is", file=out)
    else:
        table_list.write_text(shipped.joinpath(EXAMPLE_TABLE_LIST).read_text())
        print(f"wrote {table_list}: an example; list your own tables in it", file=out)
    from airflow_iceberg.table_list.loader import CONFIG_ENV

    return _more_dag_files(folder, Path(os.environ.get(CONFIG_ENV) or table_list), out)


def _more_dag_files(folder: Path, table_list: Path, out: TextIO) -> int:
    """Write the further compaction DAG files that ``table_list`` takes, and remove those it no longer does."""
    from airflow_iceberg.exceptions import IcebergConfigError
    from airflow_iceberg.fleet.dag_files import dag_files_taken, write_dag_files
    from airflow_iceberg.table_list.loader import read_table_list

    try:
        document = read_table_list(table_list)
    except IcebergConfigError as error:
        print(f"{error}: wrote no further compaction DAG files", file=sys.stderr)
        return 2
    files = dag_files_taken(document)
    written, removed = write_dag_files(folder, files, remove_surplus=True)
    for path in written:
        print(f"wrote {path}", file=out)
    if written:
        print(request_parses(folder, written), file=out)
    for path in removed:
        print(f"removed {path}: the table list no longer takes it", file=out)
    if files > 1:
        print(
            f"{table_list}'s {len(document.entries):,} tables take {files} compaction DAG files "
            f"of at most {document.tables_per_dag_file:,} tables; run this again when the list grows past a multiple "
            "of that, or use the fleet setting's DAG bundle, which writes them itself",
            file=out,
        )
    return 0


def request_parses(folder: Path, paths: list[Path]) -> str:
    """Ask Airflow's dag-processor to parse ``paths``, new DAG files of ``folder``, at once; what was done, or why not.

    A priority parsing request (Airflow's ``dag_priority_parsing_request``, what the UI's reparse button makes)
    also makes the dag-processor list the folder's files again, so a new file is parsed within seconds, not at the
    next listing (``[dag_processor] refresh_interval``, 5 minutes by default). Meanwhile ``iceberg_compaction.py``,
    parsed every ``min_file_process_interval``, no longer builds the tables that moved, and Airflow would deactivate
    their DAGs until then. Needs Airflow's metadata database; without it, says what that costs.
    """
    later = (
        "Airflow finds them at its next listing of the folder ([dag_processor] refresh_interval), and the tables "
        "that moved there may lose their DAGs until then"
    )
    try:
        from airflow.dag_processing.bundles.manager import DagBundlesManager

        from airflow_iceberg.fleet.dag_files import ask_for_parses

        here = folder.resolve()
        bundle = next(
            (b for b in DagBundlesManager().get_all_dag_bundles() if here.is_relative_to(Path(b.path).resolve())),
            None,
        )
        if bundle is None:
            return f"{folder} is in none of Airflow's DAG bundles here: {later}"
        files = [str(path.resolve().relative_to(Path(bundle.path).resolve())) for path in paths]
        ask_for_parses(bundle.name, files)
    except Exception as error:  # no metadata database from here: the files are written all the same
        said = str(error).splitlines()[0] if str(error) else ""
        names = ", ".join(path.name for path in paths)
        return f"could not ask Airflow to parse {names} now ({type(error).__name__}: {said}): {later}"
    return f"asked Airflow's dag-processor to parse {', '.join(files)} of DAG bundle {bundle.name!r} now"


def _report(args: argparse.Namespace, out: TextIO) -> int:
    from datetime import datetime, timezone

    from airflow_iceberg.surface.report import render_text, summarize, write_html
    from airflow_iceberg.table_list.loader import load_table_list

    table_list = load_table_list()
    for error in table_list.errors:
        print(f"skipped: {error}", file=sys.stderr)
    tables = table_list.tables
    if args.table:
        known = {str(t.table) for t in tables}
        unknown = [name for name in args.table if name not in known]
        if unknown:
            print(f"not in the table list: {', '.join(unknown)}", file=sys.stderr)
            return 2
        tables = [t for t in tables if str(t.table) in args.table]
    summaries = summarize(tables)
    print(render_text(summaries), end="", file=out)
    if args.html:
        index = write_html(summaries, args.html, datetime.now(timezone.utc))
        print(f"wrote {index}", file=out)
    return 0


def _reason(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("give a reason: it is recorded in the audit trail")
    return text


def _gate_conn_id_argument(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--conn-id",
        default=WriteGateHook.default_conn_name,
        help="the iceberg_write_gate connection whose database holds the gates (default: %(default)s)",
    )


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(prog="airflow-iceberg", description=__doc__.splitlines()[0])
    commands = main_parser.add_subparsers(dest="command", required=True)
    migrate = commands.add_parser("migrate", help="create or upgrade the write gate's tables")
    _gate_conn_id_argument(migrate)
    migrate.set_defaults(run=_migrate)
    force_open = commands.add_parser("force-open", help="open a table's write gate whoever holds it, audited")
    force_open.add_argument("table", help="catalog.namespace.table")
    force_open.add_argument("--reason", required=True, type=_reason, help="why, for the audit trail")
    _gate_conn_id_argument(force_open)
    force_open.set_defaults(run=_force_open)
    dags = commands.add_parser("dags", help="put the provider's DAG files into a DAG folder")
    dags.add_argument("folder", type=Path, help="Airflow's DAG folder ([core] dags_folder)")
    dags.set_defaults(run=_dags)
    report = commands.add_parser("report", help="each table's gate, health now and compaction history")
    report.add_argument("--table", action="append", metavar="TABLE", help="only this table (repeat for more)")
    report.add_argument("--html", type=Path, metavar="DIR", help="also write DIR/index.html with PNG charts")
    report.set_defaults(run=_report)
    return main_parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # What a command prints is its result, for people and pipes alike. Airflow's and pyiceberg's own log lines go
    # to standard output too, through handles taken when Airflow was imported, so they are moved at the file
    # descriptor: everything written to descriptor 1 now goes to standard error, the result to the original.
    sys.stdout.flush()
    try:
        stdout = sys.stdout.fileno()
    except (AttributeError, io.UnsupportedOperation):  # standard output is no file (captured in-process)
        return args.run(args, sys.stdout)
    out = os.fdopen(os.dup(stdout), "w")
    os.dup2(sys.stderr.fileno(), stdout)
    try:
        return args.run(args, out)
    finally:
        sys.stdout.flush()
        out.flush()
        os.dup2(out.fileno(), stdout)
        out.close()


if __name__ == "__main__":
    sys.exit(main())
