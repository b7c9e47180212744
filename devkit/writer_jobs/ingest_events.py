"""The deterministic event stream of the reference ingest job, and the table state it must produce.

Event ``value`` (0, 1, 2, ... from Spark's ``rate`` source) is, for key ``value % keys``, a delete when
``value % 7 == 3`` and otherwise an upsert with payload ``v<value>``. Pure Python, so a test can recompute
the expected table without Spark.
"""

from __future__ import annotations

DELETE_EVERY, DELETE_AT = 7, 3


def is_delete(value: int) -> bool:
    return value % DELETE_EVERY == DELETE_AT


def expected_rows(max_value: int, keys: int) -> dict[int, tuple[int, str]]:
    """key -> (value, payload) the table must hold once every event up to ``max_value`` is committed."""
    rows = {}
    for key in range(min(keys, max_value + 1)):
        latest = key + ((max_value - key) // keys) * keys
        if not is_delete(latest):
            rows[key] = (latest, f"v{latest}")
    return rows
