"""Iceberg table names, checked, and the tables a streaming writer writes."""

from __future__ import annotations

import re
from dataclasses import dataclass

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


#: Characters of a bad value an error message quotes; a longer one is cut, with its length said.
SHOWN_CHARACTERS = 120


def shown(value: object, limit: int = SHOWN_CHARACTERS, quoted: bool = True) -> str:
    """``repr(value)`` (``str`` unless ``quoted``) for an error message, cut to about ``limit`` characters: a
    10,000-character table name must not make a 20,000-character error."""
    text = repr(value) if quoted else str(value)
    if len(text) <= limit:
        return text
    length = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters as written"
    return f"{text[:limit]}... ({length})"


class InvalidCallError(ValueError):
    """A table name, procedure or option that must not reach Spark; the message names the bad value."""


@dataclass(frozen=True)
class TableName:
    """A fully qualified Iceberg table name, ``catalog.namespace.table``, each part a plain identifier."""

    catalog: str
    namespace: str
    table: str

    @classmethod
    def parse(cls, text: object) -> TableName:
        """Parse ``catalog.namespace.table``; raise :class:`InvalidCallError` naming the value otherwise."""
        if not isinstance(text, str):
            raise InvalidCallError(f"table must be a string 'catalog.namespace.table', got {shown(text)}")
        parts = text.split(".")
        if len(parts) != 3 or not all(_IDENTIFIER.fullmatch(p) for p in parts):
            raise InvalidCallError(
                f"table {shown(text)} is not 'catalog.namespace.table' with each part made of letters, digits "
                "and underscores (not starting with a digit)"
            )
        return cls(*parts)

    @classmethod
    def of(cls, value: TableName | str) -> TableName:
        """``value`` itself if it is a TableName already, else :meth:`parse` of it."""
        return value if isinstance(value, TableName) else cls.parse(value)

    @property
    def quoted(self) -> str:
        """The name as Spark SQL takes it, each part back-quoted."""
        return f"`{self.catalog}`.`{self.namespace}`.`{self.table}`"

    @property
    def in_catalog(self) -> str:
        """The name inside its catalog, ``namespace.table``, as Iceberg procedures and pyiceberg take it."""
        return f"{self.namespace}.{self.table}"

    def __str__(self) -> str:
        return f"{self.catalog}.{self.namespace}.{self.table}"


#: Table properties of a table written the way a streaming writer writes: format v2, merge-on-read upserts and
#: deletes (so position-delete files appear), and one file per task per partition with no shuffle.
STREAMING_TABLE_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.distribution-mode": "none",
    "write.spark.fanout.enabled": "true",
}


def create_streaming_table_statements(
    table: TableName, columns: str, partitioned_by: str, format_version: int = 2
) -> list[str]:
    """``CREATE NAMESPACE`` and ``CREATE TABLE ... IF NOT EXISTS`` for a streaming-written table.

    ``columns`` and ``partitioned_by`` are fixed Spark SQL written by the calling job, never user input. Format 3
    makes Spark's merge-on-read writes deletion vectors instead of position-delete files.
    """
    if format_version not in (2, 3):
        raise InvalidCallError(f"format_version must be 2 or 3, got {shown(format_version)}")
    settings = {**STREAMING_TABLE_PROPERTIES, "format-version": str(format_version)}
    properties = ", ".join(f"'{k}' = '{v}'" for k, v in settings.items())
    return [
        f"CREATE NAMESPACE IF NOT EXISTS `{table.catalog}`.`{table.namespace}`",
        f"CREATE TABLE IF NOT EXISTS {table.quoted} ({columns}) "
        f"USING iceberg PARTITIONED BY ({partitioned_by}) TBLPROPERTIES ({properties})",
    ]
