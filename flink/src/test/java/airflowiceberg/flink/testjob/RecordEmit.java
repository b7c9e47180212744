package airflowiceberg.flink.testjob;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.time.Instant;
import java.time.temporal.ChronoUnit;

import org.apache.flink.table.functions.FunctionContext;
import org.apache.flink.table.functions.ScalarFunction;

/**
 * {@code recorded(seq)} in a SQL job: returns its argument and writes {@code emit <seq> <t>} to its subtask's
 * events file, as {@link EventRecorder} does for a DataStream job ({@code t}: microseconds since the epoch). The
 * planner chains it to the source, so a line is written as its row leaves the source. The directory is the JVM's
 * {@link #EVENTS_PROPERTY} (the mini-cluster runs in the job's JVM).
 */
public final class RecordEmit extends ScalarFunction {
    private static final long serialVersionUID = 1L;
    static final String EVENTS_PROPERTY = "airflowiceberg.events";

    private transient BufferedWriter events;

    @Override
    public void open(FunctionContext context) throws IOException {
        String subtask = context.getMetricGroup().getAllVariables().get("<subtask_index>");
        events = Files.newBufferedWriter(
                Paths.get(System.getProperty(EVENTS_PROPERTY), "subtask-" + subtask + ".events"),
                StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    }

    public Long eval(Long seq) throws IOException {
        events.write("emit " + seq + " " + ChronoUnit.MICROS.between(Instant.EPOCH, Instant.now()) + "\n");
        events.flush();
        return seq;
    }

    @Override
    public boolean isDeterministic() {
        return false;
    }

    @Override
    public void close() throws IOException {
        if (events != null) {
            events.close();
        }
    }
}
