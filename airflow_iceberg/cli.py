"""``airflow-iceberg``: commands for the people who run the provider, beside Airflow's own CLI.

``airflow-iceberg migrate`` creates or upgrades the write gate's tables in the database of an
``iceberg_write_gate`` connection. It is the explicit schema step: run it once when installing or upgrading
the provider (``make setup`` does, for the embedded default); tasks never change the schema.

``airflow-iceberg force-open TABLE --reason TEXT`` opens a table's gate whoever holds it, for a run that died
with its gate closed: writers resume at once instead of when the lease ends. The audit trail records the run
that held the gate, its lease, and the reason.
"""

from __future__ import annotations

import argparse
import sys

from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.hooks.write_gate_schema import gate_schema


def _migrate(args: argparse.Namespace) -> int:
    before, after = WriteGateHook(args.conn_id).migrate()
    schema = gate_schema()
    applied = [f"{v.number} ({v.summary})" for v in schema.versions if before < v.number <= after]
    where = f"write gate schema of connection {args.conn_id!r}"
    if applied:
        print(f"{where}: version {before} -> {after}; applied {', '.join(applied)}")
    else:
        print(f"{where}: at version {after}, the newest; nothing to do")
    return 0


def _force_open(args: argparse.Namespace) -> int:
    opened = WriteGateHook(args.conn_id).force_open(args.table, args.reason)
    print(f"write gate of {args.table}: {'forced open' if opened else 'was already open'} ({args.reason})")
    return 0


def _reason(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("give a reason: it is recorded in the audit trail")
    return text


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(prog="airflow-iceberg", description=__doc__.splitlines()[0])
    commands = main_parser.add_subparsers(dest="command", required=True)
    migrate = commands.add_parser("migrate", help="create or upgrade the write gate's tables")
    migrate.add_argument(
        "--conn-id",
        default=WriteGateHook.default_conn_name,
        help="the iceberg_write_gate connection whose database holds the gates (default: %(default)s)",
    )
    migrate.set_defaults(run=_migrate)
    force_open = commands.add_parser("force-open", help="open a table's write gate whoever holds it, audited")
    force_open.add_argument("table", help="catalog.namespace.table")
    force_open.add_argument("--reason", required=True, type=_reason, help="why, for the audit trail")
    force_open.add_argument(
        "--conn-id",
        default=WriteGateHook.default_conn_name,
        help="the iceberg_write_gate connection whose database holds the gate (default: %(default)s)",
    )
    force_open.set_defaults(run=_force_open)
    return main_parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
