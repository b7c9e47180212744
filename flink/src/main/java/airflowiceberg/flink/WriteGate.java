package airflowiceberg.flink;

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.Driver;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLRecoverableException;
import java.sql.SQLTransientException;
import java.sql.Types;
import java.util.Properties;
import java.util.ServiceConfigurationError;
import java.util.ServiceLoader;
import java.util.Set;

/**
 * One writer's statements of the write-gate protocol, over JDBC (docs/write-gate-protocol.md).
 *
 * <p>The statements are those of {@code airflow_iceberg/core/gate_protocol.py}, with {@code ?} for pymysql's
 * {@code %s}; {@code tests/unit/core/test_gate_protocol.py} holds the two together. The writer registers with what
 * it commits ({@link GateConfig#commitKind()}, its Iceberg release, and the job id its snapshots carry), and a
 * closing that cannot conflict with those lets it keep committing: its check then reads open. The connection runs in
 * autocommit, so the registration is committed before the look. Not thread-safe: a reader's gate thread is its only
 * user.
 */
final class WriteGate implements AutoCloseable {
    static final String WRITER_REGISTER_SQL = "INSERT INTO iceberg_write_gate_writer\n"
            + "    (table_name, writer_id, seen_at, commit_kind, iceberg_version, commits_as)\n"
            + "VALUES (?, ?, NOW(6), ?, ?, ?)\n"
            + "ON DUPLICATE KEY UPDATE\n"
            + "    exempt_closed_at = IF(commit_kind <=> VALUES(commit_kind) AND iceberg_version <=> VALUES(iceberg_version)\n"
            + "                          AND commits_as <=> VALUES(commits_as), exempt_closed_at, NULL),\n"
            + "    seen_at = NOW(6), commit_kind = VALUES(commit_kind), iceberg_version = VALUES(iceberg_version),\n"
            + "    commits_as = VALUES(commits_as)";

    static final String WRITER_CHECK_SQL = "SELECT g.state = 'closed' AND g.lease_expires_at > NOW(6)\n"
            + "           AND NOT (w.exempt_closed_at <=> g.closed_at) AS paused,\n"
            + "       g.lease_expires_at,\n"
            + "       TIMESTAMPDIFF(MICROSECOND, NOW(6), g.lease_expires_at) / 1000000 AS lease_seconds_left\n"
            + "FROM iceberg_write_gate g\n"
            + "LEFT JOIN iceberg_write_gate_writer w ON w.table_name = g.table_name AND w.writer_id = ?\n"
            + "WHERE g.table_name = ?";

    static final String WRITER_ACK_SQL = "UPDATE iceberg_write_gate_writer w JOIN iceberg_write_gate g ON g.table_name = w.table_name\n"
            + "SET w.ack_at = NOW(6), w.ack_snapshot_id = ?, w.seen_at = NOW(6)\n"
            + "WHERE w.table_name = ? AND w.writer_id = ? AND g.state = 'closed' AND g.lease_expires_at > NOW(6)";

    static final String WRITER_LEAVE_SQL = "UPDATE iceberg_write_gate_writer SET seen_at = NULL, ack_at = NULL\n"
            + "WHERE table_name = ? AND writer_id = ?";

    /** MySQL error: the gate tables do not exist, so no gate was ever closed. */
    private static final int NO_SUCH_TABLE = 1146;
    /** Database, login, table and column access denied: a misconfiguration, never an outage. */
    private static final Set<Integer> ACCESS_DENIED = Set.of(1044, 1045, 1142, 1143);
    /** Server errors that say the server is going away or busy, not that a statement is wrong. */
    private static final Set<Integer> SERVER_AWAY = Set.of(1053, 1205, 1213, 1927, 2002, 2003, 2006, 2013);

    /** What the gate said: pause or not, and for how long at most, by the database clock. */
    static final class Verdict {
        static final Verdict OPEN = new Verdict(false, null, 0);

        final boolean paused;
        final String leaseExpiresAt;
        final long leaseNanosLeft;

        Verdict(boolean paused, String leaseExpiresAt, long leaseNanosLeft) {
            this.paused = paused;
            this.leaseExpiresAt = leaseExpiresAt;
            this.leaseNanosLeft = leaseNanosLeft;
        }
    }

    /** Opens a connection to the gate database. */
    interface Connector {
        Connection connect() throws SQLException;
    }

    private final GateConfig config;
    private final String writerId;
    private final String commitsAs;
    private final String icebergVersion;
    private final Connector connector;
    private Connection connection;

    /** {@code commitsAs}: the {@code key=value} the job's snapshots carry ({@code flink.job-id=...}), or null. */
    WriteGate(GateConfig config, String writerId, String commitsAs) {
        this(config, writerId, commitsAs, () -> connect(config));
    }

    /** With {@code connector} in place of the JDBC driver for {@code config.jdbcUrl()}: the tests' fake database. */
    WriteGate(GateConfig config, String writerId, String commitsAs, Connector connector) {
        this.config = config;
        this.writerId = writerId;
        this.commitsAs = commitsAs;
        this.icebergVersion = config.icebergVersion();
        this.connector = connector;
    }

    String writerId() {
        return writerId;
    }

