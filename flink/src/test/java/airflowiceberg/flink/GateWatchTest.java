package airflowiceberg.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.SQLException;
import java.sql.SQLNonTransientConnectionException;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import airflowiceberg.flink.FakeGateDatabase.Call;

/**
 * One subtask's view of the gate over time: when the writer may emit (the gate rule), what it obeys while MySQL
 * cannot be reached (the outage rule), and when it stops for good. {@code opened()} is done while the writer may
 * emit, and one incomplete future stands for the whole of one pause.
 */
class GateWatchTest {
    private static final String TABLE = "lake.cdc.orders";
    private static final Duration WAIT = Duration.ofSeconds(10);
    private static final Duration POKE = Duration.ofMillis(20);

    private final FakeGateDatabase db = new FakeGateDatabase();
    private GateWatch watch;

    private GateWatch watch(SnapshotIdSupplier snapshotIds) {
        GateConfig config = GateConfig.builder().jdbcUrl("jdbc:mariadb://gate-db:3306/airflow_iceberg")
                .user("writer").table(TABLE).writerId("orders-ingest").pokeInterval(POKE).snapshotIds(snapshotIds)
                .build();
        watch = new GateWatch(config, new WriteGate(config, "orders-ingest#0", null, db));
        return watch;
    }

    @AfterEach
    void stop() {
        if (watch != null) {
            watch.close();
        }
    }

    /** Wait until the watch has read the gate {@code more} more times than it had when called. */
    private void awaitLooks(int more) throws InterruptedException {
        long target = db.checks() + more;
        db.await(target + " looks at the gate", d -> d.checks() >= target, WAIT);
    }

    private static void awaitDone(CompletableFuture<Void> future) throws Exception {
        future.get(WAIT.toMillis(), TimeUnit.MILLISECONDS);
    }

    @Test
    void theWriterEmitsNothingBeforeItHasReadTheGate() {
        db.open();

        assertFalse(watch(null).opened().isDone());
    }

    @Test
    void anOpenGateLetsTheWriterEmit() throws Exception {
        db.open();
        watch(null).start();

        awaitDone(watch.opened());
    }

    @Test
    void aClosedGateHoldsTheWriterForTheWholePauseAndReleasesItWhenItOpens() throws Exception {
        db.close("2026-11-25 22:15:00.000000", "60");
        watch(null).start();
        awaitLooks(1);
        CompletableFuture<Void> pause = watch.opened();

        awaitLooks(3);
        assertSame(pause, watch.opened(), "one future for the whole pause");
        assertFalse(pause.isDone());

        db.open();
        awaitDone(pause);
    }

    @Test
    void eachPauseHasAFutureOfItsOwn() throws Exception {
        db.close("2026-11-25 22:15:00.000000", "60");
        watch(null).start();
        awaitLooks(1);
        CompletableFuture<Void> first = watch.opened();
        db.open();
        awaitDone(first);

        db.close("2026-11-25 22:25:00.000000", "60");
        awaitLooks(2);

        assertNotSame(first, watch.opened());
        assertFalse(watch.opened().isDone());
    }

    @Test
    void duringAnOutageAClosedGateHoldsTheWriterUntilItsLeaseEndsThenLetsItGo() throws Exception {
        db.close("2026-11-25 22:15:00.000000", "1.5");
        watch(null).start();
        awaitLooks(1);
        CompletableFuture<Void> pause = watch.opened();
        db.fail(new SQLNonTransientConnectionException("Connection refused", "08000"));
        long answeredAt = db.lastCheckAnsweredAt();

        awaitDone(pause);

        long heldNanos = System.nanoTime() - answeredAt;
        assertTrue(heldNanos >= 1_500_000_000L, "released " + heldNanos / 1e9 + " s after the answer, lease 1.5 s");
        assertFalse(watch.failed(), "an outage never stops the writer");
    }

    @Test
    void duringAnOutageAnOpenGateStaysOpenAndTheWriterKeepsLooking() throws Exception {
        db.open();
        watch(null).start();
        awaitDone(watch.opened());
        CompletableFuture<Void> open = watch.opened();
        int before = db.attempts();

        db.fail(new SQLException("Lost connection to server during query", null, 2013));
        db.await("three failed looks", d -> d.attempts() >= before + 3, WAIT);

        assertSame(open, watch.opened());
        assertFalse(watch.failed());
    }

    @Test
    void aRefusedLoginStopsTheWriterAndWakesItsTaskThreadToSaySo() throws Exception {
        db.fail(new SQLException("Access denied for user 'writer'", "28000", 1045));
        watch(null).start();

        awaitDone(watch.opened());  // the task thread wakes, and learns why from checkHealthy()

        assertTrue(watch.failed());
        WriteGateAccessException error = assertThrows(WriteGateAccessException.class, watch::checkHealthy);
        assertTrue(error.getMessage().contains(TABLE), error.getMessage());
    }

    @Test
    void anyOtherErrorStopsTheWriterToo() throws Exception {
        db.fail(new SQLException("Unknown column 'ack_at' in 'field list'", "42S22", 1054));
        watch(null).start();

        awaitDone(watch.opened());

        assertTrue(watch.failed());
        assertThrows(IllegalStateException.class, watch::checkHealthy);
    }

    @Test
    void aPauseIsAcknowledgedWithTheTablesCurrentSnapshot() throws Exception {
        db.close("2026-11-25 22:15:00.000000", "60");
        watch(() -> 6_100_200_300L).start();
        awaitLooks(1);

        watch.acknowledge(watch.opened());

        db.await("the acknowledgement", d -> d.calls().stream().anyMatch(c -> c.sql().equals(WriteGate.WRITER_ACK_SQL)),
                WAIT);
        Call ack = db.calls().stream().filter(c -> c.sql().equals(WriteGate.WRITER_ACK_SQL)).findFirst().get();
        assertEquals(6_100_200_300L, ack.parameters().get(1));
    }

    @Test
    void aWriterWithoutASnapshotLookupNeverAcknowledges() throws Exception {
        db.close("2026-11-25 22:15:00.000000", "60");
        watch(null).start();
        awaitLooks(1);

        watch.acknowledge(watch.opened());
        awaitLooks(3);

        assertTrue(db.calls().stream().noneMatch(c -> c.sql().equals(WriteGate.WRITER_ACK_SQL)));
    }

    @Test
    void aWriterWhoseInputEndedLeavesTheGate() throws Exception {
        db.open();
        watch(null).start();
        awaitDone(watch.opened());

        watch.close(true);

        assertTrue(db.calls().stream().anyMatch(c -> c.sql().equals(WriteGate.WRITER_LEAVE_SQL)));
    }
}
