package airflowiceberg.flink;

import static org.mockito.ArgumentMatchers.anyInt;
import static org.mockito.ArgumentMatchers.anyLong;
import static org.mockito.ArgumentMatchers.anyString;
import static org.mockito.Mockito.doAnswer;
import static org.mockito.Mockito.mock;
import static org.mockito.Mockito.when;

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Predicate;

/**
 * A write gate's database for the unit tests: the gate row in memory, behind mocked JDBC objects.
 *
 * <p>It answers the writer's four statements as MySQL would, given the row the test sets: the check's
 * {@code paused} and {@code lease_seconds_left} are what the test says the database clock computed. It records
 * every statement a writer runs with its parameters, and fails connections and statements on demand. Tests wait
 * on it for what the gate thread has done ({@link #await}), never for a fixed time.
 */
final class FakeGateDatabase implements WriteGate.Connector {
    /** A statement as a writer ran it: its SQL and its parameters by position ({@code null}: SQL NULL). */
    record Call(String sql, Map<Integer, Object> parameters) {}

    private boolean gateRow;
    private boolean paused;
    private String leaseExpiresAt;
    private BigDecimal leaseSecondsLeft;
    private boolean gateTablesExist = true;
    private SQLException failure;
    private final List<Call> calls = new ArrayList<>();
    private final List<Connection> connections = new ArrayList<>();
    private int attempts;  // connections and statements tried, failed ones included
    private long lastCheckAnsweredAt;  // System.nanoTime() when a check last returned its row

    /** The gate row says: open. */
    synchronized void open() {
        gateRow = true;
        paused = false;
    }

    /** The gate row says: closed, its lease ending at {@code expiresAt}, {@code secondsLeft} from now. */
    synchronized void close(String expiresAt, String secondsLeft) {
        gateRow = true;
        paused = true;
        leaseExpiresAt = expiresAt;
        leaseSecondsLeft = new BigDecimal(secondsLeft);
    }

    /** The gate tables do not exist: no gate was ever closed on this database. */
    synchronized void dropGateTables() {
        gateTablesExist = false;
    }

    /** From now on every connection and statement fails with {@code error}; {@code null}: none does. */
    synchronized void fail(SQLException error) {
        failure = error;
        notifyAll();
    }

    synchronized List<Call> calls() {
        return List.copyOf(calls);
    }

    synchronized List<Connection> connections() {
        return List.copyOf(connections);
    }

    synchronized int attempts() {
        return attempts;
    }

    synchronized long lastCheckAnsweredAt() {
        return lastCheckAnsweredAt;
    }

    /** Wait until {@code condition} holds of this database, or fail after {@code timeout}. */
    synchronized void await(String what, Predicate<FakeGateDatabase> condition, Duration timeout)
            throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!condition.test(this)) {
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                throw new AssertionError("timed out after " + timeout + " waiting for " + what + "; statements: "
                        + calls);
            }
            wait(Math.max(1, left / 1_000_000));
        }
    }

    /** The number of times the writer has read the gate so far. */
    synchronized long checks() {
        return calls.stream().filter(call -> call.sql().equals(WriteGate.WRITER_CHECK_SQL)).count();
    }

    @Override
    public synchronized Connection connect() throws SQLException {
        attempt();
        Connection connection = mock(Connection.class);
        when(connection.prepareStatement(anyString())).thenAnswer(call -> statement(call.getArgument(0)));
        connections.add(connection);
        return connection;
    }

    private void attempt() throws SQLException {
        attempts++;
        notifyAll();
        if (failure != null) {
            throw failure;
        }
    }

    private PreparedStatement statement(String sql) throws SQLException {
        Map<Integer, Object> parameters = Collections.synchronizedMap(new HashMap<>());
        PreparedStatement statement = mock(PreparedStatement.class);
        doAnswer(call -> parameters.put(call.getArgument(0), call.getArgument(1)))
                .when(statement).setString(anyInt(), anyString());
        doAnswer(call -> parameters.put(call.getArgument(0), call.getArgument(1)))
                .when(statement).setLong(anyInt(), anyLong());
        doAnswer(call -> parameters.put(call.getArgument(0), null)).when(statement).setNull(anyInt(), anyInt());
        when(statement.executeUpdate()).thenAnswer(call -> update(sql, parameters));
        when(statement.executeQuery()).thenAnswer(call -> query(sql, parameters));
        return statement;
    }

    private synchronized int update(String sql, Map<Integer, Object> parameters) throws SQLException {
        record(sql, parameters);
        if (!gateTablesExist) {
            throw new SQLException("Table 'airflow_iceberg.iceberg_write_gate_writer' doesn't exist", "42S02", 1146);
        }
        if (sql.equals(WriteGate.WRITER_ACK_SQL)) {
            return gateRow && paused ? 1 : 0;  // the statement's join takes a closed gate with lease left only
        }
        return 1;
    }

    private synchronized ResultSet query(String sql, Map<Integer, Object> parameters) throws SQLException {
        record(sql, parameters);
        ResultSet row = mock(ResultSet.class);
        when(row.next()).thenReturn(gateRow, false);
        when(row.getBoolean("paused")).thenReturn(paused);
        when(row.getString("lease_expires_at")).thenReturn(paused ? leaseExpiresAt : null);
        when(row.getBigDecimal("lease_seconds_left")).thenReturn(paused ? leaseSecondsLeft : null);
        lastCheckAnsweredAt = System.nanoTime();
        return row;
    }

    private void record(String sql, Map<Integer, Object> parameters) throws SQLException {
        attempt();
        calls.add(new Call(sql, Collections.unmodifiableMap(new HashMap<>(parameters))));
        notifyAll();
    }
}
