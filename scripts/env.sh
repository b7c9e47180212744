# shellcheck shell=bash
# The embedded default environment: local Spark, a local warehouse, this machine's MySQL (MariaDB) and PostgreSQL,
# which scripts/setup.sh starts when nothing answers at these addresses. Sourced by scripts/setup.sh and the
# Makefile's targets; every value can be overridden from the calling environment.
_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

export AIRFLOW_ICEBERG_ROOT="$_root"
export AIRFLOW_ICEBERG_BUILD="${AIRFLOW_ICEBERG_BUILD:-$_root/build}"
# The stack (requirements/stacks.toml, read by scripts/stacks.py): its default unless AIRFLOW_ICEBERG_STACK names
# another. Its Spark environment, the Spark jobs' jars and its Flink line's build are its own, set up by
# scripts/setup.sh; the paths follow from the stack's name alone.
export AIRFLOW_ICEBERG_STACK="${AIRFLOW_ICEBERG_STACK:-$(python3 "$_root/scripts/stacks.py" default)}"
export AIRFLOW_ICEBERG_STACK_BUILD="$AIRFLOW_ICEBERG_BUILD/stacks/$AIRFLOW_ICEBERG_STACK"
export AIRFLOW_ICEBERG_JARS="$AIRFLOW_ICEBERG_STACK_BUILD/jars"
export AIRFLOW_ICEBERG_FLINK_BUILD="$AIRFLOW_ICEBERG_STACK_BUILD/flink"
export AIRFLOW_ICEBERG_KAFKA_BUILD="${AIRFLOW_ICEBERG_KAFKA_BUILD:-$AIRFLOW_ICEBERG_BUILD/kafka}"
export AIRFLOW_ICEBERG_REST_BUILD="${AIRFLOW_ICEBERG_REST_BUILD:-$AIRFLOW_ICEBERG_BUILD/rest-catalog}"
export AIRFLOW_ICEBERG_HMS_BUILD="${AIRFLOW_ICEBERG_HMS_BUILD:-$AIRFLOW_ICEBERG_BUILD/hive-metastore}"
export AIRFLOW_ICEBERG_HADOOP_BUILD="${AIRFLOW_ICEBERG_HADOOP_BUILD:-$AIRFLOW_ICEBERG_BUILD/mini-hadoop}"
export AIRFLOW_ICEBERG_WAREHOUSE_DIR="${AIRFLOW_ICEBERG_WAREHOUSE_DIR:-$AIRFLOW_ICEBERG_BUILD/warehouse}"
export AIRFLOW_ICEBERG_MYSQL_HOST="${AIRFLOW_ICEBERG_MYSQL_HOST:-127.0.0.1}"
export AIRFLOW_ICEBERG_MYSQL_PORT="${AIRFLOW_ICEBERG_MYSQL_PORT:-3306}"
export AIRFLOW_ICEBERG_MYSQL_USER="${AIRFLOW_ICEBERG_MYSQL_USER:-root}"
export AIRFLOW_ICEBERG_MYSQL_PASSWORD="${AIRFLOW_ICEBERG_MYSQL_PASSWORD:-}"
export AIRFLOW_ICEBERG_GATE_DB="${AIRFLOW_ICEBERG_GATE_DB:-airflow_iceberg}"
export AIRFLOW_ICEBERG_CATALOG_DB="${AIRFLOW_ICEBERG_CATALOG_DB:-iceberg_catalog}"
# PostgreSQL: the metadata database of the live Airflow that the tests and `make bench` start.
export AIRFLOW_ICEBERG_POSTGRES_HOST="${AIRFLOW_ICEBERG_POSTGRES_HOST:-127.0.0.1}"
export AIRFLOW_ICEBERG_POSTGRES_PORT="${AIRFLOW_ICEBERG_POSTGRES_PORT:-5432}"
export AIRFLOW_ICEBERG_POSTGRES_USER="${AIRFLOW_ICEBERG_POSTGRES_USER:-postgres}"
export AIRFLOW_ICEBERG_POSTGRES_PASSWORD="${AIRFLOW_ICEBERG_POSTGRES_PASSWORD:-}"

# Airflow: its own home and SQLite metadata under build/, our DAG folder, no examples.
export AIRFLOW_HOME="${AIRFLOW_HOME:-$AIRFLOW_ICEBERG_BUILD/airflow-home}"
export AIRFLOW__CORE__DAGS_FOLDER="${AIRFLOW__CORE__DAGS_FOLDER:-$_root/dags}"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__UNIT_TEST_MODE="${AIRFLOW__CORE__UNIT_TEST_MODE:-False}"

# Spark: the stack's Spark environment, its spark-submit on PATH (SparkSubmitHook runs it from there).
_spark_venv="$_root/.venv/spark-$AIRFLOW_ICEBERG_STACK"
export PATH="$_spark_venv/bin:$PATH"
export PYSPARK_PYTHON="$_spark_venv/bin/python"
export SPARK_HOME="$_spark_venv/lib/python3.11/site-packages/pyspark"

# Connections. Host-only JSON for Spark: a URI such as spark://local[2] is misparsed as YARN.
_mysql_auth="$AIRFLOW_ICEBERG_MYSQL_USER"
[[ -n "$AIRFLOW_ICEBERG_MYSQL_PASSWORD" ]] && _mysql_auth="$_mysql_auth:$AIRFLOW_ICEBERG_MYSQL_PASSWORD"
export AIRFLOW_CONN_SPARK_DEFAULT="${AIRFLOW_CONN_SPARK_DEFAULT:-{\"conn_type\": \"spark\", \"host\": \"local[2]\"\}}"
# The Iceberg connection is named after the Spark catalog ("lake"): pyiceberg's SQL catalog keys its rows by
# catalog name, and IcebergHook names the catalog after its connection id.
export AIRFLOW_CONN_LAKE="${AIRFLOW_CONN_LAKE:-{\"conn_type\": \"iceberg\", \"extra\": {\"type\": \"sql\", \"uri\": \"mysql+pymysql://$_mysql_auth@$AIRFLOW_ICEBERG_MYSQL_HOST:$AIRFLOW_ICEBERG_MYSQL_PORT/$AIRFLOW_ICEBERG_CATALOG_DB\", \"warehouse\": \"file://$AIRFLOW_ICEBERG_WAREHOUSE_DIR\"\}\}}"
export AIRFLOW_CONN_WRITE_GATE_DEFAULT="${AIRFLOW_CONN_WRITE_GATE_DEFAULT:-{\"conn_type\": \"iceberg_write_gate\", \"host\": \"$AIRFLOW_ICEBERG_MYSQL_HOST\", \"port\": $AIRFLOW_ICEBERG_MYSQL_PORT, \"login\": \"$AIRFLOW_ICEBERG_MYSQL_USER\", \"password\": \"$AIRFLOW_ICEBERG_MYSQL_PASSWORD\", \"schema\": \"$AIRFLOW_ICEBERG_GATE_DB\"\}}"
unset _root _mysql_auth _spark_venv
