"""The docs show the gate's schema, the writer's statements and the table list's settings as their sources define
them, never a stale copy."""

from __future__ import annotations

from airflow_iceberg.table_list.schema import HealthConfig, TableConfig
from devkit import docs


def test_every_generated_block_in_the_docs_matches_its_source():
    assert docs.stale() == [], "the docs differ from their sources: run `make docs`"


def flink_sql_scripts() -> set[str]:
    return {script.name for script in docs.FLINK_SQL_SCRIPTS.glob("*.sql")}


def test_the_protocol_doc_shows_the_schema_and_every_protocol_statement():
    text = (docs.DOCS / "write-gate-protocol.md").read_text()
    for name, source in docs.sources().items():
        if source.fence == "sql" and name not in flink_sql_scripts():
            assert f"<!-- generated: {name} -->\n```sql\n{source.text}```" in text, name


def test_the_writers_doc_shows_each_flink_sql_script_of_the_tests():
    text = (docs.DOCS / "writers.md").read_text()
    assert "gated_kafka_cdc.sql" in flink_sql_scripts()
    for name in flink_sql_scripts():
        source = docs.FLINK_SQL_SCRIPTS / name
        assert f"<!-- generated: {name} -->\n```sql\n{source.read_text()}```" in text, name


def test_a_changed_source_makes_its_block_stale(monkeypatch):
    text = (docs.DOCS / "write-gate-protocol.md").read_text()
    monkeypatch.setattr(docs.gate_protocol, "WRITER_ACK_SQL", "UPDATE somewhere_else SET x = 1")
    rendered = docs.render(text)
    assert rendered != text and "UPDATE somewhere_else SET x = 1" in rendered


def test_the_configuration_doc_lists_every_setting_of_an_entry_and_of_health():
    text = (docs.DOCS / "configuration.md").read_text()
    name = docs.SETTINGS_BLOCK
    block = text.split(f"<!-- generated: {name} -->\n")[1].split(f"<!-- end: {name} -->")[0]
    assert block == docs.sources()[name].block()
    for model in (TableConfig, HealthConfig):
        section = block.split(f"`{model.__name__}` {{#")[1].split("\n### ")[0]
        for name in model.model_fields:
            assert f"\n| `{name}` |" in section, f"{model.__name__}.{name}"


def test_a_changed_setting_description_makes_the_settings_block_stale(monkeypatch):
    text = (docs.DOCS / "configuration.md").read_text()
    monkeypatch.setattr(HealthConfig.model_fields["min_small_files"], "description", "Something else now")
    rendered = docs.render(text)
    assert rendered != text and "| Something else now |" in rendered


def test_the_protocol_doc_says_what_a_run_waiting_for_the_gate_writes_to_the_audit_trail():
    """As ``tests/integration/operators/test_write_gate.py`` asserts on the real trail: a run that waits for a held
    gate writes nothing until it closes it; one that gives up writes one ``close_refused``."""
    text = (docs.DOCS / "write-gate-protocol.md").read_text()
    close_rule = " ".join(text.split("- **Close** (`CloseWriteGateOperator`)")[1].split("\n- **Open**")[0].split())
    assert "while it waits, the task only reads the gate and writes no audit row" in close_rule
    assert "two runs that take turns leave `close`, `open`, `close`, `open`" in close_rule
    assert "when the wait is over (or a run that found the gate free lost the race for it), one `close_refused`" in (
        close_rule
    )
