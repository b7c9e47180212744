"""The gate has one home: the statements that change a gate live in ``core/gate_store.py``, and nothing else in the
shipped code runs them or writes its own.

The store against the real MySQL is exercised through every caller: ``tests/integration/hooks/test_write_gate.py``
(the hook), ``tests/integration/core/test_gate_holder.py`` (a batch job), ``tests/integration/operators`` and
``hooks/test_spark_slots.py`` (the close task, in its worker and its trigger).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from airflow_iceberg.core import gate_protocol, gate_store

ROOT = Path(__file__).resolve().parents[3]
#: The code that ships: the provider and what runs in Spark.
SHIPPED = [*(ROOT / "airflow_iceberg").rglob("*.py"), *(ROOT / "spark_jobs").rglob("*.py")]
STORE = ROOT / "airflow_iceberg" / "core" / "gate_store.py"

#: The owner's statements: each changes a gate or its audit trail, or renews a lease.
OWNER_STATEMENTS = {"GATE_ENSURE_ROW_SQL", "OWNER_CLOSE_SQL", "OWNER_OPEN_SQL", "OWNER_RENEW_SQL", "AUDIT_INSERT_SQL"}
#: A statement that changes the gate row or the audit trail, as its text or its f-string template reads.
_CHANGES_A_GATE = re.compile(
    r"\b(UPDATE|INSERT INTO|DELETE FROM|REPLACE INTO)\s+(\{GATE_TABLE\}|\{AUDIT_TABLE\}|iceberg_write_gate(_audit)?\b)"
)


def string_parts(tree: ast.AST) -> list[str]:
    """Every string literal of a module, f-strings' literal parts joined around ``{NAME}`` for their fields."""
    parts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts.append(
                "".join(
                    value.value if isinstance(value, ast.Constant) else "{" + ast.unparse(value.value) + "}"
                    for value in node.values
                    if isinstance(value, ast.Constant | ast.FormattedValue)
                )
            )
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts.append(node.value)
    return parts


def names_used(tree: ast.AST) -> set[str]:
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    used |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    return used | {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}


def gate_changes(path: Path) -> tuple[list[str], set[str]]:
    """The statements in ``path`` that change a gate, and the store's owner statements it names."""
    tree = ast.parse(path.read_text())
    return [s for s in string_parts(tree) if _CHANGES_A_GATE.search(s)], names_used(tree) & OWNER_STATEMENTS


def test_every_statement_that_changes_a_gate_is_the_stores():
    assert set(gate_changes(STORE)[1]) == OWNER_STATEMENTS
    elsewhere = {str(p.relative_to(ROOT)): gate_changes(p) for p in SHIPPED if p != STORE}
    assert {path: found for path, found in elsewhere.items() if found[0] or found[1]} == {}


def test_a_module_that_wrote_its_own_close_would_be_caught(tmp_path):
    own = tmp_path / "own_close.py"
    own.write_text("SQL = f\"UPDATE {GATE_TABLE} SET state = 'closed'\"\nfrom x import OWNER_OPEN_SQL\n")
    assert gate_changes(own) == (["UPDATE {GATE_TABLE} SET state = 'closed'"], {"OWNER_OPEN_SQL"})
    plain = tmp_path / "plain.py"
    plain.write_text('SQL = "insert into x"\nQ = "DELETE FROM iceberg_write_gate_audit WHERE 1"\n')
    assert gate_changes(plain)[0] == ["DELETE FROM iceberg_write_gate_audit WHERE 1"]


def test_the_writers_statements_never_change_the_gate_row():
    writer_statements = {n: v for n, v in vars(gate_protocol).items() if n.endswith("_SQL")}
    assert writer_statements and not [n for n, v in writer_statements.items() if _CHANGES_A_GATE.search(v)]


@pytest.mark.parametrize("name", sorted(OWNER_STATEMENTS))
def test_each_owner_statement_is_defined_in_the_store_only(name):
    assert hasattr(gate_store, name) and not hasattr(gate_protocol, name)
