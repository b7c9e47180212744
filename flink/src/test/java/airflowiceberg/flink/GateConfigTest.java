package airflowiceberg.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;

import org.junit.jupiter.api.Test;

/** A bad gate config fails when the job is built, naming what is wrong, and never shows its password. */
class GateConfigTest {
    private static GateConfig.Builder valid() {
        return GateConfig.builder().jdbcUrl("jdbc:mariadb://gate-db:3306/airflow_iceberg").user("writer")
                .password("Writer-secret-3").table("lake.cdc.orders").writerId("orders-ingest");
    }

    @Test
    void theDefaultsLookOnceASecondAndGiveUpOnAStatementAfterFiveSeconds() {
        GateConfig config = valid().build();

        assertEquals(Duration.ofSeconds(1), config.pokeInterval());
        assertEquals(Duration.ofSeconds(5), config.timeout());
    }

    @Test
    void eachRequiredSettingIsNamedWhenMissing() {
        assertEquals("GateConfig needs jdbcUrl",
                assertThrows(IllegalArgumentException.class, () -> valid().jdbcUrl(null).build()).getMessage());
        assertEquals("GateConfig needs table",
                assertThrows(IllegalArgumentException.class, () -> valid().table("").build()).getMessage());
        assertEquals("GateConfig needs writerId",
                assertThrows(IllegalArgumentException.class, () -> valid().writerId(null).build()).getMessage());
    }

    @Test
    void intervalsMustBePositiveAndTheErrorShowsTheValue() {
        IllegalArgumentException error = assertThrows(IllegalArgumentException.class,
                () -> valid().pokeInterval(Duration.ZERO).build());
        assertEquals("pokeInterval must be positive, got PT0S", error.getMessage());
        error = assertThrows(IllegalArgumentException.class, () -> valid().timeout(Duration.ofSeconds(-1)).build());
        assertEquals("timeout must be positive, got PT-1S", error.getMessage());
    }

    @Test
    void aWriterIdLeavesRoomForTheSubtaskIndexInTheGatesColumn() {
        valid().writerId("w".repeat(190)).build();

        IllegalArgumentException error = assertThrows(IllegalArgumentException.class,
                () -> valid().writerId("w".repeat(191)).build());
        assertTrue(error.getMessage().startsWith("writerId is longer than 190 characters"), error.getMessage());
    }

    @Test
    void thePasswordNeverAppearsWhenTheConfigIsPrinted() {
        String shown = valid().build().toString();

        assertFalse(shown.contains("Writer-secret-3"), shown);
        assertTrue(shown.contains("lake.cdc.orders") && shown.contains("user=writer"), shown);
    }

    @Test
    void aWriterDeclaresUpsertsWithTheIcebergOnItsClassPathUnlessTold() {
        GateConfig config = valid().build();

        assertEquals(CommitKind.UPSERTS, config.commitKind());
        assertEquals(org.apache.iceberg.IcebergBuild.version(), config.icebergVersion());
        GateConfig told = valid().commitKind("appends").icebergVersion("1.5.2").build();
        assertEquals(CommitKind.APPENDS, told.commitKind());
        assertEquals("1.5.2", told.icebergVersion());
        assertEquals(CommitKind.ROW_LEVEL, valid().commitKind("row-level").build().commitKind());
    }

    @Test
    void anUnknownCommitKindIsRefusedNamingItAndTheKinds() {
        IllegalArgumentException error = assertThrows(IllegalArgumentException.class,
                () -> valid().commitKind("merges"));
        assertEquals("unknown commit kind 'merges': a writer commits one of 'appends', 'upserts', 'row-level'",
                error.getMessage());
    }
}
