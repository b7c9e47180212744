package airflowiceberg.flink.testjob;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import airflowiceberg.flink.GateConfig;
import airflowiceberg.flink.GatedSource;
import airflowiceberg.flink.IcebergSnapshotIds;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.types.RowKind;
import org.apache.iceberg.Schema;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.flink.CatalogLoader;
import org.apache.iceberg.flink.FlinkSchemaUtil;
import org.apache.iceberg.flink.TableLoader;

/**
 * The CDC writer of the design: Kafka in, through a {@link GatedSource}, into Flink's own Iceberg sink in upsert
 * mode (equality fields: the key), checkpointing every 2 s, with the table in Iceberg's JDBC catalog. The
 * integration tests run it on a local mini-cluster, and the README shows it as the template a user copies.
 *
 * <p>Each Kafka message's value is one change, {@code <seq>,<op>,<id>,<v>}: {@code op} is {@code u} (insert or
 * update: the sink deletes the key's row, by an equality delete, and writes the new one) or {@code d} (delete the
 * key). The table's columns are {@code id bigint} (its identifier field), {@code v string} and {@code seq bigint}.
 *
 * <p>Arguments: {@code --bootstrap --topic --group --catalog (its name, "lake") --catalog-uri (JDBC) --catalog-user
 * --warehouse --table (namespace.name) --gate-url --gate-user --writer-id --poke-ms --parallelism
 * --checkpoint-ms (the checkpoint interval; 2000 unless given) --checkpoint-dir (file:// URI; checkpoints are kept when the job stops) --restore-from (a checkpoint's
 * directory; optional) --events (the recorder's directory) --maintenance (true: Iceberg's own Flink table
 * maintenance in the same job, {@link Maintenance}, with its arguments)}. The gate and catalog passwords come from the
 * environment: {@code AIRFLOW_ICEBERG_GATE_PASSWORD}, {@code AIRFLOW_ICEBERG_CATALOG_PASSWORD}. A failure is not
 * retried: it ends the job, and the test sees it.
 */
public final class CdcUpsertJob {
    private CdcUpsertJob() {}

