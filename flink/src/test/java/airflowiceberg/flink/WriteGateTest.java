package airflowiceberg.flink;

import static airflowiceberg.flink.WriteGate.WRITER_ACK_SQL;
import static airflowiceberg.flink.WriteGate.WRITER_CHECK_SQL;
import static airflowiceberg.flink.WriteGate.WRITER_LEAVE_SQL;
import static airflowiceberg.flink.WriteGate.WRITER_REGISTER_SQL;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.mockito.ArgumentMatchers.anyString;
import static org.mockito.Mockito.never;
import static org.mockito.Mockito.verify;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.SQLNonTransientConnectionException;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.junit.jupiter.api.Test;

import airflowiceberg.flink.FakeGateDatabase.Call;

/** The writer's statements of the gate protocol, and how it reads their answers (the gate rule). */
class WriteGateTest {
    private static final String TABLE = "lake.cdc.orders";
    private static final String WRITER = "orders-ingest#1";

    private final FakeGateDatabase db = new FakeGateDatabase();
    private static final String JOB = "flink.job-id=5e2c0b7a";

    private final WriteGate gate = new WriteGate(config(TABLE), WRITER, JOB, db);

    static GateConfig config(String table) {
        return GateConfig.builder().jdbcUrl("jdbc:mariadb://gate-db:3306/airflow_iceberg").user("writer")
                .password("Writer-secret-3").table(table).writerId("orders-ingest").build();
    }

    private static Map<Integer, Object> parameters(Object... values) {
        Map<Integer, Object> byPosition = new HashMap<>();
        for (int i = 0; i < values.length; i++) {
            byPosition.put(i + 1, values[i]);
        }
        return byPosition;
    }

    @Test
    void aLookRegistersTheWriterThenReadsTheGate() throws SQLException {
        db.open();

        assertFalse(gate.look().paused);

        String iceberg = IcebergRelease.onClassPath();
        assertEquals(List.of(new Call(WRITER_REGISTER_SQL, parameters(TABLE, WRITER, "upserts", iceberg, JOB)),
                new Call(WRITER_CHECK_SQL, parameters(WRITER, TABLE))), db.calls());
    }

    @Test
    void aClosedGatePausesTheWriterForTheLeaseTheDatabaseClockGives() throws SQLException {
        db.close("2026-11-25 22:15:00.250000", "12.500001");

        WriteGate.Verdict verdict = gate.look();

        assertTrue(verdict.paused);
        assertEquals("2026-11-25 22:15:00.250000", verdict.leaseExpiresAt);
        assertEquals(12_500_001_000L, verdict.leaseNanosLeft);
    }

    @Test
    void aLeaseThatEndedWhileTheAnswerTravelledCountsZeroNeverNegative() throws SQLException {
        db.close("2026-11-25 22:15:00.000000", "-0.250000");

        assertEquals(0, gate.look().leaseNanosLeft);
    }

    @Test
    void aTableThatWasNeverGatedReadsOpen() throws SQLException {
        WriteGate.Verdict verdict = gate.look();  // no gate row

        assertFalse(verdict.paused);
        assertEquals(2, db.calls().size());
    }

    @Test
    void withoutTheGateTablesNoGateWasEverClosedSoTheGateReadsOpen() throws SQLException {
        db.dropGateTables();

        assertFalse(gate.look().paused);
        assertEquals(List.of(WRITER_REGISTER_SQL), db.calls().stream().map(Call::sql).toList());
    }

    @Test
    void anAcknowledgementNamesTheSnapshotTheTableAndTheWriter() throws SQLException {
        db.close("2026-11-25 22:15:00.000000", "30");

        assertTrue(gate.acknowledge(8_812_345_678_901L));

        Call ack = db.calls().get(db.calls().size() - 1);
        assertEquals(new Call(WRITER_ACK_SQL, parameters(8_812_345_678_901L, TABLE, WRITER)), ack);
        assertEquals(WRITER_REGISTER_SQL, db.calls().get(0).sql(), "the acknowledgement updates the writer's row");
    }

    @Test
    void anAcknowledgementWithoutASnapshotSendsNull() throws SQLException {
        db.close("2026-11-25 22:15:00.000000", "30");

        gate.acknowledge(null);

        assertEquals(parameters(null, TABLE, WRITER), db.calls().get(db.calls().size() - 1).parameters());
    }

    @Test
    void anAcknowledgementAfterTheGateOpenedIsNotTaken() throws SQLException {
        db.open();

        assertFalse(gate.acknowledge(7L));
    }

    @Test
    void leavingTellsTheGateWhichWriterOfWhichTableStopped() throws SQLException {
        gate.leave();

        assertEquals(List.of(new Call(WRITER_LEAVE_SQL, parameters(TABLE, WRITER))), db.calls());
    }

    @Test
    void everyValueTravelsAsAParameterAndTheStatementsAreTheProtocolsOwn() throws SQLException {
        String table = "lake.cdc.o'brien; DROP TABLE iceberg_write_gate";
        FakeGateDatabase hostile = new FakeGateDatabase();
        WriteGate writer = new WriteGate(config(table), "w'1", null, hostile);
        hostile.close("2026-11-25 22:15:00.000000", "30");

        writer.look();
        writer.acknowledge(1L);
        writer.leave();

        Set<String> protocol = Set.of(WRITER_REGISTER_SQL, WRITER_CHECK_SQL, WRITER_ACK_SQL, WRITER_LEAVE_SQL);
        for (Call call : hostile.calls()) {
            assertTrue(protocol.contains(call.sql()), call.sql());
            assertFalse(call.sql().contains("o'brien"), call.sql());
            assertEquals(call.parameters().size(), call.sql().chars().filter(c -> c == '?').count(),
                    "every placeholder of " + call.sql() + " gets a value, and only those");
        }
        assertTrue(hostile.calls().stream().anyMatch(call -> call.parameters().containsValue(table)));
        for (Connection connection : hostile.connections()) {
            verify(connection, never()).createStatement();
            verify(connection, never()).prepareCall(anyString());
        }
    }

    @Test
    void theConnectionRunsInAutocommitSoTheRegistrationIsCommittedBeforeTheLook() throws SQLException {
        gate.look();

        verify(db.connections().get(0)).setAutoCommit(true);
    }

    @Test
    void aRefusedLoginNamesTheTableTheUserAndTheGrantsButNeverThePassword() {
        db.fail(new SQLException("Access denied for user 'writer'@'10.0.0.7' (using password: YES)", "28000", 1045));

        WriteGateAccessException error = assertThrows(WriteGateAccessException.class, gate::look);

        for (String part : Arrays.asList(TABLE, "'writer'", "jdbc:mariadb://gate-db:3306/airflow_iceberg",
                "SELECT on iceberg_write_gate", "SELECT, INSERT, UPDATE on iceberg_write_gate_writer")) {
            assertTrue(error.getMessage().contains(part), part + " not in: " + error.getMessage());
        }
        assertFalse(error.getMessage().contains("Writer-secret-3"));
    }

    @Test
    void afterAnErrorTheNextCallConnectsAnew() throws SQLException {
        db.open();
        gate.look();
        db.fail(new SQLNonTransientConnectionException("Connection reset", "08S01"));
        assertThrows(SQLException.class, gate::look);

        db.fail(null);
        gate.look();

        assertEquals(2, db.connections().size());
        verify(db.connections().get(0)).close();
    }
}
