package airflowiceberg.flink.testjob;

import java.util.List;

import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.table.data.RowData;
import org.apache.iceberg.flink.TableLoader;
import org.apache.iceberg.flink.sink.IcebergSink;

/** Iceberg's Flink sink in upsert mode on Flink 1.20 and 2.x: the IcebergSink (src/test/flink-1.18: FlinkSink). */
final class IcebergUpsert {
    private IcebergUpsert() {}

    static void sink(DataStream<RowData> rows, TableLoader table, List<String> keys, int parallelism) {
        IcebergSink.forRowData(rows)
                .tableLoader(table)
                .upsert(true)
                .equalityFieldColumns(keys)
                .writeParallelism(parallelism)
                .uidSuffix("iceberg")
                .append();
    }
}
