"""The rules that keep Iceberg maintenance safe beside a streaming writer and its gate."""

from __future__ import annotations

from datetime import timedelta

#: Flink's Iceberg sink records its last committed checkpoint in this snapshot-summary key. On restore it
#: walks back from the current snapshot to find it; if that snapshot was expired, it commits the data again.
FLINK_CHECKPOINT_MARKER = "flink.max-committed-checkpoint-id"
#: Added to the gate's longest lease for remove_orphan_files: files younger than that may belong to a
#: writer whose commit a closed gate is holding back.
ORPHAN_MARGIN = timedelta(hours=1)
#: Iceberg's own floor: its remove_orphan_files procedure refuses an interval under 24 hours.
ICEBERG_ORPHAN_FLOOR = timedelta(hours=24)


def minimum_orphan_age(max_pause_seconds: int) -> timedelta:
    """The shortest safe ``older_than`` for orphan removal next to a gate that pauses writers this long at most."""
    return max(ICEBERG_ORPHAN_FLOOR, timedelta(seconds=max_pause_seconds) + ORPHAN_MARGIN)
