package airflowiceberg.flink;

import java.util.Set;

import org.apache.flink.api.common.watermark.WatermarkDeclaration;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceSplit;

/**
 * A source that wraps another, on Flink 2: it declares the wrapped source's watermarks, which Flink 2.1's
 * {@link Source} asks for. The Flink 1 copy of this interface (src/main/flink-1) has no such method.
 */
interface WrappingSource<T, SplitT extends SourceSplit, EnumChkT> extends Source<T, SplitT, EnumChkT> {
    Source<T, SplitT, EnumChkT> wrappedSource();

    @Override
    default Set<? extends WatermarkDeclaration> declareWatermarks() {
        return wrappedSource().declareWatermarks();
    }
}
