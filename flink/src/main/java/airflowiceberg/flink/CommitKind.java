package airflowiceberg.flink;

import java.util.Locale;

/**
 * What a writer's commits do to its table, as it declares them at the gate: the words of
 * {@code airflow_iceberg/core/conflicts.py}, which decides from them who pauses for a compaction.
 *
 * <p>Flink's Iceberg sink, in append or upsert mode, commits {@link #UPSERTS} at most: data files, equality deletes,
 * and position deletes (or deletion vectors) only for rows of its own commit. So a {@link GatedSource} declares that
 * unless told otherwise, with the Iceberg release it runs, and the rule takes a sink before Iceberg 1.6, whose
 * position deletes are partition-scoped, for one that conflicts.
 */
public enum CommitKind {
    /** New data files only. */
    APPENDS("appends"),
    /** Upserts whose deletes touch only its own new files (Flink's upsert sink, Iceberg 1.6 and later). */
    UPSERTS("upserts"),
    /** Row-level changes to existing files (a MERGE, UPDATE or DELETE; Flink's upsert sink before Iceberg 1.6). */
    ROW_LEVEL("row-level");

    private final String value;

    CommitKind(String value) {
        this.value = value;
    }

    /** As the gate stores it: {@code appends}, {@code upserts} or {@code row-level}. */
    public String value() {
        return value;
    }

    /** The kind named {@code value} (as stored, or the constant's name); an error naming it and the kinds. */
    public static CommitKind parse(String value) {
        for (CommitKind kind : values()) {
            if (kind.value.equals(value) || kind.name().equals(value)) {
                return kind;
            }
        }
        StringBuilder kinds = new StringBuilder();
        for (CommitKind kind : values()) {
            kinds.append(kinds.length() == 0 ? "" : ", ").append('\'').append(kind.value).append('\'');
        }
        throw new IllegalArgumentException("unknown commit kind '" + value + "': a writer commits one of " + kinds);
    }

    @Override
    public String toString() {
        return value.toLowerCase(Locale.ROOT);
    }
}
