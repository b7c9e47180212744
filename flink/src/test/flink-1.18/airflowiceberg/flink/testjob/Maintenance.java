package airflowiceberg.flink.testjob;

import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.iceberg.flink.TableLoader;

/** Flink 1.18's newest Iceberg (1.5.2) has no TableMaintenance (Iceberg 1.10 and later, Flink 1.20 and 2.x). */
final class Maintenance {
    private Maintenance() {}

    static void add(StreamExecutionEnvironment env, TableLoader table, String tableName, JobArgs params) {
        throw new IllegalArgumentException("--maintenance needs Iceberg's Flink TableMaintenance, which Iceberg ships "
                + "from 1.10 for Flink 1.20 and 2.x only; this job runs on Flink 1.18, whose newest Iceberg is 1.5.2");
    }
}
