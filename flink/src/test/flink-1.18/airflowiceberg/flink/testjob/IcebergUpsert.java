package airflowiceberg.flink.testjob;

import java.util.List;

import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.table.data.RowData;
import org.apache.iceberg.flink.TableLoader;
import org.apache.iceberg.flink.sink.FlinkSink;

/**
 * Iceberg's Flink sink in upsert mode on Flink 1.18, whose newest Iceberg runtime (1.5.2) has no IcebergSink: the
 * FlinkSink, whose WriteResult goes through Kryo, so on Java 17 the job's JVM needs Flink's --add-opens
 * (java.base/java.util, java.base/java.nio, ...). src/test/flink-1.20-2.x has the IcebergSink.
 */
final class IcebergUpsert {
    private IcebergUpsert() {}

    static void sink(DataStream<RowData> rows, TableLoader table, List<String> keys, int parallelism) {
        FlinkSink.forRowData(rows)
                .tableLoader(table)
                .upsert(true)
                .equalityFieldColumns(keys)
                .writeParallelism(parallelism)
                .uidPrefix("iceberg")
                .append();
    }
}
