"""Fixtures every test may use."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A short identifier unique to this test and run, usable as an Iceberg namespace or table name."""
    stem = "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:30].strip("_")
    return f"{stem}_{uuid.uuid4().hex[:6]}"
