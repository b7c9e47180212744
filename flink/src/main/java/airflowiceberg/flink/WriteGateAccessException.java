package airflowiceberg.flink;

/** The gate database refused the writer's user: fix its grants; a writer never takes this for an outage. */
public final class WriteGateAccessException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    WriteGateAccessException(String message, Throwable cause) {
        super(message, cause);
    }
}
