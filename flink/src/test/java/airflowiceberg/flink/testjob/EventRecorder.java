package airflowiceberg.flink.testjob;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.time.Instant;
import java.time.temporal.ChronoUnit;

import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;

/**
 * Passes records on unchanged and writes, per subtask, what the test asserts on: {@code emit <value> <t>} for each
 * record (its {@code toString()}, which holds no space), {@code snapshot <checkpoint> <t>} when a checkpoint's
 * state is taken and {@code complete <checkpoint> <t>} when it completes, {@code t} in microseconds since the
 * epoch (the system clock, which MySQL's NOW(6) reads too). Chained to the source, so it runs on the source's task
 * thread: a record's line is written as the record is emitted, and a checkpoint's {@code snapshot} line comes
 * after every record before its barrier.
 */
final class EventRecorder<T> extends RichMapFunction<T, T> implements CheckpointedFunction, CheckpointListener {
    private static final long serialVersionUID = 1L;

    private final String directory;
    private transient BufferedWriter events;

    EventRecorder(String directory) {
        this.directory = directory;
    }

    @Override
    public T map(T value) throws IOException {
        write("emit " + value);
        return value;
    }

    /** Opens the subtask's file here, before open(), whose parameter differs between Flink 1 and Flink 2. */
    @Override
    public void initializeState(FunctionInitializationContext context) throws IOException {
        int subtask = Subtasks.index(getRuntimeContext());
        events = Files.newBufferedWriter(Paths.get(directory, "subtask-" + subtask + ".events"),
                StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    }

    @Override
    public void snapshotState(FunctionSnapshotContext context) throws IOException {
        write("snapshot " + context.getCheckpointId());
    }

    @Override
    public void notifyCheckpointComplete(long checkpointId) throws IOException {
        write("complete " + checkpointId);
    }

    @Override
    public void close() throws IOException {
        if (events != null) {
            events.close();
        }
    }

    private void write(String event) throws IOException {
        events.write(event + " " + ChronoUnit.MICROS.between(Instant.EPOCH, Instant.now()) + "\n");
        events.flush();
    }
}
