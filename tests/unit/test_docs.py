"""The docs show the gate's schema and the writer's statements as their sources define them, never a stale copy."""

from __future__ import annotations

from devkit import docs


def test_every_generated_block_in_the_docs_matches_its_source():
    assert docs.stale() == [], "the docs differ from their sources: run `make docs`"


def test_the_protocol_doc_shows_the_schema_and_every_protocol_statement():
    text = (docs.DOCS / "write-gate-protocol.md").read_text()
    for name, source in docs.sources().items():
        assert f"<!-- generated: {name} -->\n```sql\n{source}```" in text, name


def test_a_changed_source_makes_its_block_stale(monkeypatch):
    text = (docs.DOCS / "write-gate-protocol.md").read_text()
    monkeypatch.setattr(docs.write_gate, "WRITER_ACK_SQL", "UPDATE somewhere_else SET x = 1")
    rendered = docs.render(text)
    assert rendered != text and "UPDATE somewhere_else SET x = 1" in rendered
