"""Which compaction DAG file builds a table's DAGs, when a long table list is split across several files.

Airflow parses each DAG file in one process, under a time-out (``[core] dagbag_import_timeout``, 30 s by default,
and ``[dag_processor] dag_file_processor_timeout``, 50 s, for the parse and the serialisation together). One file
of 1,000 tables' DAGs builds in about 6 s on two cores and serialises in about 7 s, so 5,000 tables in one file
would pass both. A table list of more than ``tables_per_dag_file`` tables is therefore split across
``ceil(tables / tables_per_dag_file)`` files, and each table's file is chosen by a hash of its name:

- the same table list gives every table the same file, in every process, on every machine;
- when the list grows by a file, only the tables the new file takes move (about one in the new count), and they
  all move to it; the rest stay where they were, so their DAGs are not deactivated and re-created.

The hash is Lamping and Veach's jump consistent hash ("A Fast, Minimal Memory, Consistent Hash Algorithm",
2014), over the first 8 bytes of the name's BLAKE2b digest.
"""

from __future__ import annotations

import hashlib

_MASK = (1 << 64) - 1


def dag_file_count(tables: int, per_file: int) -> int:
    """How many DAG files ``tables`` tables take at ``per_file`` a file: at least one."""
    if per_file < 1:
        raise ValueError(f"tables per DAG file must be at least 1, got {per_file!r}")
    return max(1, -(-tables // per_file))


def dag_file_of(table: str, files: int) -> int:
    """The index (0 to ``files - 1``) of the DAG file that builds the DAGs of ``table`` (its full name)."""
    key = int.from_bytes(hashlib.blake2b(table.encode(), digest_size=8).digest(), "big")
    return jump_hash(key, files)


def jump_hash(key: int, buckets: int) -> int:
    """Lamping and Veach's jump consistent hash of the 64-bit ``key`` into ``buckets`` buckets."""
    if buckets < 1:
        raise ValueError(f"buckets must be at least 1, got {buckets!r}")
    key &= _MASK
    bucket, jump = -1, 0
    while jump < buckets:
        bucket = jump
        key = (key * 2862933555777941757 + 1) & _MASK
        jump = int((bucket + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return bucket
