"""A table's predicate templates: told from plain text (``may_hold_template``, ``holds_template``), and rendered
for a run (``render_predicate``, with the operator's Jinja environment) and for the health watch (``render_at``),
each as of the same time (``time_context``).

A run the health watch starts is asset-triggered and has no logical date: its predicates render as of when it was
started, and the watch, which plans the table before there is a run, renders them as of now in the same way.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import jinja2
import pendulum

from airflow_iceberg.exceptions import RunParamsError

#: Jinja's markers: text without one is never a template.
_MARKERS = re.compile(r"\{\{|\{%|\{#")


def may_hold_template(text: str) -> bool:
    """Whether ``text`` has one of Jinja's markers: the cheap look, for each table at every parse of the list."""
    return _MARKERS.search(text) is not None


def holds_template(text: str) -> bool:
    """Whether Jinja would render ``text`` to something else: ``'{{ ds }}'`` would, ``'a {{ b'`` would not."""
    if not may_hold_template(text):
        return False
    from jinja2.sandbox import SandboxedEnvironment

    try:  # sandboxed, with no context: nothing of the run's can be read here
        return SandboxedEnvironment().from_string(text).render() != text
    except jinja2.TemplateSyntaxError:
        return False  # Jinja could not take it as a template either: it is data
    except jinja2.TemplateError:
        return True  # a template that names what is not here ({{ conn.lake.password }})


def time_context(when: datetime) -> dict[str, Any]:
    """The names a predicate template may use for the run's date, as of ``when``, and Airflow's ``macros``.

    A run the health watch starts is asset-triggered and has no logical date: its predicates render as of when it
    was started (its ``run_after``), so ``{{ ds }}`` is that day. The watch renders them the same way.
    """
    from airflow.sdk.execution_time import macros

    when = pendulum.instance(when).in_timezone("UTC")
    return {
        "logical_date": when,
        "ds": when.to_date_string(),
        "ds_nodash": when.strftime("%Y%m%d"),
        "ts": when.isoformat(),
        "ts_nodash": when.strftime("%Y%m%dT%H%M%S"),
        "macros": macros,
    }


def started_by_health_watch(context: Any) -> bool:
    """Whether the run was started by an asset event, as the health watch starts them."""
    run = context.get("dag_run")
    return getattr(run, "run_type", None) == "asset_triggered"


def render_predicate(operator: Any, template: str | None, context: Any, what: str) -> str | None:
    """``template`` rendered for this run, or :class:`RunParamsError` with a sentence that says why not.

    A predicate that uses the run's logical date (``ds``, ``logical_date``, ``macros.ds_add(ds, -2)``, ...) cannot
    be rendered for a run without one (triggered with ``logical_date: null``); the error says so and how to
    run anyway.
    """
    if not template:
        return None
    if context.get("logical_date") is None and started_by_health_watch(context):
        context = {**context, **time_context(context["dag_run"].run_after)}
    # Strict whatever the DAG says: an undefined name must fail here, not become '' inside a predicate.
    strict = operator.get_template_env().overlay(undefined=jinja2.StrictUndefined)
    try:
        return operator.render_template(template, context, jinja_env=strict)
    except jinja2.UndefinedError as error:
        if context.get("logical_date") is None:
            raise RunParamsError(
                f"{what} {template!r} uses the run's logical date ({error}), but this run has none: it was "
                "triggered without a logical date. Give the run its own 'where' in its conf, or trigger it with "
                "a logical date."
            ) from None
        raise RunParamsError(f"{what} {template!r} cannot be rendered for this run: {error}") from None
    except jinja2.TemplateError as error:
        raise RunParamsError(f"{what} {template!r} is not a valid template: {error}") from None


def render_at(template: str | None, when: datetime) -> str | None:
    """A predicate template rendered as a watch-started run renders it: as of ``when``, its time
    (:func:`time_context`), in a sandbox: what the health watch plans a table with."""
    if not template:
        return None
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment(undefined=jinja2.StrictUndefined).from_string(template).render(time_context(when))
