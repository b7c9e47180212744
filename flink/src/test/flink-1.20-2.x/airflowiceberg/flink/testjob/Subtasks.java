package airflowiceberg.flink.testjob;

import org.apache.flink.api.common.functions.RuntimeContext;

/**
 * A function's subtask index on Flink 1.20 and 2.x: 1.20 deprecates getIndexOfThisSubtask() and 2.0 removes it
 * (src/test/flink-1.18 has 1.18's way).
 */
final class Subtasks {
    private Subtasks() {}

    static int index(RuntimeContext context) {
        return context.getTaskInfo().getIndexOfThisSubtask();
    }
}
