"""Gate connections share pymysql's default TLS context instead of each building one (``mysql_connect``)."""

from __future__ import annotations

import ssl

from airflow_iceberg.core.gate_protocol import mysql_connect, owner_connection

SETTINGS = {"host": "127.0.0.1", "port": 3306, "user": "gate", "password": "secret", "database": "gate"}


def test_connections_without_tls_settings_share_one_context_with_pymysqls_preferred_mode() -> None:
    first = owner_connection(**SETTINGS, defer_connect=True)
    second = mysql_connect(**SETTINGS, defer_connect=True)
    assert first.ctx is second.ctx
    # pymysql's preferred mode, unchanged: TLS tried without checking the certificate, plain text if refused.
    assert first.ssl and not first._ssl_required
    assert first.ctx.verify_mode == ssl.CERT_NONE and not first.ctx.check_hostname


def test_a_connection_with_tls_settings_gets_its_own_context_that_checks_the_server() -> None:
    shared = mysql_connect(**SETTINGS, defer_connect=True)
    checked = mysql_connect(**SETTINGS, ssl_verify_cert=True, defer_connect=True)
    assert checked.ctx is not shared.ctx
    assert checked._ssl_required and checked.ctx.verify_mode == ssl.CERT_REQUIRED
