package airflowiceberg.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.mockito.ArgumentMatchers.any;
import static org.mockito.Mockito.mock;
import static org.mockito.Mockito.when;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Map;

import org.apache.flink.api.dag.Transformation;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.transformations.SourceTransformation;
import org.apache.flink.table.api.ValidationException;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.table.connector.source.ScanTableSource;
import org.apache.flink.table.connector.source.ScanTableSource.ScanRuntimeProvider;
import org.apache.flink.table.connector.source.abilities.SupportsReadingMetadata;
import org.apache.flink.table.connector.source.abilities.SupportsWatermarkPushDown;
import org.junit.jupiter.api.Test;

/**
 * The {@code gated} SQL connector, planned by Flink's own planner over Flink's Kafka connector (no broker: nothing
 * is read), and its refusals. tests/integration/test_cdc_pipeline.py runs it against a broker and a gate.
 */
class GatedTableSourceTest {
    private static final String PASSWORD = "Gate-secret-7";

    private static String ddl(String gateOptions) {
        return "CREATE TABLE changes (id BIGINT, v STRING, seq BIGINT,"
                + " at_ms TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL) WITH ("
                + " 'connector' = 'gated', 'gate.connector' = 'kafka', 'topic' = 'orders',"
                + " 'properties.bootstrap.servers' = 'localhost:1', 'properties.group.id' = 'orders-cdc',"
                + " 'scan.startup.mode' = 'earliest-offset', 'format' = 'json'" + gateOptions + ")";
    }

    private static final String GATE = ", 'gate.jdbc-url' = 'jdbc:mariadb://gate-db:3306/airflow_iceberg',"
            + " 'gate.username' = 'writer', 'gate.password' = '" + PASSWORD + "', 'gate.table' = 'lake.cdc.orders',"
            + " 'gate.writer-id' = 'orders-cdc', 'gate.poke-interval' = '500 ms'";

    private static StreamTableEnvironment tables() {
        return StreamTableEnvironment.create(StreamExecutionEnvironment.getExecutionEnvironment());
    }

    /** The source of the stream {@code SELECT} gives: the one SourceTransformation among its inputs. */
    private static SourceTransformation<?, ?, ?> sourceOf(StreamTableEnvironment tables, String query) {
        Deque<Transformation<?>> todo = new ArrayDeque<>();
        todo.add(tables.toDataStream(tables.sqlQuery(query)).getTransformation());
        while (!todo.isEmpty()) {
            Transformation<?> next = todo.pop();
            if (next instanceof SourceTransformation) {
                return (SourceTransformation<?, ?, ?>) next;
            }
            todo.addAll(next.getInputs());
        }
        throw new AssertionError("no source under " + query);
    }

    private static Throwable rootCause(Throwable error) {
        Throwable cause = error;
        while (cause.getCause() != null) {
            cause = cause.getCause();
        }
        return cause;
    }

    private static String messages(Throwable error) {
        StringBuilder all = new StringBuilder();
        for (Throwable cause = error; cause != null; cause = cause.getCause()) {
            all.append(cause.getMessage()).append('\n');
        }
        return all.toString();
    }

    @Test
    void aKafkaTableIsReadThroughAGatedKafkaSourceWithItsOwnOptionsAndMetadata() {
        StreamTableEnvironment tables = tables();
        tables.executeSql(ddl(GATE));

        SourceTransformation<?, ?, ?> source = sourceOf(tables, "SELECT id, v, seq, at_ms FROM changes");

        GatedSource<?, ?, ?> gated = assertInstanceOf(GatedSource.class, source.getSource());
        assertInstanceOf(KafkaSource.class, gated.wrappedSource());
        GateConfig gate = gated.gateConfig();
        assertEquals("lake.cdc.orders", gate.table());
        assertEquals("orders-cdc", gate.writerId());
        assertEquals("writer", gate.user());
        assertEquals(PASSWORD, gate.password());
        assertEquals(Duration.ofMillis(500), gate.pokeInterval());
        assertEquals(Duration.ofSeconds(5), gate.timeout());
        assertEquals(null, gate.snapshotIds(), "no gate.iceberg.*: the source never acknowledges");
        assertEquals(CommitKind.UPSERTS, gate.commitKind(), "what Flink's Iceberg sink commits at most");
        assertFalse(tables.explainSql("SELECT * FROM changes").contains(PASSWORD));
    }

    @Test
    void gateCommitKindSaysWhatTheJobCommitsAndAnUnknownOneIsNamed() {
        StreamTableEnvironment tables = tables();
        tables.executeSql(ddl(GATE + ", 'gate.commit-kind' = 'appends'"));
        GatedSource<?, ?, ?> gated = (GatedSource<?, ?, ?>) sourceOf(tables, "SELECT * FROM changes").getSource();
        assertEquals(CommitKind.APPENDS, gated.gateConfig().commitKind());

        StreamTableEnvironment other = tables();
        other.executeSql(ddl(GATE + ", 'gate.commit-kind' = 'merges'"));
        Throwable error = assertThrows(ValidationException.class, () -> sourceOf(other, "SELECT * FROM changes"));
        String expected = "unknown commit kind 'merges': a writer commits one of 'appends', 'upserts', 'row-level'";
        assertEquals(expected, rootCause(error).getMessage());
        boolean named = false;
        for (Throwable e = error; e != null; e = e.getCause()) {
            named |= ("Table default_catalog.default_database.changes: " + expected).equals(e.getMessage());
        }
        assertTrue(named, "the table's name comes with it");
    }

