-- CDC straight from a binlog: a MariaDB (or MySQL) table read by Flink CDC's MySQL connector through the Iceberg
-- table's write gate, and upserted into it, all in Flink SQL. ${NAME}: set by the test (devkit.cdc.SqlJob).

-- The gated connector, Flink CDC's MySQL connector and MySQL's JDBC driver, which it reads through.
ADD JAR '${GATED_JAR}';
ADD JAR '${MYSQL_CDC_JAR}';
ADD JAR '${MYSQL_JDBC_JAR}';

CREATE CATALOG ${CATALOG} WITH (
  'type' = 'iceberg',
  'catalog-impl' = 'org.apache.iceberg.jdbc.JdbcCatalog',
  'uri' = '${CATALOG_URI}',
  'jdbc.user' = '${CATALOG_USER}',
  'jdbc.password' = '${CATALOG_PASSWORD}',
  'warehouse' = '${WAREHOUSE}'
);

-- The source table: a snapshot of its rows, then every change in its binlog; the connector's own options, then
-- the gate's. Its account needs SELECT, RELOAD, REPLICATION SLAVE and REPLICATION CLIENT.
CREATE TEMPORARY TABLE orders (
  id BIGINT,
  v STRING,
  seq BIGINT,
  PRIMARY KEY (id) NOT ENFORCED
) WITH (
  'connector' = 'gated',
  'gate.connector' = 'mysql-cdc',
  'hostname' = '${MYSQL_HOST}',
  'port' = '${MYSQL_PORT}',
  'username' = '${MYSQL_USER}',
  'password' = '${MYSQL_PASSWORD}',
  'database-name' = '${MYSQL_DATABASE}',
  'table-name' = 'orders',
  'server-id' = '5401-5404',
  'server-time-zone' = 'UTC',
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

-- The test's recorder: writes when each row left the source, and returns seq unchanged.
CREATE TEMPORARY FUNCTION recorded AS 'airflowiceberg.flink.testjob.RecordEmit';

INSERT INTO ${CATALOG}.${NAMESPACE}.${TABLE_NAME} /*+ OPTIONS('upsert-enabled' = 'true') */
SELECT id, v, recorded(seq) FROM orders;
