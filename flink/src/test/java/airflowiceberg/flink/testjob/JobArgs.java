package airflowiceberg.flink.testjob;

import java.util.HashMap;
import java.util.Map;

/**
 * A test job's arguments, {@code --name value} pairs as devkit/flink_jobs.py passes them: the part of Flink's
 * ParameterTool the jobs use, which Flink 2 moved (org.apache.flink.util; Flink 1: org.apache.flink.api.java.utils).
 */
final class JobArgs {
    private final Map<String, String> values = new HashMap<>();

    private JobArgs(String[] args) {
        if (args.length % 2 != 0) {
            throw new IllegalArgumentException("arguments are --name value pairs");
        }
        for (int i = 0; i < args.length; i += 2) {
            if (!args[i].startsWith("--") || args[i].length() == 2) {
                throw new IllegalArgumentException("not an argument name: " + args[i]);
            }
            values.put(args[i].substring(2), args[i + 1]);
        }
    }

    static JobArgs fromArgs(String[] args) {
        return new JobArgs(args);
    }

    boolean has(String name) {
        return values.containsKey(name);
    }

    String get(String name) {
        return values.get(name);
    }

    String get(String name, String otherwise) {
        return values.getOrDefault(name, otherwise);
    }

    String getRequired(String name) {
        String value = values.get(name);
        if (value == null) {
            throw new IllegalArgumentException("missing argument --" + name);
        }
        return value;
    }

    int getInt(String name, int otherwise) {
        return has(name) ? Integer.parseInt(values.get(name)) : otherwise;
    }

    long getLong(String name) {
        return Long.parseLong(getRequired(name));
    }

    long getLong(String name, long otherwise) {
        return has(name) ? Long.parseLong(values.get(name)) : otherwise;
    }

    double getDouble(String name) {
        return Double.parseDouble(getRequired(name));
    }
}
