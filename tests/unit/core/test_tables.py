"""Table names are three plain identifiers; streaming tables are created as a streaming writer writes."""

from __future__ import annotations

import pytest

from airflow_iceberg.core.tables import InvalidCallError, TableName, create_streaming_table_statements

EVENTS = TableName("lake", "demo", "events")


def test_table_name_parses_three_identifiers():
    assert TableName.parse("lake.demo.events") == EVENTS
    assert EVENTS.in_catalog == "demo.events"
    assert str(EVENTS) == "lake.demo.events"


@pytest.mark.parametrize(
    "bad",
    ["demo.events", "a.b.c.d", "lake.demo.ev-ents", "lake.demo.1events", "lake..events", "lake.demo.`x`",
     "lake.demo.events; DROP TABLE x", "", None, 42],
)  # fmt: skip
def test_table_name_rejects_anything_but_three_plain_identifiers_and_names_the_value(bad):
    with pytest.raises(InvalidCallError) as error:
        TableName.parse(bad)
    assert repr(bad) in str(error.value)


def test_streaming_table_is_created_v2_merge_on_read_in_its_namespace():
    namespace, table = create_streaming_table_statements(EVENTS, "id BIGINT, ts TIMESTAMP", "days(ts)")
    assert namespace == "CREATE NAMESPACE IF NOT EXISTS `lake`.`demo`"
    assert table.startswith(
        "CREATE TABLE IF NOT EXISTS `lake`.`demo`.`events` (id BIGINT, ts TIMESTAMP) USING iceberg "
        "PARTITIONED BY (days(ts)) TBLPROPERTIES ('format-version' = '2', 'write.delete.mode' = 'merge-on-read'"
    )
    assert "'write.distribution-mode' = 'none'" in table


def test_a_streaming_table_of_format_v3_gets_deletion_vectors_and_no_other_format_is_taken():
    _, table = create_streaming_table_statements(EVENTS, "id BIGINT", "bucket(4, id)", format_version=3)
    assert "'format-version' = '3', 'write.delete.mode' = 'merge-on-read'" in table
    with pytest.raises(InvalidCallError, match="format_version must be 2 or 3, got 1"):
        create_streaming_table_statements(EVENTS, "id BIGINT", "bucket(4, id)", format_version=1)
