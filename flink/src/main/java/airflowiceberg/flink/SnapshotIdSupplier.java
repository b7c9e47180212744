package airflowiceberg.flink;

import java.io.Serializable;

/**
 * Looks up the id of the gated table's current snapshot, for the acknowledgement of a pause.
 *
 * <p>Each source subtask uses its own copy, on its gate thread, never on the task thread: {@link #open()} once,
 * then {@link #currentSnapshotId()} once per pause, then {@link #close()}. With Iceberg's Flink runtime:
 *
 * <pre>{@code
 * final class IcebergSnapshotIds implements SnapshotIdSupplier {
 *     private final TableLoader loader;      // the same TableLoader the job's IcebergSink uses
 *     private transient Table table;
 *
 *     IcebergSnapshotIds(TableLoader loader) { this.loader = loader; }
 *
 *     public void open() { loader.open(); table = loader.loadTable(); }
 *
 *     public Long currentSnapshotId() {
 *         table.refresh();                   // the committer has just committed: read the catalog again
 *         Snapshot current = table.currentSnapshot();
 *         return current == null ? null : current.snapshotId();
 *     }
 *
 *     public void close() throws Exception { loader.close(); }
 * }
 * }</pre>
 */
public interface SnapshotIdSupplier extends Serializable {
    /** Called once, on the gate thread, before the first lookup. */
    default void open() throws Exception {}

    /** The table's current snapshot id, or null if the table has no snapshot yet. */
    Long currentSnapshotId() throws Exception;

    /** Called once when the source subtask closes. */
    default void close() throws Exception {}
}
