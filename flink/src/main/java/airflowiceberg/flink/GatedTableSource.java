package airflowiceberg.flink;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.LinkedHashSet;
import java.util.Optional;
import java.util.Set;

import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceSplit;
import org.apache.flink.api.dag.Transformation;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.DataStreamSource;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.transformations.SourceTransformation;
import org.apache.flink.table.api.ValidationException;
import org.apache.flink.table.connector.ParallelismProvider;
import org.apache.flink.table.connector.ProviderContext;
import org.apache.flink.table.connector.source.DataStreamScanProvider;
import org.apache.flink.table.connector.source.ScanTableSource;
import org.apache.flink.table.connector.source.ScanTableSource.ScanRuntimeProvider;
import org.apache.flink.table.connector.source.SourceProvider;
import org.apache.flink.table.data.RowData;

/**
 * A connector's scan table source whose FLIP-27 source runs inside a {@link GatedSource}.
 *
 * <p>It is a proxy of the wrapped table source with every interface that one has: the planner sees the same
 * abilities ({@code SupportsReadingMetadata}, {@code SupportsWatermarkPushDown}, ...) and applies them to the
 * wrapped source; only the runtime provider (and {@code copy()}, whose copy is gated too) differ. The two kinds of
 * provider that carry a FLIP-27 source are gated: a {@link SourceProvider} (MySQL CDC's, for one), and a
 * {@link DataStreamScanProvider} whose stream is a single source (Kafka's), rebuilt around the gated source with
 * the wrapped one's watermark strategy, name and uid. Anything else is refused when the statement is planned.
 */
final class GatedTableSource implements InvocationHandler {
    private final ScanTableSource wrapped;
    private final GateConfig gate;
    private final String connector;
    private final ClassLoader classLoader;

    private GatedTableSource(ScanTableSource wrapped, GateConfig gate, String connector, ClassLoader classLoader) {
        this.wrapped = wrapped;
        this.gate = gate;
        this.connector = connector;
        this.classLoader = classLoader;
    }

    static ScanTableSource wrap(ScanTableSource wrapped, GateConfig gate, String connector, ClassLoader loader) {
        Set<Class<?>> interfaces = new LinkedHashSet<>();
        for (Class<?> type = wrapped.getClass(); type != null; type = type.getSuperclass()) {
            collect(type, interfaces);
        }
        return (ScanTableSource) Proxy.newProxyInstance(loader, interfaces.toArray(new Class<?>[0]),
                new GatedTableSource(wrapped, gate, connector, loader));
    }

    private static void collect(Class<?> type, Set<Class<?>> interfaces) {
        for (Class<?> implemented : type.getInterfaces()) {
            if (interfaces.add(implemented)) {
                collect(implemented, interfaces);
            }
        }
    }

    @Override
    public Object invoke(Object proxy, Method method, Object[] args) throws Throwable {
        switch (method.getName()) {
            case "getScanRuntimeProvider":
                return gated((ScanRuntimeProvider) call(method, args));
            case "copy":
                return wrap((ScanTableSource) call(method, args), gate, connector, classLoader);
            case "asSummaryString":
                return "Gated(" + wrapped.asSummaryString() + ", " + gate.table() + ")";
            case "equals":
                return proxy == args[0];
            case "hashCode":
                return System.identityHashCode(proxy);
            case "toString":
                return "GatedTableSource(" + wrapped + ")";
            default:
                return call(method, args);
        }
    }

    private Object call(Method method, Object[] args) throws Throwable {
        try {
            return method.invoke(wrapped, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    private ScanRuntimeProvider gated(ScanRuntimeProvider provider) {
        if (provider instanceof SourceProvider) {
            return new GatedSourceProvider((SourceProvider) provider, gate);
        }
        if (provider instanceof DataStreamScanProvider) {
            return new GatedDataStreamProvider((DataStreamScanProvider) provider, gate, connector);
        }
        throw notFlip27(connector, provider.getClass().getName());
    }

    static ValidationException notFlip27(String connector, String what) {
        return new ValidationException("The connector '" + connector + "' of gate.connector reads with a " + what
                + ", not a FLIP-27 Source: only a FLIP-27 source (Kafka's, MySQL CDC's, ...) can be gated");
    }

    static <S extends SourceSplit, E> GatedSource<RowData, S, E> gatedSource(Source<RowData, S, E> source,
            GateConfig gate) {
        return new GatedSource<>(source, gate);
    }

    /** What a gated provider passes on as the wrapped one has it: boundedness and parallelism. */
    private abstract static class GatedProvider<P extends ScanRuntimeProvider>
            implements ScanRuntimeProvider, ParallelismProvider {
        final P wrapped;
        final GateConfig gate;

        GatedProvider(P wrapped, GateConfig gate) {
            this.wrapped = wrapped;
            this.gate = gate;
        }

        @Override
        public boolean isBounded() {
            return wrapped.isBounded();
        }

        @Override
        public Optional<Integer> getParallelism() {
            return wrapped instanceof ParallelismProvider ? ((ParallelismProvider) wrapped).getParallelism()
                    : Optional.empty();
        }
    }

    /** The wrapped provider's source, gated. */
    private static final class GatedSourceProvider extends GatedProvider<SourceProvider> implements SourceProvider {
        GatedSourceProvider(SourceProvider wrapped, GateConfig gate) {
            super(wrapped, gate);
        }

        @Override
        public Source<RowData, ?, ?> createSource() {
            return gatedSource(wrapped.createSource(), gate);
        }
    }

    /** The wrapped provider's stream, whose one source is rebuilt as a gated one. */
    private static final class GatedDataStreamProvider extends GatedProvider<DataStreamScanProvider>
            implements DataStreamScanProvider {
        private final String connector;

        GatedDataStreamProvider(DataStreamScanProvider wrapped, GateConfig gate, String connector) {
            super(wrapped, gate);
            this.connector = connector;
        }

        @Override
        public DataStream<RowData> produceDataStream(ProviderContext context, StreamExecutionEnvironment env) {
            // The wrapped stream is built and left: a source joins the job only through what reads it.
            DataStream<RowData> stream = wrapped.produceDataStream(context, env);
            Transformation<RowData> transformation = stream.getTransformation();
            if (!(transformation instanceof SourceTransformation)) {
                throw notFlip27(connector, "stream of " + transformation.getClass().getSimpleName());
            }
            SourceTransformation<RowData, ?, ?> source = (SourceTransformation<RowData, ?, ?>) transformation;
            DataStreamSource<RowData> gated = env.fromSource(gatedSource(source.getSource(), gate),
                    source.getWatermarkStrategy(), source.getName(), stream.getType());
            if (source.getUid() != null) {
                gated.uid(source.getUid());
            }
            if (source.getParallelism() != env.getParallelism()) {
                gated.setParallelism(source.getParallelism());
            }
            return gated;
        }
    }
}
