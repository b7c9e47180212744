package airflowiceberg.flink.testjob;

import java.time.Duration;

import airflowiceberg.flink.GateConfig;
import airflowiceberg.flink.GatedSource;
import airflowiceberg.flink.SnapshotIdSupplier;
import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.serialization.SimpleStringEncoder;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.file.sink.FileSink;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.filesystem.bucketassigners.BasePathBucketAssigner;
import org.apache.flink.streaming.api.functions.sink.filesystem.rollingpolicies.OnCheckpointRollingPolicy;

/**
 * The integration tests' Flink job, run on a local mini-cluster: the numbers {@code 0 .. count-1}, from a
 * rate-limited bounded sequence source wrapped in a {@link GatedSource}, through an {@link EventRecorder}, into
 * a {@link FileSink} (exactly once), checkpointing every second. A failure is not retried: it ends the job.
 *
 * <p>Arguments: {@code --gate-url --gate-user --table --writer-id --count --rate (records per second, all
 * subtasks) --parallelism --poke-ms --snapshot-id --out (the sink's directory) --events (the recorder's)}. The
 * gate password comes from the environment variable {@code AIRFLOW_ICEBERG_GATE_PASSWORD}.
 */
public final class GatedSequenceJob {
    private GatedSequenceJob() {}

    public static void main(String[] args) throws Exception {
        JobArgs params = JobArgs.fromArgs(args);
        long count = params.getLong("count");
        String password = System.getenv().getOrDefault("AIRFLOW_ICEBERG_GATE_PASSWORD", "");

        Configuration conf = new Configuration();
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");  // a failure ends the job, and the test sees it
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setRuntimeMode(RuntimeExecutionMode.STREAMING);
        env.setParallelism(params.getInt("parallelism", 2));
        env.enableCheckpointing(1000);  // exactly once, Flink's default mode

        DataGeneratorSource<Long> numbers = new DataGeneratorSource<>(
                index -> index, count, RateLimiterStrategy.perSecond(params.getDouble("rate")), Types.LONG);
        GateConfig gate = GateConfig.builder()
                .jdbcUrl(params.getRequired("gate-url"))
                .user(params.get("gate-user", "root"))
                .password(password)
                .table(params.getRequired("table"))
                .writerId(params.getRequired("writer-id"))
                .pokeInterval(Duration.ofMillis(params.getLong("poke-ms", 1000)))
                .timeout(Duration.ofSeconds(2))
                .snapshotIds(new FixedSnapshotId(params.getLong("snapshot-id")))
                .build();
        FileSink<Long> sink = FileSink.forRowFormat(new Path(params.getRequired("out")), new SimpleStringEncoder<Long>())
                .withBucketAssigner(new BasePathBucketAssigner<>())
                .withRollingPolicy(OnCheckpointRollingPolicy.build())
                .build();

        env.fromSource(new GatedSource<>(numbers, gate), WatermarkStrategy.noWatermarks(), "gated numbers")
                .map(new EventRecorder<Long>(params.getRequired("events")))
                .name("record events")
                .sinkTo(sink)
                .name("files");
        env.execute("gated sequence " + count);
    }

    /** The test's stand-in for the Iceberg table's current snapshot: one id the test knows. */
    static final class FixedSnapshotId implements SnapshotIdSupplier {
        private static final long serialVersionUID = 1L;
        private final long id;

        FixedSnapshotId(long id) {
            this.id = id;
        }

        @Override
        public Long currentSnapshotId() {
            return id;
        }

        @Override
        public String toString() {
            return "FixedSnapshotId(" + id + ")";
        }
    }
}
