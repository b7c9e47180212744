package airflowiceberg.flink;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.table.api.ValidationException;
import org.apache.flink.table.connector.source.DynamicTableSource;
import org.apache.flink.table.connector.source.ScanTableSource;
import org.apache.flink.table.factories.DynamicTableSourceFactory;
import org.apache.flink.table.factories.FactoryUtil;

/**
 * The {@code gated} connector of Flink SQL: any connector whose scan is a FLIP-27 source, read through a
 * {@link GatedSource}, so that an {@code INSERT INTO <iceberg table> SELECT ... FROM} it obeys the table's write gate.
 *
 * <pre>{@code
 * CREATE TABLE orders_changes (id BIGINT, v STRING, seq BIGINT) WITH (
 *   'connector' = 'gated',
 *   'gate.connector' = 'kafka',                    -- the connector it reads through; its options as they were:
 *   'topic' = 'orders', 'properties.bootstrap.servers' = 'kafka:9092', 'format' = 'debezium-json',
 *   'gate.jdbc-url' = 'jdbc:mariadb://gate-db:3306/airflow_iceberg',
 *   'gate.username' = 'writer', 'gate.password' = '...',
 *   'gate.table' = 'lake.cdc.orders',              -- the Iceberg table the job writes, as the gate names it
 *   'gate.writer-id' = 'orders-cdc',
 *   'gate.iceberg.catalog-impl' = 'org.apache.iceberg.jdbc.JdbcCatalog',   -- the catalog of gate.table: its
 *   'gate.iceberg.uri' = 'jdbc:mariadb://catalog-db:3306/iceberg_catalog', -- snapshot acknowledges a pause
 *   'gate.iceberg.warehouse' = 's3://lake/warehouse'
 * );
 * }</pre>
 *
 * <p>Every option outside {@code gate.} goes to the wrapped connector unchanged, with {@code connector} set to
 * {@code gate.connector}; the wrapped connector's abilities (metadata columns, watermark and projection push-down)
 * stay as they are. {@code gate.iceberg.*} are the Iceberg catalog's properties, as Spark's
 * {@code spark.sql.catalog.<name>.*} or Flink's {@code CREATE CATALOG} take them ({@code catalog-type} or
 * {@code type}, or {@code catalog-impl}; {@code uri}, {@code warehouse}, {@code jdbc.user}, ...); the catalog's
 * name is the first part of {@code gate.table}. Without them the source never acknowledges, and compactions wait
 * out their idle window instead. {@code gate.commit-kind} says what the job commits ({@code upserts} by default:
 * what Flink's Iceberg sink commits at most, in append or upsert mode). A bad or unknown {@code gate.} option fails
 * the statement's planning, before the job starts, naming it.
 */
public final class GatedTableSourceFactory implements DynamicTableSourceFactory {
    /** The connector's name in {@code 'connector' = 'gated'}. */
    public static final String IDENTIFIER = "gated";
    /** Every option of the gate starts with this; all others are the wrapped connector's. */
    public static final String PREFIX = "gate.";
    /** The Iceberg catalog's properties: {@code gate.iceberg.uri}, ... */
    public static final String ICEBERG_PREFIX = PREFIX + "iceberg.";

    public static final ConfigOption<String> CONNECTOR = ConfigOptions.key(PREFIX + "connector").stringType()
            .noDefaultValue().withDescription("The connector the gated source reads through, e.g. 'kafka'.");
    public static final ConfigOption<String> JDBC_URL = ConfigOptions.key(PREFIX + "jdbc-url").stringType()
            .noDefaultValue().withDescription("The gate database's JDBC URL.");
    public static final ConfigOption<String> USERNAME = ConfigOptions.key(PREFIX + "username").stringType()
            .defaultValue("");
    public static final ConfigOption<String> PASSWORD = ConfigOptions.key(PREFIX + "password").stringType()
            .defaultValue("");
    public static final ConfigOption<String> TABLE = ConfigOptions.key(PREFIX + "table").stringType()
            .noDefaultValue().withDescription("The Iceberg table the job writes, catalog.namespace.table.");
    public static final ConfigOption<String> WRITER_ID = ConfigOptions.key(PREFIX + "writer-id").stringType()
            .noDefaultValue().withDescription("The job's name at the gate; each subtask adds '#<index>'.");
    public static final ConfigOption<Duration> POKE_INTERVAL = ConfigOptions.key(PREFIX + "poke-interval")
            .durationType().defaultValue(Duration.ofSeconds(1));
    public static final ConfigOption<Duration> TIMEOUT = ConfigOptions.key(PREFIX + "timeout").durationType()
            .defaultValue(Duration.ofSeconds(5));
    public static final ConfigOption<String> COMMIT_KIND = ConfigOptions.key(PREFIX + "commit-kind").stringType()
            .defaultValue(CommitKind.UPSERTS.value()).withDescription("What the job's commits do: 'appends', "
                    + "'upserts' (Flink's Iceberg sink, append or upsert mode: the default) or 'row-level'.");

    private static final Set<ConfigOption<?>> REQUIRED = Set.of(CONNECTOR, JDBC_URL, TABLE, WRITER_ID);
    private static final Set<ConfigOption<?>> OPTIONAL = Set.of(USERNAME, PASSWORD, POKE_INTERVAL, TIMEOUT,
            COMMIT_KIND);

