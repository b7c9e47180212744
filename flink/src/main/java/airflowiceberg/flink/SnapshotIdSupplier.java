package airflowiceberg.flink;

import java.io.Serializable;

/**
 * Looks up the id of the gated table's current snapshot, for the acknowledgement of a pause.
 *
 * <p>Each source subtask uses its own copy, on its gate thread, never on the task thread: {@link #open()} once,
 * then {@link #currentSnapshotId()} once per pause, then {@link #close()}. {@link IcebergSnapshotIds} reads it
 * from the table's Iceberg catalog:
 *
 * <pre>{@code
 * GateConfig.builder()...snapshotIds(new IcebergSnapshotIds("lake", catalogProperties, "cdc.orders"))
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