    public static void main(String[] args) throws Exception {
        JobArgs params = JobArgs.fromArgs(args);

        Map<String, String> settings = new HashMap<>();
        // Flink 1.20 and 2.x read execution.checkpointing.storage, execution.checkpointing.dir and
        // execution.state-recovery.path; 1.18 knows only their older names, which the newer lines read (with a
        // deprecation warning) only when the new key is missing. Both go in, and every line reads its own.
        settings.put("restart-strategy.type", "none");
        settings.put("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
        settings.put("execution.checkpointing.storage", "filesystem");
        settings.put("state.checkpoint-storage", "filesystem");
        settings.put("execution.checkpointing.dir", params.getRequired("checkpoint-dir"));
        settings.put("state.checkpoints.dir", params.getRequired("checkpoint-dir"));
        if (params.has("restore-from")) {
            settings.put("execution.state-recovery.path", params.get("restore-from"));
            settings.put("execution.savepoint.path", params.get("restore-from"));
        }
        int parallelism = params.getInt("parallelism", 2);
        boolean maintenance = Boolean.parseBoolean(params.get("maintenance", "false"));
        if (maintenance) {  // the maintenance tasks' own slot-sharing group takes slots of its own
            settings.put("taskmanager.numberOfTaskSlots", String.valueOf(2 * parallelism));
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(
                Configuration.fromMap(settings));
        env.setParallelism(parallelism);
        env.enableCheckpointing(params.getLong("checkpoint-ms", 2000));  // exactly once, Flink's default mode

        // One catalog for Spark, Flink and pyiceberg: Iceberg's JDBC catalog in MySQL.
        Map<String, String> catalog = new HashMap<>();
        catalog.put("uri", params.getRequired("catalog-uri"));
        catalog.put("jdbc.user", params.get("catalog-user", "root"));
        catalog.put("jdbc.password", System.getenv().getOrDefault("AIRFLOW_ICEBERG_CATALOG_PASSWORD", ""));
        catalog.put("warehouse", params.getRequired("warehouse"));
        String catalogName = params.get("catalog", "lake");
        String catalogImpl = "org.apache.iceberg.jdbc.JdbcCatalog";
        CatalogLoader catalogLoader = CatalogLoader.custom(catalogName, catalog,
                new org.apache.hadoop.conf.Configuration(), catalogImpl);
        Map<String, String> snapshotCatalog = new HashMap<>(catalog);  // the acknowledgements' own catalog
        snapshotCatalog.put("catalog-impl", catalogImpl);
        TableLoader tableLoader = TableLoader.fromCatalog(catalogLoader, TableIdentifier.parse(params.getRequired("table")));

        Schema schema;
        try (TableLoader loader = tableLoader.clone()) {
            loader.open();
            schema = loader.loadTable().schema();
        }
        List<String> columns = schema.columns().stream().map(column -> column.name()).toList();
        if (!columns.equals(List.of("id", "v", "seq"))) {
            throw new IllegalArgumentException("the table's columns must be [id, v, seq], not " + columns);
        }

        KafkaSource<String> kafka = KafkaSource.<String>builder()
                .setBootstrapServers(params.getRequired("bootstrap"))
                .setTopics(params.getRequired("topic"))
                .setGroupId(params.getRequired("group"))
                .setStartingOffsets(OffsetsInitializer.earliest())  // on a first start; a restore uses its offsets
                .setValueOnlyDeserializer(new SimpleStringSchema())
                .build();
        GateConfig gate = GateConfig.builder()
                .jdbcUrl(params.getRequired("gate-url"))
                .user(params.get("gate-user", "root"))
                .password(System.getenv().getOrDefault("AIRFLOW_ICEBERG_GATE_PASSWORD", ""))
                .table(catalogName + "." + params.getRequired("table"))
                .writerId(params.getRequired("writer-id"))
                .pokeInterval(Duration.ofMillis(params.getLong("poke-ms", 1000)))
                .timeout(Duration.ofSeconds(2))
                .snapshotIds(new IcebergSnapshotIds(catalogName, snapshotCatalog, params.getRequired("table")))
                .build();

        DataStream<RowData> changes = env
                .fromSource(new GatedSource<>(kafka, gate), WatermarkStrategy.noWatermarks(), "gated kafka")
                .uid("gated-kafka")
                .map(new EventRecorder<String>(params.getRequired("events")))
                .uid("record-events")
                .name("record events")
                .map(new ToRow())
                .returns(InternalTypeInfo.of(FlinkSchemaUtil.convert(schema)))
                .uid("to-row")
                .name("to row");
        IcebergUpsert.sink(changes, tableLoader, List.of("id"), parallelism);
        if (maintenance) {
            Maintenance.add(env, tableLoader.clone(), catalogName + "." + params.getRequired("table"), params);
        }
        env.execute("cdc upsert " + params.getRequired("table"));
    }

    /** One Kafka value, {@code <seq>,<op>,<id>,<v>}, as the row the upsert sink writes (or deletes, by its key). */
    static final class ToRow implements MapFunction<String, RowData> {
        private static final long serialVersionUID = 1L;

        @Override
        public RowData map(String value) {
            String[] fields = value.split(",", 4);
            if (fields.length != 4 || !(fields[1].equals("u") || fields[1].equals("d"))) {
                throw new IllegalArgumentException("not a change <seq>,<u|d>,<id>,<v>: " + value);
            }
            RowKind kind = fields[1].equals("d") ? RowKind.DELETE : RowKind.INSERT;
            return GenericRowData.ofKind(kind, Long.parseLong(fields[2]), StringData.fromString(fields[3]),
                    Long.parseLong(fields[0]));
        }
    }
}
