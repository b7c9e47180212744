package airflowiceberg.flink.testjob;

import org.apache.flink.api.common.functions.RuntimeContext;

/** A function's subtask index on Flink 1.18, whose RuntimeContext has no getTaskInfo() (src/test/flink-1.20-2.x). */
final class Subtasks {
    private Subtasks() {}

    static int index(RuntimeContext context) {
        return context.getIndexOfThisSubtask();
    }
}
