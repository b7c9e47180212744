"""The "Iceberg tables" page of the Airflow UI: each table's gate, health and last compaction, a table's history
as charts, and an audited force-open of a stuck gate.

An Airflow 3 plugin: a FastAPI app mounted on the api-server under :data:`URL_PREFIX`, and a link to it in the
UI's Browse menu, which shows it inside the UI. It is behind Airflow's own authentication: every request must
carry the UI's session (or a bearer token from ``/auth/token``), else it gets 401. A user sees the tables whose
compaction DAG they may read. "Force open" is offered to, and accepted from, only the users who may edit that
DAG; it goes through ``WriteGateHook.force_open``, so the audit trail records the reason, the user, and the run
that held the gate.

Force-open is safe against cross-site requests. A browser sends the UI's session cookie with a form that a page of
another origin submits, and with one from another port of the same host, so the session alone proves nothing. A
request the cookie authenticates must carry the form's token, signed with the api-server's ``[api] secret_key``
for that user and valid for :data:`FORM_MAX_AGE`. Its ``Origin`` (or ``Referer``), when the browser sends one,
must be this api-server. A request with a bearer token in its ``Authorization`` header needs neither: a page of
another origin cannot make a browser send one.

The figures come from where ``airflow-iceberg report`` reads them (``airflow_iceberg.report``): the gate rows, the
run records, and the tables' health from Iceberg metadata (pyiceberg, no Spark). The charts are drawn by
matplotlib, as in the report's static page.

Task processes load plugins too (for their macros). The FastAPI app is built only where FastAPI is loaded
already, which is the api-server, so a task does not pay for importing it.
"""

# No `from __future__ import annotations` here: FastAPI reads the routes' annotations (GetUserDep, Request), which
# are imported inside build_app so that only the api-server imports FastAPI; they must be evaluated where defined.
import sys
from typing import Any
from urllib.parse import quote, urlsplit

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk import conf

#: Where the app is mounted on the api-server.
URL_PREFIX = "/iceberg"
#: Tables on one page of the list.
PAGE_SIZE = 50
#: Seconds a force-open form stays valid after the page rendered it.
FORM_MAX_AGE = 3600

_LIST = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Iceberg tables</title>{{ style }}</head><body>
<h1>Iceberg tables</h1>
<form method="get" action="{{ list_url }}"><input name="q" value="{{ q }}" placeholder="filter tables">
<button>Filter</button></form>
<p>{{ shown }} of {{ total }} tables{% if pages > 1 %}, page {{ page }} of {{ pages }}
{% if page > 1 %}<a href="{{ list_url }}?q={{ q|urlencode }}&page={{ page - 1 }}">previous</a>{% endif %}
{% if page < pages %}<a href="{{ list_url }}?q={{ q|urlencode }}&page={{ page + 1 }}">next</a>{% endif %}{% endif %}</p>
<table id="tables"><tr><th>table</th><th>gate</th><th>health</th><th>last check</th><th>last compaction</th></tr>
{% for row in rows %}<tr data-table="{{ row.table }}" data-gate="{{ row.gate_state }}">
<td><a href="{{ row.url }}">{{ row.table }}</a></td><td>{{ row.gate }}</td><td>{{ row.health }}</td>
<td class="check">{{ row.check }}</td><td>{{ row.last }}</td></tr>
{% endfor %}</table></body></html>
"""

_TABLE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ table }}</title>{{ style }}</head><body>
<p><a href="{{ list_url }}">Iceberg tables</a></p>
<h1>{{ table }}</h1>
<h2>Gate</h2>
<p id="gate" data-gate="{{ gate_state }}">{{ gate }}</p>
{% if writers %}<table id="writers"><tr><th>writer</th><th>last seen</th><th>acknowledged</th><th>its snapshot</th></tr>
{% for w in writers %}<tr><td>{{ w.writer_id }}</td><td>{{ w.seen_at or "-" }}</td><td>{{ w.ack_at or "-" }}</td>
<td>{{ w.ack_snapshot_id or "-" }}</td></tr>{% endfor %}</table>{% endif %}
{% if may_force_open %}<form id="force-open" method="post" action="{{ force_open_url }}">
<input type="hidden" name="form_token" value="{{ form_token }}">
<label>Reason <input name="reason" required size="60" placeholder="why writers must resume now"></label>
<button type="submit">Force open</button></form>{% endif %}
<h2>Health</h2><p id="health">{{ health }}</p>
<p id="check">Last check by the health watch: {{ check }}</p>
{% for error in errors %}<p class="error">{{ error }}</p>{% endfor %}
<h2>History</h2>
{% for url in charts %}<img src="{{ url }}" alt="{{ url }}">{% endfor %}
<table id="runs"><tr><th>started</th><th>run</th><th>decision</th><th>outcome</th><th>data files</th>
<th>delete files</th><th>paused s</th><th>reason</th></tr>
{% for r in runs %}<tr data-run-id="{{ r.run_id }}" data-outcome="{{ r.outcome }}"><td>{{ r.started }}</td>
<td><a href="{{ r.url }}">{{ r.run_id }}</a></td><td>{{ r.decision }}</td><td>{{ r.outcome }}</td>
<td>{{ r.data_files }}</td><td>{{ r.delete_files }}</td><td>{{ r.paused }}</td><td>{{ r.reason }}</td></tr>
{% endfor %}</table>
<h2>Audit trail</h2>
<table id="audit"><tr><th>at</th><th>action</th><th>run</th><th>detail</th></tr>
{% for a in audit %}<tr data-action="{{ a.action }}"><td>{{ a.at }}</td><td>{{ a.action }}</td>
<td>{{ a.owner_run_id or "-" }}</td><td>{{ a.detail or "" }}</td></tr>{% endfor %}</table>
</body></html>
"""

