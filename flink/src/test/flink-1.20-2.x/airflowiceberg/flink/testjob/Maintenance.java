package airflowiceberg.flink.testjob;

import java.io.IOException;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;

import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.iceberg.flink.TableLoader;
import org.apache.iceberg.flink.maintenance.api.ExpireSnapshots;
import org.apache.iceberg.flink.maintenance.api.JdbcLockFactory;
import org.apache.iceberg.flink.maintenance.api.RewriteDataFiles;
import org.apache.iceberg.flink.maintenance.api.TableMaintenance;

/**
 * Iceberg's own table maintenance inside the writing job, the peer that {@code make bench-peers} runs beside ours:
 * {@code TableMaintenance} (Iceberg 1.10 and later, on Flink 1.20 and 2.x) with {@code RewriteDataFiles} and
 * {@code ExpireSnapshots}, each on its own slot-sharing group as Iceberg's docs advise, and a lock from
 * {@code JdbcLockFactory} in the gate's MySQL (without {@code --lock-url}: Iceberg 1.11's coordinator lock, in the
 * job itself). It pauses nothing: its rewrites commit beside the sink's commits.
 *
 * <p>Arguments (with {@code --maintenance true}): {@code --lock-url} (JDBC), {@code --lock-user}, and the schedule:
 * {@code --rewrite-data-files} and {@code --rewrite-eq-delete-files} (new files since the last rewrite that start
 * one), {@code --rewrite-commits}, {@code --rewrite-delete-file-threshold}, {@code --rate-limit-ms} (the least time
 * between two runs of a task), {@code --retain-last}, {@code --max-snapshot-age-ms}, {@code --expire-commits}. The
 * lock's password comes from {@code AIRFLOW_ICEBERG_LOCK_PASSWORD}.
 */
final class Maintenance {
    private Maintenance() {}

    static void add(StreamExecutionEnvironment env, TableLoader table, String tableName, JobArgs params)
            throws IOException {
        TableMaintenance.Builder maintenance = params.has("lock-url")
                ? withJdbcLock(env, table, tableName, params)
                : TableMaintenance.forTable(env, table);  // Iceberg 1.11's lock in the job's own coordinator
        maintenance
                .uidSuffix("maintenance")
                .rateLimit(Duration.ofMillis(params.getLong("rate-limit-ms", 60_000)))
                .add(RewriteDataFiles.builder()
                        .scheduleOnDataFileCount(params.getInt("rewrite-data-files", 1000))
                        .scheduleOnEqDeleteFileCount(params.getInt("rewrite-eq-delete-files", 1000))
                        .scheduleOnCommitCount(params.getInt("rewrite-commits", 10))
                        .deleteFileThreshold(params.getInt("rewrite-delete-file-threshold", 1))
                        .partialProgressEnabled(true)
                        .slotSharingGroup("maintenance"))
                .add(ExpireSnapshots.builder()
                        .scheduleOnCommitCount(params.getInt("expire-commits", 10))
                        .retainLast(params.getInt("retain-last", 10))
                        .maxSnapshotAge(Duration.ofMillis(params.getLong("max-snapshot-age-ms", 3_600_000)))
                        .slotSharingGroup("maintenance"))
                .append();
    }

    /** The lock users of Iceberg 1.10 know: a row in a JDBC database (Iceberg 1.11 deprecates it for its own). */
    @SuppressWarnings("deprecation")
    private static TableMaintenance.Builder withJdbcLock(
            StreamExecutionEnvironment env, TableLoader table, String tableName, JobArgs params) {
        Map<String, String> lock = new HashMap<>();
        lock.put("jdbc.user", params.get("lock-user", "root"));
        lock.put("jdbc.password", System.getenv().getOrDefault("AIRFLOW_ICEBERG_LOCK_PASSWORD", ""));
        lock.put(JdbcLockFactory.INIT_LOCK_TABLES_PROPERTY, "true");
        return TableMaintenance.forTable(
                env, table, new JdbcLockFactory(params.getRequired("lock-url"), tableName, lock));
    }
}