    /** Register, then read the gate. A missing gate table reads as open. */
    Verdict look() throws SQLException {
        return guarded(db -> {
            if (!register(db)) {
                return Verdict.OPEN;
            }
            try (PreparedStatement check = db.prepareStatement(WRITER_CHECK_SQL)) {
                check.setString(1, writerId);
                check.setString(2, config.table());
                try (ResultSet row = check.executeQuery()) {
                    if (!row.next() || !row.getBoolean("paused")) {
                        return Verdict.OPEN;  // no row: the table was never gated
                    }
                    BigDecimal left = row.getBigDecimal("lease_seconds_left");
                    long nanos = left == null ? 0 : left.movePointRight(9).longValue();
                    return new Verdict(true, row.getString("lease_expires_at"), Math.max(0, nanos));
                }
            } catch (SQLException e) {
                if (e.getErrorCode() == NO_SUCH_TABLE) {
                    return Verdict.OPEN;
                }
                throw e;
            }
        });
    }

    /** Acknowledge the pause with {@code snapshotId}; false if the gate no longer pauses writers. */
    boolean acknowledge(Long snapshotId) throws SQLException {
        return guarded(db -> {
            register(db);  // the acknowledgement updates this writer's own row
            try (PreparedStatement ack = db.prepareStatement(WRITER_ACK_SQL)) {
                if (snapshotId == null) {
                    ack.setNull(1, Types.BIGINT);
                } else {
                    ack.setLong(1, snapshotId);
                }
                ack.setString(2, config.table());
                ack.setString(3, writerId);
                return ack.executeUpdate() >= 1;
            }
        });
    }

    /** Tell the gate this writer has stopped for good, so compactions stop waiting for it. */
    void leave() throws SQLException {
        guarded(db -> {
            try (PreparedStatement leave = db.prepareStatement(WRITER_LEAVE_SQL)) {
                leave.setString(1, config.table());
                leave.setString(2, writerId);
                return leave.executeUpdate();
            }
        });
    }

    /** True if the error means the gate cannot be reached now: the writer keeps its last verdict. */
    static boolean isOutage(SQLException error) {
        for (Throwable e = error; e != null; e = e.getCause()) {
            if (e instanceof SQLException) {
                SQLException sql = (SQLException) e;
                String state = sql.getSQLState();
                if ((state != null && state.startsWith("08")) || SERVER_AWAY.contains(sql.getErrorCode())
                        || sql instanceof SQLTransientException || sql instanceof SQLRecoverableException) {
                    return true;
                }
            } else if (e instanceof java.io.IOException) {
                return true;
            }
        }
        return false;
    }

    static boolean isAccessDenied(SQLException error) {
        for (Throwable e = error; e != null; e = e.getCause()) {
            if (e instanceof SQLException && ACCESS_DENIED.contains(((SQLException) e).getErrorCode())) {
                return true;
            }
        }
        return false;
    }

    private boolean register(Connection db) throws SQLException {
        try (PreparedStatement register = db.prepareStatement(WRITER_REGISTER_SQL)) {
            register.setString(1, config.table());
            register.setString(2, writerId);
            register.setString(3, config.commitKind().value());
            setNullable(register, 4, icebergVersion);
            setNullable(register, 5, commitsAs);
            register.executeUpdate();
            return true;
        } catch (SQLException e) {
            if (e.getErrorCode() == NO_SUCH_TABLE) {
                return false;  // no gate tables: nothing is gated, nobody waits for this writer
            }
            throw e;
        }
    }

    private static void setNullable(PreparedStatement statement, int index, String value) throws SQLException {
        if (value == null) {
            statement.setNull(index, Types.VARCHAR);
        } else {
            statement.setString(index, value);
        }
    }

    private interface Work<R> {
        R run(Connection db) throws SQLException;
    }

    /** Run {@code work} on the connection; after an error drop it, so that the next call connects anew. */
    private <R> R guarded(Work<R> work) throws SQLException {
        try {
            if (connection == null) {
                connection = connector.connect();
                connection.setAutoCommit(true);
            }
            return work.run(connection);
        } catch (SQLException e) {
            if (isAccessDenied(e)) {
                throw new WriteGateAccessException("the write gate of " + config.table() + " at " + config.jdbcUrl()
                        + " refused user '" + config.user() + "' (" + e.getMessage() + "): a writer needs SELECT on "
                        + "iceberg_write_gate and SELECT, INSERT, UPDATE on iceberg_write_gate_writer", e);
            }
            close();
            throw e;
        }
    }

    private static Connection connect(GateConfig config) throws SQLException {
        Properties properties = new Properties();
        properties.setProperty("user", config.user());
        properties.setProperty("password", config.password());
        String millis = Long.toString(config.timeout().toMillis());
        properties.setProperty("connectTimeout", millis);  // both MariaDB's and MySQL's drivers read these two
        properties.setProperty("socketTimeout", millis);
        Connection db = null;
        // The driver from this class's own class loader (a job's user jar), which DriverManager may not see.
        try {
            for (Driver driver : ServiceLoader.load(Driver.class, WriteGate.class.getClassLoader())) {
                if (driver.acceptsURL(config.jdbcUrl())) {
                    db = driver.connect(config.jdbcUrl(), properties);
                    break;
                }
            }
        } catch (ServiceConfigurationError e) {
            db = null;  // a broken driver entry elsewhere on the class path: fall back to DriverManager
        }
        if (db == null) {
            db = DriverManager.getConnection(config.jdbcUrl(), properties);
        }
        return db;
    }

    @Override
    public void close() {
        if (connection != null) {
            try {
                connection.close();
            } catch (SQLException ignored) {
                // already broken; nothing to release
            }
            connection = null;
        }
    }
}