_STYLE = (
    "<style>body{font-family:sans-serif;margin:1.5em} table{border-collapse:collapse;margin:1em 0}"
    " td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top} img{display:block;margin:1em 0}"
    " .error{color:#a00}</style>"
)


def _base_path() -> str:
    """The path of Airflow's ``[api] base_url``, where the api-server serves everything, this app included."""
    return urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


def _before_after(before: Any, after: Any) -> str:
    return f"{'-' if before is None else before} -> {'-' if after is None else after}"


def _may(user: Any, method: str, dag_id: str) -> bool:
    """Whether ``user`` may ``method`` (GET: read, PUT: edit) the DAG ``dag_id``, as Airflow's auth manager says."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
    from airflow.models.dag import DagModel

    details = DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id))
    return get_auth_manager().is_authorized_dag(method=method, details=details, user=user)


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
    """The plugin's FastAPI app."""
    import jinja2
    from airflow.api_fastapi.core_api.security import GetUserDep
    from fastapi import FastAPI, Form, HTTPException, Request
    from fastapi.responses import HTMLResponse, RedirectResponse, Response
    from itsdangerous import BadSignature, SignatureExpired
    from markupsafe import Markup, escape

    from airflow_iceberg import report
    from airflow_iceberg.config import TableConfig, load_table_list
    from airflow_iceberg.dag_factory import compaction_dag_id
    from airflow_iceberg.hooks.write_gate import WriteGateHook

    app = FastAPI(title="Iceberg tables", docs_url=None, redoc_url=None, openapi_url=None)
    templates = jinja2.Environment(autoescape=True)
    list_page, table_page = templates.from_string(_LIST), templates.from_string(_TABLE)

    def run_url(dag_id: str, run_id: str) -> str:
        return f"{_base_path()}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"

    def readable(user: Any, q: str = "") -> list[TableConfig]:
        """The tables whose name holds ``q`` and whose compaction DAG ``user`` may read, in the list's order."""
        named = [t for t in load_table_list().tables if q.lower() in str(t.table).lower()]
        return [t for t in named if _may(user, "GET", compaction_dag_id(t.table))]

    def one_table(user: Any, table: str) -> TableConfig:
        config = next((t for t in readable(user, table) if str(t.table) == table), None)
        if config is None:  # unknown, or not this user's to read: the same answer for both
            raise HTTPException(status_code=404, detail=f"no table {table!r} in the table list that you may read")
        return config

    def holder(summary: report.TableSummary) -> Any:
        """The run that holds the gate, or None when the gate does not pause writers."""
        gate = summary.gate
        return gate.owner if gate is not None and gate.pauses_writers else None

    def gate_html(summary: report.TableSummary) -> Markup:
        """The gate as the report says it, and a link to the run that holds it, if one does."""
        text = escape(report.gate_line(summary.gate) if summary.gate else "-")
        owner = holder(summary)
        if owner is None:
            return text
        return text + Markup(' (<a href="{}">the run that holds it</a>)').format(run_url(owner.dag_id, owner.run_id))

    def refuse_cross_site(request: Request, user: Any, form_token: str) -> None:
        """403 unless the request came from this api-server's own page, as :mod:`the module <.fleet>` says."""
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

    def gate_state(summary: report.TableSummary) -> str:
        return "-" if summary.gate is None else ("closed" if summary.gate.pauses_writers else "open")

    @app.get("/", response_class=HTMLResponse)
    def tables(request: Request, user: GetUserDep, q: str = "", page: int = 1) -> str:
        matching = readable(user, q)
        pages = max(1, -(-len(matching) // PAGE_SIZE))
        page = min(max(page, 1), pages)
        shown = matching[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
        rows = [
            {
                "table": s.table,
                "url": str(request.url_for("table", table=s.table)),
                "gate_state": gate_state(s),
                "gate": gate_html(s),
                "health": report.health_line(s.health) if s.health else "; ".join(s.errors) or "-",
                "check": report.check_line(s.check),
                "last": report.run_line(s.last_compaction) if s.last_compaction else "none recorded",
            }
            for s in report.summarize(shown)
        ]
        return list_page.render(style=Markup(_STYLE), list_url=str(request.url_for("tables")), q=q, rows=rows,
                                shown=len(rows), total=len(matching), page=page, pages=pages)  # fmt: skip

    @app.get("/tables/{table}", response_class=HTMLResponse)
    def table(request: Request, table: str, user: GetUserDep) -> str:
        config = one_table(user, table)
        [summary] = report.summarize([config])
        gate = summary.gate
        audit = WriteGateHook(config.write_gate_conn_id).audit_trail(config.table)[-20:][::-1]
        runs = [
            {
                "run_id": r["run_id"],
                "url": run_url(r["dag_id"], r["run_id"]),
                "started": r["started_at"],
                "decision": r["decision"],
                "outcome": r["outcome"],
                "data_files": _before_after(r["data_files_before"], r["data_files_after"]),
                "delete_files": _before_after(r["delete_files_before"], r["delete_files_after"]),
                "paused": "-" if r["gate_closed_seconds"] is None else f"{r['gate_closed_seconds']:.1f}",
                "reason": r["reason"],
            }
            for r in reversed(summary.runs)
        ]
        owner = holder(summary)
        may_force_open = owner is not None and _may(user, "PUT", compaction_dag_id(config.table))
        return table_page.render(
            style=Markup(_STYLE),
            list_url=str(request.url_for("tables")),
            table=summary.table,
            gate_state=gate_state(summary),
            gate=gate_html(summary),
            writers=gate.writers if gate is not None else (),
            may_force_open=may_force_open,
            force_open_url=str(request.url_for("force_open", table=summary.table)),
            form_token=_form_signer().dumps(str(user.get_id())) if may_force_open else "",
            health=report.health_line(summary.health) if summary.health else "-",
            check=report.check_line(summary.check),
            errors=summary.errors,
            charts=[str(request.url_for("chart", table=summary.table, chart=c)) for c in report.CHARTS],
            runs=runs,
            audit=audit,
        )

    @app.get("/tables/{table}/charts/{chart}.png")
    def chart(table: str, chart: str, user: GetUserDep) -> Response:
        if chart not in report.CHARTS:
            raise HTTPException(status_code=404, detail=f"no chart {chart!r}: the charts are {report.CHARTS}")
        config = one_table(user, table)
        runs = WriteGateHook(config.write_gate_conn_id).run_records(config.table)  # a chart draws the runs alone
        summary = report.TableSummary(str(config.table), gate=None, health=None, runs=runs)
        return Response(report.chart_png(summary, chart), media_type="image/png")

    @app.post("/tables/{table}/force-open")
    def force_open(
        request: Request, table: str, user: GetUserDep, reason: str = Form(""), form_token: str = Form("")
    ) -> RedirectResponse:
        config = one_table(user, table)
        refuse_cross_site(request, user, form_token)
        if not _may(user, "PUT", compaction_dag_id(config.table)):
            raise HTTPException(
                status_code=403, detail=f"forcing open the gate of {table} needs the right to edit its compaction DAG"
            )
        if not reason.strip():
            raise HTTPException(status_code=400, detail="give a reason: it is recorded in the audit trail")
        WriteGateHook(config.write_gate_conn_id).force_open(
            config.table, f"{reason.strip()} (by {user.get_name()}, in the Airflow UI)"
        )
        return RedirectResponse(str(request.url_for("table", table=table)), status_code=303)

    return app


class IcebergFleetPlugin(AirflowPlugin):
    """The "Iceberg tables" page: a FastAPI app on the api-server, linked from the UI's Browse menu."""

    name = "iceberg_tables"
    # Only where FastAPI is loaded already (the api-server): task processes load plugins too.
    fastapi_apps = (
        [{"app": build_app(), "url_prefix": URL_PREFIX, "name": "Iceberg tables"}] if "fastapi" in sys.modules else []
    )
    external_views = [
        {
            "name": "Iceberg tables",
            "href": f"{_base_path()}{URL_PREFIX}/",
            "destination": "nav",
            "category": "browse",
            "url_route": "iceberg-tables",
        }
    ]
