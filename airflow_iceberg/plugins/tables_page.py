"""The "Iceberg tables" page of the Airflow UI: every table by need, each table's gate, health and history, and an
audited force-open of a stuck gate.

An Airflow 3 plugin in two parts. A React app (``react_apps``), in the UI's Browse menu at ``/plugin/iceberg-tables``:
the UI imports its one script, built by npm from ``ui/`` into :data:`BUNDLE`, and renders it with the UI's own
React, router and Chakra theme. And a FastAPI app on the api-server under :data:`URL_PREFIX`, which serves that
script and the page's JSON. Every request for data must carry the UI's session (or a bearer token from
``/auth/token``), else it gets 401. A user sees the tables whose compaction DAG they may read. "Force open" is
offered to, and accepted from, only the users who may edit that DAG; it goes through ``WriteGateHook.force_open``,
so the audit trail records the reason, the user, and the run that held the gate.

Force-open is safe against cross-site requests. A browser sends the UI's session cookie with a form that a page of
another origin submits, and with one from another port of the same host, so the session alone proves nothing. A
request the cookie authenticates must carry the page's form token, signed with the api-server's ``[api]
secret_key`` for that user and valid for :data:`FORM_MAX_AGE`. Its ``Origin`` (or ``Referer``), when the browser
sends one, must be this api-server. A request with a bearer token in its ``Authorization`` header needs neither: a
page of another origin cannot make a browser send one.

The list reads no table's metadata: it joins the gate rows, the health watch's last checks and the last run
records, four queries per gate connection (:mod:`.tables_view` holds its rules). A table's own page reads its
health from its metadata (pyiceberg, no Spark), as ``airflow-iceberg report`` does.

Task processes load plugins too (for their macros). The FastAPI app is built only where FastAPI is loaded
already, which is the api-server, so a task does not pay for importing it.
"""

# No `from __future__ import annotations` here: FastAPI reads the routes' annotations (GetUserDep, Request), which
# are imported inside build_app so that only the api-server imports FastAPI; they must be evaluated where defined.
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk import conf

#: Where the app is mounted on the api-server.
URL_PREFIX = "/iceberg"
#: The page's route in the Airflow UI (``/plugin/<route>``).
UI_ROUTE = "iceberg-tables"
#: The page's front end, built by ``npm run build`` in ``ui/`` (``make setup``) into the package.
BUNDLE = Path(__file__).parent / "static" / "iceberg-tables.js"
#: Seconds a force-open form stays valid after the page rendered it.
FORM_MAX_AGE = 3600
#: The summary bar counts the runs that failed in this window.
FAILED_WINDOW_SECONDS = 24 * 3600


def _base_path() -> str:
    """The path of Airflow's ``[api] base_url``, where the api-server serves everything, this app included."""
    return urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