    @Test
    void gateIcebergOptionsAreTheCatalogThatAcknowledgesAPause() {
        StreamTableEnvironment tables = tables();
        tables.executeSql(ddl(GATE + ", 'gate.iceberg.catalog-type' = 'hadoop',"
                + " 'gate.iceberg.warehouse' = 'file:///tmp/lake', 'gate.iceberg.jdbc.password' = 'Catalog-secret'"));

        GatedSource<?, ?, ?> gated = (GatedSource<?, ?, ?>) sourceOf(tables, "SELECT * FROM changes").getSource();

        SnapshotIdSupplier ids = gated.gateConfig().snapshotIds();
        assertInstanceOf(IcebergSnapshotIds.class, ids);
        assertEquals("IcebergSnapshotIds{lake.cdc.orders}", ids.toString());
        assertFalse(gated.gateConfig().toString().contains("Catalog-secret"));
    }

    @Test
    void aMissingGateOptionIsNamedWhenTheQueryIsPlanned() {
        StreamTableEnvironment tables = tables();
        tables.executeSql(ddl(GATE.replace(", 'gate.writer-id' = 'orders-cdc'", "")));

        Throwable error = assertThrows(ValidationException.class, () -> sourceOf(tables, "SELECT * FROM changes"));

        assertEquals("Table default_catalog.default_database.changes ('connector' = 'gated') needs 'gate.writer-id'",
                rootCause(error).getMessage());
    }

    @Test
    void anUnknownGateOptionIsNamedWithTheKnownOnes() {
        StreamTableEnvironment tables = tables();
        tables.executeSql(ddl(GATE + ", 'gate.pokeinterval' = '1 s'"));

        Throwable error = assertThrows(ValidationException.class, () -> sourceOf(tables, "SELECT * FROM changes"));

        String message = rootCause(error).getMessage();
        assertTrue(message.startsWith("Table default_catalog.default_database.changes: unknown gate option(s) "
                + "[gate.pokeinterval]; the gate's options are [gate.commit-kind, gate.connector, gate.jdbc-url, "
                + "gate.password, gate.poke-interval, gate.table, gate.timeout, gate.username, gate.writer-id]"),
                message);
    }

    @Test
    void aBadDurationIsNamedWithItsValue() {
        StreamTableEnvironment tables = tables();
        tables.executeSql(ddl(GATE.replace("'500 ms'", "'soon'")));

        Throwable error = assertThrows(ValidationException.class, () -> sourceOf(tables, "SELECT * FROM changes"));

        assertTrue(messages(error).contains("Table default_catalog.default_database.changes: Could not parse value "
                + "'soon' for key 'gate.poke-interval'."), messages(error));
        assertFalse(messages(error).contains(PASSWORD), "Flink lists the table's options, the password masked");
    }

    @Test
    void theWrappedConnectorStillChecksItsOwnOptions() {
        StreamTableEnvironment tables = tables();
        tables.executeSql(ddl(GATE).replace("'scan.startup.mode' = 'earliest-offset'",
                "'scan.startup.mode' = 'yesterday'"));

        Throwable error = assertThrows(ValidationException.class, () -> sourceOf(tables, "SELECT * FROM changes"));

        assertTrue(messages(error).contains("'scan.startup.mode'"), messages(error));
    }

    @Test
    void theWrapperHasTheWrappedSourcesAbilitiesAndNoOthers() {
        ScanTableSource withMetadata = mock(ScanTableSource.class,
                org.mockito.Mockito.withSettings().extraInterfaces(SupportsReadingMetadata.class));
        GateConfig gate = GateConfig.builder().jdbcUrl("jdbc:mariadb://g/x").table("lake.cdc.t").writerId("w").build();

        ScanTableSource wrapped = GatedTableSource.wrap(withMetadata, gate, "kafka", getClass().getClassLoader());

        assertTrue(wrapped instanceof SupportsReadingMetadata);
        assertFalse(wrapped instanceof SupportsWatermarkPushDown);
        when(((SupportsReadingMetadata) withMetadata).listReadableMetadata()).thenReturn(Map.of());
        assertEquals(Map.of(), ((SupportsReadingMetadata) wrapped).listReadableMetadata());
    }

    @Test
    void aSourceThatIsNotFlip27IsRefusedNamingItsConnector() {
        ScanTableSource legacy = mock(ScanTableSource.class);
        when(legacy.getScanRuntimeProvider(any())).thenReturn(mock(ScanRuntimeProvider.class));
        GateConfig gate = GateConfig.builder().jdbcUrl("jdbc:mariadb://g/x").table("lake.cdc.t").writerId("w").build();
        ScanTableSource wrapped = GatedTableSource.wrap(legacy, gate, "legacy-jdbc", getClass().getClassLoader());

        ValidationException error = assertThrows(ValidationException.class,
                () -> wrapped.getScanRuntimeProvider(null));

        assertTrue(error.getMessage().startsWith("The connector 'legacy-jdbc' of gate.connector reads with a "),
                error.getMessage());
        assertTrue(error.getMessage().endsWith(", not a FLIP-27 Source: only a FLIP-27 source (Kafka's, MySQL "
                + "CDC's, ...) can be gated"), error.getMessage());
    }
}