    @Override
    public String factoryIdentifier() {
        return IDENTIFIER;
    }

    /** Checked here, not by Flink: every option outside {@code gate.} is the wrapped connector's to check. */
    @Override
    public Set<ConfigOption<?>> requiredOptions() {
        return Set.of();
    }

    @Override
    public Set<ConfigOption<?>> optionalOptions() {
        return Set.of();
    }

    @Override
    public DynamicTableSource createDynamicTableSource(Context context) {
        String name = context.getObjectIdentifier().asSummaryString();
        Options options = Options.split(name, context.getCatalogTable().getOptions());
        GateConfig gate = options.gateConfig();
        DynamicTableSource inner = FactoryUtil.createDynamicTableSource(null, context.getObjectIdentifier(),
                context.getCatalogTable().copy(options.wrapped), context.getEnrichmentOptions(),
                context.getConfiguration(), context.getClassLoader(), context.isTemporary());
        if (!(inner instanceof ScanTableSource)) {
            throw new ValidationException("Table " + name + ": the connector '" + options.connector
                    + "' of gate.connector has no scan source to gate (" + inner.getClass().getName() + ")");
        }
        return GatedTableSource.wrap((ScanTableSource) inner, gate, options.connector, context.getClassLoader());
    }

    /** A gated table's options, split into the gate's and the wrapped connector's, each checked. */
    static final class Options {
        final String table;
        final String connector;
        final Configuration gate;
        final Map<String, String> iceberg;
        final Map<String, String> wrapped;

        private Options(String table, Configuration gate, Map<String, String> iceberg, Map<String, String> wrapped) {
            this.table = table;
            this.connector = gate.get(CONNECTOR);
            this.gate = gate;
            this.iceberg = iceberg;
            this.wrapped = wrapped;
        }

        static Options split(String table, Map<String, String> all) {
            Map<String, String> gate = new TreeMap<>();
            Map<String, String> iceberg = new TreeMap<>();
            Map<String, String> wrapped = new HashMap<>();
            for (Map.Entry<String, String> option : all.entrySet()) {
                String key = option.getKey();
                if (key.startsWith(ICEBERG_PREFIX)) {
                    iceberg.put(key.substring(ICEBERG_PREFIX.length()), option.getValue());
                } else if (key.startsWith(PREFIX)) {
                    gate.put(key, option.getValue());
                } else if (!key.equals(FactoryUtil.CONNECTOR.key())) {
                    wrapped.put(key, option.getValue());
                }
            }
            Set<String> known = new TreeSet<>();
            for (ConfigOption<?> option : REQUIRED) {
                known.add(option.key());
                String value = gate.get(option.key());
                if (value == null || value.isBlank()) {
                    throw new ValidationException("Table " + table + " ('connector' = '" + IDENTIFIER + "') needs '"
                            + option.key() + "'");
                }
            }
            OPTIONAL.forEach(option -> known.add(option.key()));
            Set<String> unknown = new TreeSet<>(gate.keySet());
            unknown.removeAll(known);
            if (!unknown.isEmpty()) {
                throw new ValidationException("Table " + table + ": unknown gate option(s) " + unknown
                        + "; the gate's options are " + known + " and '" + ICEBERG_PREFIX + "*'");
            }
            String connector = gate.get(CONNECTOR.key());
            if (connector.equals(IDENTIFIER)) {
                throw new ValidationException("Table " + table + ": gate.connector names the connector to gate, not '"
                        + IDENTIFIER + "' itself");
            }
            wrapped.put(FactoryUtil.CONNECTOR.key(), connector);
            Configuration parsed = Configuration.fromMap(gate);
            try {  // the durations now, each named if it does not parse
                parsed.get(POKE_INTERVAL);
                parsed.get(TIMEOUT);
            } catch (IllegalArgumentException e) {
                throw new ValidationException("Table " + table + ": " + e.getMessage(), e);
            }
            return new Options(table, parsed, iceberg, wrapped);
        }

        GateConfig gateConfig() {
            String gateTable = gate.get(TABLE);
            SnapshotIdSupplier snapshotIds = null;
            if (!iceberg.isEmpty()) {
                int dot = gateTable.indexOf('.');
                if (dot <= 0 || dot == gateTable.length() - 1) {
                    throw new ValidationException("Table " + table + ": gate.table '" + gateTable
                            + "' is not catalog.namespace.table, so no catalog for gate.iceberg.* to name");
                }
                snapshotIds = new IcebergSnapshotIds(gateTable.substring(0, dot), iceberg,
                        gateTable.substring(dot + 1));
            }
            try {
                return GateConfig.builder().jdbcUrl(gate.get(JDBC_URL)).user(gate.get(USERNAME))
                        .password(gate.get(PASSWORD)).table(gateTable).writerId(gate.get(WRITER_ID))
                        .pokeInterval(gate.get(POKE_INTERVAL)).timeout(gate.get(TIMEOUT)).snapshotIds(snapshotIds)
                        .commitKind(gate.get(COMMIT_KIND)).build();
            } catch (IllegalArgumentException e) {
                throw new ValidationException("Table " + table + ": " + e.getMessage(), e);
            }
        }
    }
}
