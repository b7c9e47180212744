package airflowiceberg.flink;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.SocketTimeoutException;
import java.sql.SQLException;
import java.sql.SQLNonTransientConnectionException;
import java.sql.SQLSyntaxErrorException;
import java.sql.SQLTransactionRollbackException;
import java.sql.SQLTransientConnectionException;

import org.junit.jupiter.api.Test;

/**
 * Which errors are an outage (the writer keeps its last verdict until that verdict's lease ends), which are a
 * refused login (the writer fails: fix its grants), and which are neither (the writer fails: a bug).
 */
class OutageRuleTest {
    @Test
    void aConnectionErrorIsAnOutage() {
        assertTrue(WriteGate.isOutage(new SQLNonTransientConnectionException("Connection refused", "08000")));
        assertTrue(WriteGate.isOutage(new SQLException("Communications link failure", "08S01", 0)));
    }

    @Test
    void aServerGoingAwayOrBusyIsAnOutage() {
        assertTrue(WriteGate.isOutage(new SQLException("Lost connection to server during query", null, 2013)));
        assertTrue(WriteGate.isOutage(new SQLException("Server has gone away", "HY000", 2006)));
        assertTrue(WriteGate.isOutage(new SQLException("Server shutdown in progress", "HY000", 1053)));
        assertTrue(WriteGate.isOutage(new SQLTransactionRollbackException("Lock wait timeout", "40001", 1205)));
        assertTrue(WriteGate.isOutage(new SQLTransientConnectionException("Pool exhausted")));
    }

    @Test
    void aTimeoutDeepInTheDriverIsAnOutage() {
        SQLException wrapped = new SQLException("Socket error", "HY000", 0,
                new SocketTimeoutException("Read timed out"));
        assertTrue(WriteGate.isOutage(wrapped));
    }

    @Test
    void aRefusedLoginIsNeverAnOutage() {
        for (int code : new int[] {1044, 1045, 1142, 1143}) {
            SQLException denied = new SQLException("Access denied", "28000", code);
            assertTrue(WriteGate.isAccessDenied(denied), "code " + code);
            assertFalse(WriteGate.isOutage(denied), "code " + code);
        }
        assertTrue(WriteGate.isAccessDenied(new SQLException("wrapped", "HY000", 0,
                new SQLException("Access denied", "28000", 1045))));
    }

    @Test
    void aWrongStatementIsNeitherAnOutageNorARefusedLogin() {
        SQLException syntax = new SQLSyntaxErrorException("You have an error in your SQL syntax", "42000", 1064);
        assertFalse(WriteGate.isOutage(syntax));
        assertFalse(WriteGate.isAccessDenied(syntax));
        SQLException unknownColumn = new SQLException("Unknown column 'ack_at'", "42S22", 1054);
        assertFalse(WriteGate.isOutage(unknownColumn));
    }
}
