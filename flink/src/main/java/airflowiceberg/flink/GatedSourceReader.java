package airflowiceberg.flink;

import java.util.Collection;
import java.util.List;
import java.util.concurrent.CompletableFuture;

import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.SourceEvent;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceSplit;
import org.apache.flink.core.io.InputStatus;

/**
 * A source reader that emits nothing while its table's write gate is closed, and acknowledges the pause.
 *
 * <p>While the gate is closed, {@link #pollNext} reports nothing available without asking the wrapped reader,
 * and {@link #isAvailable} returns a future that the gate thread completes when the gate opens: the task thread
 * stays free, so checkpoint barriers pass and checkpoints complete, and the wrapped reader's position stays at
 * its last emitted record. The pause's checkpoints are those whose state is taken while the gate is closed; the
 * first of them follows every record emitted before the pause. When the second of them completes, the Iceberg
 * committer has committed the first (it commits checkpoint n when n completes, before it takes part in n + 1),
 * so the gate thread acknowledges the pause with the table's current snapshot id. Everything else is the
 * wrapped reader's.
 */
final class GatedSourceReader<T, SplitT extends SourceSplit> implements SourceReader<T, SplitT> {
    private final SourceReader<T, SplitT> delegate;
    private final GateWatch gate;

    // Task thread only.
    private CompletableFuture<Void> pause;  // the pause being counted: the gate's opened() future during it
    private long firstCheckpointOfPause;
    private int completedInPause;
    private boolean endOfInput;

    GatedSourceReader(SourceReader<T, SplitT> delegate, GateWatch gate) {
        this.delegate = delegate;
        this.gate = gate;
    }

    @Override
    public void start() {
        gate.start();
        delegate.start();
    }

    @Override
    public InputStatus pollNext(ReaderOutput<T> output) throws Exception {
        boolean open = gate.opened().isDone();
        gate.checkHealthy();  // after the look: a failing gate thread completes opened() to wake this thread
        if (!open) {
            return InputStatus.NOTHING_AVAILABLE;
        }
        InputStatus status = delegate.pollNext(output);
        if (status == InputStatus.END_OF_INPUT) {
            endOfInput = true;
        }
        return status;
    }

    @Override
    public CompletableFuture<Void> isAvailable() {
        CompletableFuture<Void> opened = gate.opened();
        // After a failure, opened() is done: pollNext then runs and throws the gate thread's error.
        return opened.isDone() && !gate.failed() ? delegate.isAvailable() : opened;
    }

    @Override
    public List<SplitT> snapshotState(long checkpointId) {
        CompletableFuture<Void> opened = gate.opened();
        gate.checkHealthy();
        if (opened.isDone()) {
            pause = null;
        } else if (pause != opened) {
            pause = opened;
            firstCheckpointOfPause = checkpointId;
            completedInPause = 0;
        }
        return delegate.snapshotState(checkpointId);
    }

    @Override
    public void notifyCheckpointComplete(long checkpointId) throws Exception {
        delegate.notifyCheckpointComplete(checkpointId);  // a Kafka reader commits its offsets here
        gate.checkHealthy();
        if (pause != null && pause == gate.opened() && !pause.isDone() && checkpointId >= firstCheckpointOfPause
                && ++completedInPause == 2) {
            gate.acknowledge(pause);
        }
    }

    @Override
    public void notifyCheckpointAborted(long checkpointId) throws Exception {
        delegate.notifyCheckpointAborted(checkpointId);
    }

    @Override
    public void addSplits(List<SplitT> splits) {
        delegate.addSplits(splits);
    }

    @Override
    public void notifyNoMoreSplits() {
        delegate.notifyNoMoreSplits();
    }

    @Override
    public void handleSourceEvents(SourceEvent sourceEvent) {
        delegate.handleSourceEvents(sourceEvent);
    }

    @Override
    public void pauseOrResumeSplits(Collection<String> splitsToPause, Collection<String> splitsToResume) {
        delegate.pauseOrResumeSplits(splitsToPause, splitsToResume);
    }

    /** A reader whose input ended has stopped for good and leaves the gate; one that is cancelled or fails over
     * stays registered, and its restart reports under the same writer id. */
    @Override
    public void close() throws Exception {
        try {
            delegate.close();
        } finally {
            gate.close(endOfInput);
        }
    }
}
