package airflowiceberg.flink.testjob;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;

/**
 * Runs a Flink SQL script as the SQL client would, statement by statement, on a local mini-cluster: the
 * {@code gated} connector's tests (tests/integration/test_flink_sql.py) and the docs' DDL come from such a script.
 *
 * <p>Statements end with a {@code ;} at the end of a line; {@code --} comments are dropped. {@code ${NAME}} is
 * replaced with the environment variable NAME before a statement runs, so that passwords stay out of the
 * script and the command line; a missing one fails the job. The last statement (the {@code INSERT INTO}) runs
 * until the job ends. Arguments: {@code --script --events (RecordEmit's directory) --parallelism --checkpoint-ms
 * --checkpoint-dir (file:// URI)}.
 */
public final class GatedSqlJob {
    private static final Pattern VARIABLE = Pattern.compile("\\$\\{([A-Z0-9_]+)}");

    private GatedSqlJob() {}

    public static void main(String[] args) throws Exception {
        JobArgs params = JobArgs.fromArgs(args);
        System.setProperty(RecordEmit.EVENTS_PROPERTY, params.getRequired("events"));
        Map<String, String> settings = new HashMap<>();
        settings.put("restart-strategy.type", "none");  // a failure ends the job, and the test sees it
        settings.put("execution.checkpointing.storage", "filesystem");
        settings.put("state.checkpoint-storage", "filesystem");
        settings.put("execution.checkpointing.dir", params.getRequired("checkpoint-dir"));
        settings.put("state.checkpoints.dir", params.getRequired("checkpoint-dir"));
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(
                Configuration.fromMap(settings));
        env.setParallelism(params.getInt("parallelism", 2));
        env.enableCheckpointing(params.getLong("checkpoint-ms", 2000));
        StreamTableEnvironment tables = StreamTableEnvironment.create(env);

        List<String> statements = statements(Files.readString(Paths.get(params.getRequired("script")),
                StandardCharsets.UTF_8));
        TableResult last = null;
        for (String statement : statements) {
            last = tables.executeSql(substitute(statement));
        }
        if (last != null) {
            last.await();
        }
    }

    static List<String> statements(String script) {
        List<String> statements = new ArrayList<>();
        StringBuilder current = new StringBuilder();
        for (String line : script.split("\n", -1)) {
            String code = line.startsWith("--") ? "" : line;
            current.append(code).append('\n');
            if (code.stripTrailing().endsWith(";")) {
                String statement = current.toString().strip();
                statements.add(statement.substring(0, statement.length() - 1));
                current.setLength(0);
            }
        }
        if (!current.toString().isBlank()) {
            throw new IllegalArgumentException("the script's last statement has no ';': " + current);
        }
        return statements;
    }

    static String substitute(String statement) {
        Matcher variable = VARIABLE.matcher(statement);
        StringBuilder result = new StringBuilder();
        while (variable.find()) {
            String value = System.getenv(variable.group(1));
            if (value == null) {
                throw new IllegalArgumentException("the script uses ${" + variable.group(1) + "}, which is not set");
            }
            variable.appendReplacement(result, Matcher.quoteReplacement(value));
        }
        return variable.appendTail(result).toString();
    }
}
