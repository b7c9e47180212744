package airflowiceberg.flink;

import java.sql.SQLException;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One source subtask's view of its table's write gate, kept current by a thread of its own.
 *
 * <p>Every JDBC call and snapshot lookup runs on that gate thread, never on the task thread. The task thread
 * reads {@link #opened()} only: a future that is done while the writer may emit, and incomplete while it must
 * not (a new one for each pause, so its identity names the pause), completed by the gate thread when the gate
 * opens. Before the first look it is incomplete: the writer emits nothing before it has read the gate.
 *
 * <p>If the gate cannot be reached, the last verdict read stays in force until its lease ends, timed by this
 * JVM's monotonic clock from {@code lease_seconds_left}; a last verdict of "open" lets the writer go on. An
 * access-denied answer, or any other error that is not an outage, fails the subtask.
 */
final class GateWatch implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(GateWatch.class);

    private final GateConfig config;
    private final WriteGate gate;
    private final ScheduledThreadPoolExecutor thread;

    private volatile CompletableFuture<Void> open = new CompletableFuture<>();
    private volatile RuntimeException failure;

    // Used on the gate thread only.
    private Boolean pausedAsLogged;
    private boolean lastPaused;
    private long lastPauseEndsAt;  // System.nanoTime() when the last verdict's lease ends
    private boolean unreachable;
    private CompletableFuture<Void> acknowledgementOwed;  // the pause to acknowledge, until it is done
    private boolean snapshotIdsOpen;
    private boolean closed;

    GateWatch(GateConfig config, String writerId, String commitsAs) {
        this(config, new WriteGate(config, writerId, commitsAs));
    }

    GateWatch(GateConfig config, WriteGate gate) {
        this.config = config;
        this.gate = gate;
        String writerId = gate.writerId();
        this.thread = new ScheduledThreadPoolExecutor(1, task -> {
            Thread t = new Thread(task, "write-gate " + writerId);
            t.setDaemon(true);
            return t;
        });
    }

    /** Start reading the gate, at once and then every poke interval. */
    void start() {
        thread.execute(this::look);
    }

    /** Done while the writer may emit; the same incomplete future for the whole of one pause. */
    CompletableFuture<Void> opened() {
        return open;
    }

    /** True once an error stopped the gate thread. */
    boolean failed() {
        return failure != null;
    }

    /** Throw the error that stopped the gate thread, if any: the writer must not go on without its gate. */
    void checkHealthy() {
        RuntimeException error = failure;
        if (error != null) {
            throw error;
        }
    }

    /** Acknowledge {@code pause} (a future from {@link #opened()}) with the table's current snapshot id. */
    void acknowledge(CompletableFuture<Void> pause) {
        if (config.snapshotIds() == null) {
            return;  // nothing to say which snapshot is the last: compactions use their idle window
        }
        run(() -> {
            acknowledgementOwed = pause;
            acknowledgeIfOwed();
        });
    }

    /** Stop the gate thread; {@code leave}: tell the gate this writer has stopped for good. */
    void close(boolean leave) {
        Duration wait = config.timeout().multipliedBy(2).plusSeconds(1);
        try {
            thread.submit(() -> {
                closed = true;
                if (leave) {
                    try {
                        gate.leave();
                        LOG.info("{} left the write gate of {}", gate.writerId(), config.table());
                    } catch (SQLException | RuntimeException e) {
                        LOG.warn("{} could not leave the write gate of {}: {}", gate.writerId(), config.table(),
                                e.toString());
                    }
                }
                closeSnapshotIds();
                gate.close();
            }).get(wait.toMillis(), TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            LOG.warn("the write gate thread of {} did not stop cleanly: {}", gate.writerId(), e.toString());
        } finally {
            thread.shutdownNow();
        }
    }

    @Override
    public void close() {
        close(false);
    }

    private void run(Runnable task) {
        try {
            thread.execute(task);
        } catch (RejectedExecutionException e) {
            // closing: nothing more to do at the gate
        }
    }

    private void look() {
        if (closed || failure != null) {
            return;
        }
        long next = config.pokeInterval().toNanos();
        try {
            WriteGate.Verdict verdict = gate.look();
            long readAt = System.nanoTime();  // after the answer: the lease never ends earlier here than in MySQL
            if (unreachable) {
                LOG.info("the write gate of {} is reachable again", config.table());
                unreachable = false;
            }
            lastPaused = verdict.paused;
            lastPauseEndsAt = readAt + verdict.leaseNanosLeft;
            String said = verdict.paused ? "closed until " + verdict.leaseExpiresAt + " (database time)" : "open";
            apply(verdict.paused, said);
            if (verdict.paused) {
                acknowledgeIfOwed();
            }
        } catch (SQLException e) {
            if (!WriteGate.isOutage(e)) {
                fail(new IllegalStateException("reading the write gate of " + config.table() + " failed", e));
                return;
            }
            long now = System.nanoTime();
            boolean stillPaused = lastPaused && now - lastPauseEndsAt < 0;
            if (!unreachable) {
                LOG.warn("the write gate of {} is unreachable ({}); {}", config.table(), e.toString(),
                        stillPaused ? String.format("obeying its last verdict, closed, until its lease ends in %.1f s",
                                (lastPauseEndsAt - now) / 1e9) : "its last verdict was open");
                unreachable = true;
            }
            if (stillPaused) {
                next = Math.min(next, lastPauseEndsAt - now);  // look again the moment the lease ends
            }
            apply(stillPaused, stillPaused ? "closed (last verdict, MySQL unreachable)"
                    : lastPaused ? "open: the lease of its last verdict ended while MySQL was unreachable" : "open");
        } catch (RuntimeException e) {
            fail(e);
            return;
        }
        try {
            thread.schedule(this::look, Math.max(0, next), TimeUnit.NANOSECONDS);
        } catch (RejectedExecutionException e) {
            // closing
        }
    }

    private void apply(boolean paused, String reason) {
        if (pausedAsLogged == null || pausedAsLogged != paused) {
            LOG.info("write gate of {} {}: {} {}", config.table(), reason, gate.writerId(),
                    paused ? "emits nothing" : "emits");
            pausedAsLogged = paused;
        }
        CompletableFuture<Void> current = open;
        if (paused && current.isDone()) {
            open = new CompletableFuture<>();
        } else if (!paused && !current.isDone()) {
            current.complete(null);
        }
    }

    private void acknowledgeIfOwed() {
        CompletableFuture<Void> pause = acknowledgementOwed;
        if (pause == null || closed) {
            return;
        }
        if (pause != open || pause.isDone()) {
            acknowledgementOwed = null;  // that pause is over
            return;
        }
        Long snapshotId;
        try {
            if (!snapshotIdsOpen) {
                config.snapshotIds().open();
                snapshotIdsOpen = true;
            }
            snapshotId = config.snapshotIds().currentSnapshotId();
        } catch (Exception e) {
            LOG.warn("{} could not look up the current snapshot of {} ({}); acknowledging at its next look",
                    gate.writerId(), config.table(), e.toString());
            return;
        }
        try {
            boolean taken = gate.acknowledge(snapshotId);
            acknowledgementOwed = null;
            LOG.info("{} acknowledged the pause of {} with snapshot {}{}", gate.writerId(), config.table(), snapshotId,
                    taken ? "" : ", but the gate no longer pauses writers");
        } catch (SQLException e) {
            if (WriteGate.isOutage(e)) {
                LOG.warn("{} could not acknowledge the pause of {} ({}); trying again at its next look",
                        gate.writerId(), config.table(), e.toString());
            } else {
                fail(new IllegalStateException("acknowledging the write gate of " + config.table() + " failed", e));
            }
        } catch (RuntimeException e) {
            fail(e);
        }
    }

    private void fail(RuntimeException error) {
        LOG.error("{} stops: its write gate of {} failed", gate.writerId(), config.table(), error);
        failure = error;
        open.complete(null);  // wake the task thread, which then throws the error
    }

    private void closeSnapshotIds() {
        if (snapshotIdsOpen) {
            try {
                config.snapshotIds().close();
            } catch (Exception e) {
                LOG.warn("closing the snapshot lookup of {} failed: {}", config.table(), e.toString());
            }
        }
    }
}
