package airflowiceberg.flink;

import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceSplit;

/**
 * A source that wraps another, on Flink 1.18 and 1.20, whose {@link Source} has nothing more to pass on. The
 * Flink 2 copy of this interface (src/main/flink-2) passes on the wrapped source's watermark declarations.
 */
interface WrappingSource<T, SplitT extends SourceSplit, EnumChkT> extends Source<T, SplitT, EnumChkT> {
    Source<T, SplitT, EnumChkT> wrappedSource();
}
