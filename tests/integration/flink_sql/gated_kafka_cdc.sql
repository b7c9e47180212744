-- A CDC stream from Kafka (Debezium change events) upserted into an Iceberg table, all in Flink SQL, with the
-- Kafka source read through the table's write gate. ${NAME}: set by the test (devkit.cdc.SqlJob).

-- The gated connector, as the SQL client adds it (or put the jar in Flink's lib/).
ADD JAR '${GATED_JAR}';

-- The Iceberg catalog: Iceberg's JDBC catalog in MySQL, the one Spark and the table list use too.
CREATE CATALOG ${CATALOG} WITH (
  'type' = 'iceberg',
  'catalog-impl' = 'org.apache.iceberg.jdbc.JdbcCatalog',
  'uri' = '${CATALOG_URI}',
  'jdbc.user' = '${CATALOG_USER}',
  'jdbc.password' = '${CATALOG_PASSWORD}',
  'warehouse' = '${WAREHOUSE}'
);

-- The changes: Kafka's own options, then the gate's ('gate.*'). gate.iceberg.* name the catalog whose current
-- snapshot of gate.table acknowledges a pause.
CREATE TEMPORARY TABLE changes (
  id BIGINT,
  v STRING,
  seq BIGINT,
  PRIMARY KEY (id) NOT ENFORCED
) WITH (
  'connector' = 'gated',
  'gate.connector' = 'kafka',
  'topic' = '${TOPIC}',
  'properties.bootstrap.servers' = '${BOOTSTRAP}',
  'properties.group.id' = '${WRITER_ID}',
  'scan.startup.mode' = 'earliest-offset',
  'format' = 'debezium-json',
  'gate.jdbc-url' = '${GATE_URL}',
  'gate.username' = '${GATE_USER}',
  'gate.password' = '${GATE_PASSWORD}',
  'gate.table' = '${GATE_TABLE}',
  'gate.writer-id' = '${WRITER_ID}',
  'gate.poke-interval' = '500 ms',
  'gate.iceberg.catalog-impl' = 'org.apache.iceberg.jdbc.JdbcCatalog',
  'gate.iceberg.uri' = '${CATALOG_URI}',
  'gate.iceberg.jdbc.user' = '${CATALOG_USER}',
  'gate.iceberg.jdbc.password' = '${CATALOG_PASSWORD}',
  'gate.iceberg.warehouse' = '${WAREHOUSE}'
);

-- The test's recorder: writes when each change left the source (the test checks none did while the gate was
-- closed), and returns seq unchanged.
CREATE TEMPORARY FUNCTION recorded AS 'airflowiceberg.flink.testjob.RecordEmit';

-- Upsert by the table's key (its identifier field, id): Flink's Iceberg sink writes equality deletes.
INSERT INTO ${CATALOG}.${NAMESPACE}.${TABLE_NAME} /*+ OPTIONS('upsert-enabled' = 'true') */
SELECT id, v, recorded(seq) FROM changes;