def _may(user: Any, method: Literal["GET", "PUT"], dag_id: str) -> bool:
    """Whether ``user`` may ``method`` (GET: read, PUT: edit) the DAG ``dag_id``, as Airflow's auth manager says."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
    from airflow.models.dag import DagModel

    details = DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id))
    return get_auth_manager().is_authorized_dag(method=method, details=details, user=user)


def _readable_dag_ids(user: Any) -> set[str]:
    """The DAGs ``user`` may read, in one question to Airflow's auth manager, as Airflow's own DAG list asks."""
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager().get_authorized_dag_ids(user=user, method="GET")


def _origin(url: str) -> str:
    """The origin (``scheme://host:port``, lower case) of ``url``; ``"null"`` for an opaque one."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme and parts.netloc else "null"


def _form_signer() -> Any:
    """Signs and checks the force-open form's token: the user, with the api-server's secret key and a time."""
    from itsdangerous import URLSafeTimedSerializer

    key = conf.get("api", "secret_key", fallback="")
    if not key:  # with no key, anyone could sign a token
        raise RuntimeError("[api] secret_key is empty: set it (the same on every api-server) to use force-open")
    return URLSafeTimedSerializer(key, salt="airflow_iceberg.force_open")


def build_app() -> Any:
    """The plugin's FastAPI app: the page's JSON API, its force-open, and its front end's bundle."""
    from airflow.api_fastapi.core_api.security import GetUserDep
    from fastapi import FastAPI, Form, HTTPException, Request
    from fastapi.responses import FileResponse, RedirectResponse
    from itsdangerous import BadSignature, SignatureExpired

    from airflow_iceberg.exceptions import TablesQueryError
    from airflow_iceberg.hooks.write_gate import WriteGateHook
    from airflow_iceberg.plugins import tables_view
    from airflow_iceberg.plugins.tables_view import iso
    from airflow_iceberg.surface import report
    from airflow_iceberg.surface.dag_factory import compaction_dag_id
    from airflow_iceberg.table_list.loader import load_table_list
    from airflow_iceberg.table_list.schema import TableConfig

    app = FastAPI(title="Iceberg tables", docs_url=None, redoc_url=None, openapi_url=None)

    def run_url(dag_id: str, run_id: str) -> str:
        return f"{_base_path()}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"

    def readable(user: Any) -> list[TableConfig]:
        """The tables of the table list whose compaction DAG ``user`` may read, as Airflow's own lists ask."""
        dag_ids = _readable_dag_ids(user)
        return [t for t in load_table_list().tables if compaction_dag_id(t.table) in dag_ids]

    def one_table(user: Any, table: str) -> TableConfig:
        config = next((t for t in load_table_list().tables if str(t.table) == table), None)
        if config is None or not _may(user, "GET", compaction_dag_id(config.table)):
            # unknown, or not this user's to read: the same answer for both
            raise HTTPException(status_code=404, detail=f"no table {table[:200]!r} in the table list that you may read")
        return config

    def refuse_cross_site(request: Request, user: Any, form_token: str) -> None:
        """403 unless the request came from this api-server's own page, as :mod:`the module <.tables_page>` says."""
        if request.headers.get("authorization", "").lower().startswith("bearer "):
            return  # a page of another origin cannot make a browser send this header
        sent = request.headers.get("origin") or request.headers.get("referer")
        ours = {_origin(str(request.base_url)), _origin(conf.get("api", "base_url", fallback="") or "")} - {"null"}
        if sent is not None and _origin(sent) not in ours:
            raise HTTPException(
                status_code=403,
                detail=f"refused a cross-site request: it came from a page of {_origin(sent)!r}, not of this "
                "Airflow. Force a gate open from the Iceberg tables page of this Airflow, or with "
                "`airflow-iceberg force-open`.",
            )
        try:
            signed_for = _form_signer().loads(form_token, max_age=FORM_MAX_AGE)
        except SignatureExpired:
            raise HTTPException(
                status_code=403,
                detail=f"the form is older than {FORM_MAX_AGE} s: reload the table's page and force open again",
            ) from None
        except BadSignature:
            signed_for = None
        if signed_for != str(user.get_id()):
            raise HTTPException(
                status_code=403,
                detail="refused a request without this Airflow's force-open form token (a cross-site request, or "
                "a form of another user): force a gate open from the Iceberg tables page of this Airflow.",
            )

    @app.get("/")
    def home() -> RedirectResponse:
        """The page lives in the Airflow UI; this app serves its data."""
        return RedirectResponse(f"{_base_path()}/plugin/{UI_ROUTE}", status_code=307)

    @app.get("/static/iceberg-tables.js")
    def bundle() -> FileResponse:
        """The page's front end (no secret in it: served as the UI's own assets are, to anyone)."""
        if not BUNDLE.is_file():
            raise HTTPException(
                status_code=404,
                detail=f"the page's front end {BUNDLE} is missing: build it with `npm ci && npm run build` in ui/ "
                "(`make setup` does), then build the wheel",
            )
        return FileResponse(BUNDLE, media_type="text/javascript")

    @app.get("/api/tables")
    def tables(
        user: GetUserDep,
        q: str = "",
        gate: str = "",
        need: str = "",
        outcome: str = "",
        sort: str = "need",
        page: int = 1,
        page_size: int = 50,
    ) -> dict[str, Any]:
        """The list: a summary of every table the user may read, and one page of those the query keeps."""
        try:
            query = tables_view.TablesQuery(q, gate, need, outcome, sort, page, page_size)
        except TablesQueryError as error:
            raise HTTPException(status_code=400, detail=str(error)) from None
        by_conn: dict[str, list[TableConfig]] = {}
        for config in readable(user):
            by_conn.setdefault(config.write_gate_conn_id, []).append(config)
        rows = []
        for conn_id, configs in by_conn.items():  # four queries per gate connection, however many tables
            hook = WriteGateHook(conn_id)
            gates, checks = hook.gate_states(), hook.records.health_checks()
            last_runs = hook.records.last_runs([c.table for c in configs])
            failed = hook.records.failed_runs(FAILED_WINDOW_SECONDS)
            for config in configs:
                name = str(config.table)
                rows.append(
                    tables_view.row(
                        name,
                        compaction_dag_id(config.table),
                        gates.get(name),
                        checks.get(name),
                        last_runs.get(name),
                        failed.get(name, 0),
                        run_url,
                    )
                )
        return tables_view.page(rows, query)

    @app.get("/api/tables/{table}")
    def table(table: str, user: GetUserDep, days: float = 30) -> dict[str, Any]:
        """One table: its gate and writers, its health now (read from its metadata), its last check, the runs
        that began in the last ``days`` (0: all), and the newest 20 rows of its audit trail."""
        config = one_table(user, table)
        [summary] = report.summarize([config])
        gate, health = summary.gate, summary.health
        owner = tables_view.owner_of(gate, run_url)
        may_force_open = owner is not None and _may(user, "PUT", compaction_dag_id(config.table))
        since = None if days <= 0 or gate is None else gate.database_now.timestamp() - days * 86400
        runs = [r for r in summary.runs if since is None or r["started_at"].timestamp() >= since]
        audit = WriteGateHook(config.write_gate_conn_id).audit_trail(config.table)[-20:][::-1]
        check = summary.check
        writers = gate.writers if gate is not None else ()
        return {
            "table": summary.table,
            "dag_id": compaction_dag_id(config.table),
            "gate": {
                "state": "open" if owner is None else "closed",
                "line": report.gate_line(gate) if gate is not None else "-",
                "owner": owner,
                "writers": [tables_view.writer(gate, w) for w in writers] if gate is not None else [],
            },
            "health": None if health is None else asdict(health),
            "check": None
            if check is None
            else {
                **{k: check[k] for k in ("decision", "reason", "reading", "score")},
                "checked_at": iso(check["checked_at"]),
                "started_at": iso(check["started_at"]),
            },
            "errors": list(summary.errors),
            "runs": [
                {
                    **{k: r[k] for k in _RUN_FIELDS},
                    "started_at": iso(r["started_at"]),
                    "finished_at": iso(r["finished_at"]),
                    "url": run_url(r["dag_id"], r["run_id"]),
                }
                for r in runs
            ],
            "audit": [{**a, "at": iso(a["at"])} for a in audit],
            "may_force_open": may_force_open,
            "form_token": _form_signer().dumps(str(user.get_id())) if may_force_open else None,
        }

    @app.post("/api/tables/{table}/force-open")
    def force_open(
        request: Request, table: str, user: GetUserDep, reason: str = Form(""), form_token: str = Form("")
    ) -> dict[str, Any]:
        """Open a gate that a run holds, recording the reason and the user in the audit trail."""
        config = one_table(user, table)
        refuse_cross_site(request, user, form_token)
        if not _may(user, "PUT", compaction_dag_id(config.table)):
            raise HTTPException(
                status_code=403, detail=f"forcing open the gate of {table} needs the right to edit its compaction DAG"
            )
        if not reason.strip():
            raise HTTPException(status_code=400, detail="give a reason: it is recorded in the audit trail")
        opened = WriteGateHook(config.write_gate_conn_id).force_open(
            config.table, f"{reason.strip()} (by {user.get_name()}, in the Airflow UI)"
        )
        return {"table": table, "opened": opened}

    return app


#: What the page shows of each run record.
_RUN_FIELDS = (
    "dag_id", "run_id", "decision", "outcome", "reason", "data_files_before", "data_files_after",
    "delete_files_before", "delete_files_after", "bytes_before", "bytes_after", "gate_closed_seconds",
    "rewrite_seconds", "detail", "writers",
)  # fmt: skip


class IcebergTablesPlugin(AirflowPlugin):
    """The "Iceberg tables" page: a React app in the UI's Browse menu, and the FastAPI app that serves it."""

    name = "iceberg_tables"
    # Only where FastAPI is loaded already (the api-server): task processes load plugins too.
    fastapi_apps = (
        [{"app": build_app(), "url_prefix": URL_PREFIX, "name": "Iceberg tables"}] if "fastapi" in sys.modules else []
    )
    react_apps = [
        {
            "name": "Iceberg tables",
            # Relative to the UI's <base href>, so that it follows [api] base_url.
            "bundle_url": f"{URL_PREFIX.lstrip('/')}/static/iceberg-tables.js",
            "destination": "nav",
            "category": "browse",
            "url_route": UI_ROUTE,
        }
    ]
