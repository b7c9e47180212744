package airflowiceberg.flink;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SourceSplit;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.api.common.functions.InvalidTypesException;
import org.apache.flink.api.java.typeutils.MissingTypeInfo;
import org.apache.flink.api.java.typeutils.ResultTypeQueryable;
import org.apache.flink.api.java.typeutils.TypeExtractor;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * Wraps any FLIP-27 source (a {@code KafkaSource}, say) so that it emits nothing while its Iceberg table's write
 * gate is closed (docs/write-gate-protocol.md).
 *
 * <pre>{@code
 * GateConfig gate = GateConfig.builder()
 *         .jdbcUrl("jdbc:mariadb://mysql:3306/airflow_iceberg").user("writer").password(secret)
 *         .table("lake.db.events").writerId("events-ingest")
 *         .snapshotIds(new IcebergSnapshotIds("lake", catalogProperties, "db.events"))
 *         .build();
 * env.fromSource(new GatedSource<>(kafkaSource, gate), WatermarkStrategy.noWatermarks(), "events");
 * }</pre>
 *
 * <p>Each reader subtask is a writer of its own at the gate, {@code writerId + "#" + subtask index}, that declares
 * what the job commits ({@link GateConfig#commitKind()}, its Iceberg release, and its job id, which its snapshots'
 * summaries carry): a compaction that cannot conflict with that lets it keep committing. It reads the
 * gate every poke interval on a thread of its own, pauses in the source so that checkpoints go on, acknowledges
 * a pause with the table's current snapshot after the pause's second completed checkpoint, and during a MySQL
 * outage obeys its last verdict only until that verdict's lease ends. The enumerator, the splits, their
 * serializers and the reader's checkpointed state are the wrapped source's, unchanged.
 *
 * @param <T> the records
 * @param <SplitT> the wrapped source's splits
 * @param <EnumChkT> the wrapped source's enumerator checkpoints
 */
public final class GatedSource<T, SplitT extends SourceSplit, EnumChkT>
        implements WrappingSource<T, SplitT, EnumChkT>, ResultTypeQueryable<T> {
    private static final long serialVersionUID = 1L;

    private final Source<T, SplitT, EnumChkT> delegate;
    private final GateConfig gate;

    public GatedSource(Source<T, SplitT, EnumChkT> delegate, GateConfig gate) {
        if (delegate == null || gate == null) {
            throw new IllegalArgumentException("GatedSource needs a source to wrap and a GateConfig");
        }
        this.delegate = delegate;
        this.gate = gate;
    }

    public GateConfig gateConfig() {
        return gate;
    }

    @Override
    public SourceReader<T, SplitT> createReader(SourceReaderContext context) throws Exception {
        String writerId = gate.writerId() + "#" + context.getIndexOfSubtask();
        GateWatch watch = new GateWatch(gate, writerId, commitsAs(context));
        return new GatedSourceReader<>(delegate.createReader(context), watch);
    }

    /** What the job's Iceberg snapshots name it by: {@code flink.job-id=<its job id>}, from the reader's metric
     * scope (Flink's sink writes the same id into every snapshot summary); null where the scope has none. */
    static String commitsAs(SourceReaderContext context) {
        String jobId = context.metricGroup().getAllVariables().get("<job_id>");
        return jobId == null || jobId.isEmpty() ? null : "flink.job-id=" + jobId;
    }

    @Override
    public Boundedness getBoundedness() {
        return delegate.getBoundedness();
    }

    @Override
    public SplitEnumerator<SplitT, EnumChkT> createEnumerator(SplitEnumeratorContext<SplitT> context)
            throws Exception {
        return delegate.createEnumerator(context);
    }

    @Override
    public SplitEnumerator<SplitT, EnumChkT> restoreEnumerator(SplitEnumeratorContext<SplitT> context,
            EnumChkT checkpoint) throws Exception {
        return delegate.restoreEnumerator(context, checkpoint);
    }

    @Override
    public SimpleVersionedSerializer<SplitT> getSplitSerializer() {
        return delegate.getSplitSerializer();
    }

    @Override
    public SimpleVersionedSerializer<EnumChkT> getEnumeratorCheckpointSerializer() {
        return delegate.getEnumeratorCheckpointSerializer();
    }

    /** The wrapped source. On Flink 2, {@code declareWatermarks()} passes on its declarations (WrappingSource). */
    @Override
    public Source<T, SplitT, EnumChkT> wrappedSource() {
        return delegate;
    }

    /** The wrapped source's type, found as {@code StreamExecutionEnvironment.fromSource} would find it. */
    @Override
    @SuppressWarnings("unchecked")
    public TypeInformation<T> getProducedType() {
        if (delegate instanceof ResultTypeQueryable) {
            return ((ResultTypeQueryable<T>) delegate).getProducedType();
        }
        try {
            return TypeExtractor.createTypeInfo(Source.class, delegate.getClass(), 0, null, null);
        } catch (InvalidTypesException e) {
            return (TypeInformation<T>) new MissingTypeInfo("GatedSource(" + delegate + ")", e);
        }
    }
}
