package airflowiceberg.flink;

import java.io.Serializable;
import java.time.Duration;
import java.util.Objects;

/**
 * Where a {@link GatedSource} finds its table's write gate, and how it reports there.
 *
 * <p>Built with {@link #builder()}; {@code jdbcUrl}, {@code table} and {@code writerId} are required. The
 * password travels inside the job graph, as with Flink's own JDBC connector: read it from a secret when you
 * build the config, never from a command-line argument.
 */
public final class GateConfig implements Serializable {
    private static final long serialVersionUID = 1L;

    private final String jdbcUrl;
    private final String user;
    private final String password;
    private final String table;
    private final String writerId;
    private final Duration pokeInterval;
    private final Duration timeout;
    private final SnapshotIdSupplier snapshotIds;
    private final CommitKind commitKind;
    private final String icebergVersion;

    private GateConfig(Builder b) {
        this.jdbcUrl = required(b.jdbcUrl, "jdbcUrl");
        this.user = b.user;
        this.password = b.password;
        this.table = required(b.table, "table");
        this.writerId = required(b.writerId, "writerId");
        this.pokeInterval = positive(b.pokeInterval, "pokeInterval");
        this.timeout = positive(b.timeout, "timeout");
        this.snapshotIds = b.snapshotIds;
        this.commitKind = Objects.requireNonNull(b.commitKind, "commitKind");
        this.icebergVersion = b.icebergVersion;
        if (writerId.length() > 190) {  // the gate keeps 200 characters; "#" and the subtask index follow
            throw new IllegalArgumentException("writerId is longer than 190 characters: " + writerId);
        }
    }

    public static Builder builder() {
        return new Builder();
    }

    /** The gate database's JDBC URL, e.g. {@code jdbc:mariadb://mysql:3306/airflow_iceberg}. */
    public String jdbcUrl() {
        return jdbcUrl;
    }

    public String user() {
        return user;
    }

    String password() {
        return password;
    }

    /** The Iceberg table the job writes, {@code catalog.namespace.table}, as the gate names it. */
    public String table() {
        return table;
    }

    /** The job's name at the gate; each source subtask reports as {@code writerId + "#" + subtask index}. */
    public String writerId() {
        return writerId;
    }

    /** How often each subtask reads the gate. */
    public Duration pokeInterval() {
        return pokeInterval;
    }

    /** The longest a connection attempt or a statement may take before the gate counts as unreachable. */
    public Duration timeout() {
        return timeout;
    }

    /** Looks up the table's current snapshot for the acknowledgement; null: the source never acknowledges. */
    public SnapshotIdSupplier snapshotIds() {
        return snapshotIds;
    }

    /** What the job's commits do, as it declares them at the gate: {@link CommitKind#UPSERTS} unless told. */
    public CommitKind commitKind() {
        return commitKind;
    }

    /** The Iceberg release the job commits with, as it declares it: given, or the one on the class path. */
    public String icebergVersion() {
        return icebergVersion != null ? icebergVersion : IcebergRelease.onClassPath();
    }

    @Override
    public String toString() {
        return "GateConfig{jdbcUrl=" + jdbcUrl + ", user=" + user + ", table=" + table + ", writerId=" + writerId
                + ", pokeInterval=" + pokeInterval + ", timeout=" + timeout + ", snapshotIds=" + snapshotIds
                + ", commitKind=" + commitKind + ", icebergVersion=" + icebergVersion + "}";
    }

    private static String required(String value, String name) {
        if (value == null || value.isEmpty()) {
            throw new IllegalArgumentException("GateConfig needs " + name);
        }
        return value;
    }

    private static Duration positive(Duration value, String name) {
        Objects.requireNonNull(value, name);
        if (value.isNegative() || value.isZero()) {
            throw new IllegalArgumentException(name + " must be positive, got " + value);
        }
        return value;
    }

    /** Builds a {@link GateConfig}. */
    public static final class Builder {
        private String jdbcUrl;
        private String user = "";
        private String password = "";
        private String table;
        private String writerId;
        private Duration pokeInterval = Duration.ofSeconds(1);
        private Duration timeout = Duration.ofSeconds(5);
        private SnapshotIdSupplier snapshotIds;
        private CommitKind commitKind = CommitKind.UPSERTS;
        private String icebergVersion;

        private Builder() {}

        public Builder jdbcUrl(String jdbcUrl) {
            this.jdbcUrl = jdbcUrl;
            return this;
        }

        public Builder user(String user) {
            this.user = user;
            return this;
        }

        public Builder password(String password) {
            this.password = password;
            return this;
        }

        public Builder table(String table) {
            this.table = table;
            return this;
        }

        /** Keep it across restarts (the job's name, say): a restarted writer then reports under the same ids. */
        public Builder writerId(String writerId) {
            this.writerId = writerId;
            return this;
        }

        /** Default: one second. */
        public Builder pokeInterval(Duration pokeInterval) {
            this.pokeInterval = pokeInterval;
            return this;
        }

        /** Default: five seconds. */
        public Builder timeout(Duration timeout) {
            this.timeout = timeout;
            return this;
        }

        /** Without one the source never acknowledges, and compactions wait out their idle window instead. */
        public Builder snapshotIds(SnapshotIdSupplier snapshotIds) {
            this.snapshotIds = snapshotIds;
            return this;
        }

        /**
         * What the job's commits do. Default: {@link CommitKind#UPSERTS}, what Flink's Iceberg sink commits at most,
         * in append or upsert mode; say {@link CommitKind#APPENDS} for an append-only job, or
         * {@link CommitKind#ROW_LEVEL} for one that changes rows of existing files.
         */
        public Builder commitKind(CommitKind commitKind) {
            this.commitKind = commitKind;
            return this;
        }

        /** The kind by its name at the gate ({@code appends}, {@code upserts}, {@code row-level}). */
        public Builder commitKind(String commitKind) {
            this.commitKind = CommitKind.parse(commitKind);
            return this;
        }

        /** Default: the Iceberg release on the job's class path (its Iceberg sink's). */
        public Builder icebergVersion(String icebergVersion) {
            this.icebergVersion = icebergVersion;
            return this;
        }

        public GateConfig build() {
            return new GateConfig(this);
        }
    }
}
