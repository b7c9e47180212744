#!/usr/bin/env bash
# Everything `make demo` and `make test` need on a fresh Debian 12 machine, idempotent and quick to re-run:
#   Debian packages (Maven, Chromium, MariaDB's server binaries for the tests' private servers), the Airflow
#   environment, each stack's Spark environment, Spark jobs' jars from Maven Central and Flink line's build of the
#   gated source (requirements/stacks.toml), the database servers (MariaDB and PostgreSQL, installed and started
#   when nothing answers: scripts/databases.py), the MySQL databases for the write gate (with its schema migrated)
#   and the Iceberg JDBC catalog, and an Airflow home.
# Each step is skipped when its output is already up to date.
#
# The stacks: the one this environment runs ($AIRFLOW_ICEBERG_STACK, else the matrix's default), and with
# AIRFLOW_ICEBERG_STACKS=all every stack of the matrix (`make test`, `make test-stacks`).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=scripts/env.sh
source scripts/env.sh

step() { printf '==> %s\n' "$*"; }

stamp_ok() {  # stamp_ok NAME INPUT...: true if NAME's stamp matches the inputs' content hash
    local want
    want=$(cat "${@:2}" | sha256sum | cut -d' ' -f1)
    [[ -f "$AIRFLOW_ICEBERG_BUILD/stamps/$1" && $(cat "$AIRFLOW_ICEBERG_BUILD/stamps/$1") == "$want" ]]
}
stamp_write() {
    mkdir -p "$AIRFLOW_ICEBERG_BUILD/stamps"
    cat "${@:2}" | sha256sum | cut -d' ' -f1 >"$AIRFLOW_ICEBERG_BUILD/stamps/$1"
}

# --- Debian packages -------------------------------------------------------------------------------------------
# mariadb-server-core: mariadbd and mariadb-install-db for the tests' private servers (devkit/private_mariadb.py),
# without a service of its own. The servers themselves come in scripts/databases.py, only when needed.
debs=(maven mariadb-server-core docker-compose chromium chromium-driver)
missing=()
for d in "${debs[@]}"; do dpkg -s "$d" >/dev/null 2>&1 || missing+=("$d"); done
if ((${#missing[@]})); then
    step "apt-get install ${missing[*]}"
    sudo_=""; [[ $(id -u) -eq 0 ]] || sudo_="sudo"
    $sudo_ apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v java >/dev/null || { echo "setup: java (OpenJDK 17) is required on PATH" >&2; exit 1; }
maven() {  # maven ARG...: a quiet Maven build; its log only when it fails (Debian's Maven 3.8 prints escape codes)
    mkdir -p "$AIRFLOW_ICEBERG_BUILD"
    mvn -B -q --no-transfer-progress "$@" >"$AIRFLOW_ICEBERG_BUILD/maven.log" 2>&1 ||
        { cat "$AIRFLOW_ICEBERG_BUILD/maven.log" >&2; exit 1; }
}

# --- uv, then the two Python environments -----------------------------------------------------------------------
venvs="$root/.venv"
uv="$venvs/tools/bin/uv"
if [[ ! -x "$uv" ]]; then
    step "bootstrap uv"
    python3 -m venv "$venvs/tools"
    "$venvs/tools/bin/pip" install -q 'uv==0.13.8'
fi

installed=""  # set when this run installed into an environment: uv's cache is pruned after the stacks' ones
if ! stamp_ok airflow-venv pyproject.toml; then
    step "Airflow environment ($venvs/airflow)"
    [[ -x "$venvs/airflow/bin/python" ]] || "$uv" venv -q -p python3.11 "$venvs/airflow"
    VIRTUAL_ENV="$venvs/airflow" "$uv" pip install -q -e ".[test]"
    installed=1
    stamp_write airflow-venv pyproject.toml
fi

# --- The "Iceberg tables" page of the Airflow UI: ui/, built by npm (Vite) into the package's static/ ------------
# A React app plugin: the wheel ships the one script it builds, so nothing loads from a CDN at run time. The image
# of the compose stack builds it in a Node stage of its own (Dockerfile) and sets AIRFLOW_ICEBERG_SKIP_UI.
bundle=airflow_iceberg/plugins/static/iceberg-tables.js
if [[ -z "${AIRFLOW_ICEBERG_SKIP_UI:-}" ]]; then
    mapfile -t ui_sources < <(find ui -type f -not -path 'ui/node_modules/*' | sort)
    if ! stamp_ok ui "${ui_sources[@]}" || [[ ! -f "$bundle" ]]; then
        step "Iceberg tables page (ui/ -> $bundle)"
        command -v npm >/dev/null || { echo "setup: npm (Node.js 20.19 or newer) is required on PATH" >&2; exit 1; }
        mkdir -p "$AIRFLOW_ICEBERG_BUILD"
        (cd ui && npm ci --no-audit --no-fund && npm run build) >"$AIRFLOW_ICEBERG_BUILD/ui.log" 2>&1 ||
            { cat "$AIRFLOW_ICEBERG_BUILD/ui.log" >&2; exit 1; }
        stamp_write ui "${ui_sources[@]}"
    fi
fi

# --- The stacks: per stack, its Spark environment, its Spark jobs' jars and its Flink line's gated source -----------
stack() { python3 scripts/stacks.py "$@"; }

setup_stack() {  # setup_stack NAME: .venv/spark-NAME, build/stacks/NAME/jars and build/stacks/NAME/flink
    local name=$1 pyspark
    local venv="$venvs/spark-$name" jars="$AIRFLOW_ICEBERG_BUILD/stacks/$name/jars"
    local flink_build="$AIRFLOW_ICEBERG_BUILD/stacks/$name/flink"
    local maven_spark maven_flink flink_sources
    pyspark=$(stack pyspark "$name")
    read -ra maven_spark <<<"$(stack maven-spark "$name")"
    read -ra maven_flink <<<"$(stack maven-flink "$name")"

    # A full PySpark (it ships spark-submit and Spark's jars), kept apart from Airflow's environment.
    if ! stamp_ok "spark-venv-$name" requirements/spark.txt <(echo "$pyspark") || [[ ! -x "$venv/bin/python" ]]; then
        step "stack $name: Spark environment, $pyspark ($venv)"
        [[ -x "$venv/bin/python" ]] || "$uv" venv -q -p python3.11 "$venv"
        VIRTUAL_ENV="$venv" "$uv" pip install -q -r requirements/spark.txt "$pyspark"
        installed=1
        stamp_write "spark-venv-$name" requirements/spark.txt <(echo "$pyspark")
    fi

    # Iceberg's Spark runtime and the MariaDB JDBC driver, from Maven Central.
    if ! stamp_ok "jars-$name" requirements/pom.xml <(echo "${maven_spark[*]}") || [[ ! -d "$jars" ]]; then
        step "stack $name: Spark jars from Maven Central ($jars)"
        rm -rf "$jars"  # no jar of an earlier pin stays behind
        maven -f requirements/pom.xml package -Djars.dir="$jars" "${maven_spark[@]}"
        stamp_write "jars-$name" requirements/pom.xml <(echo "${maven_spark[*]}")
    fi

    # The gated Flink source for the stack's Flink line, built by Maven against Flink from Maven Central. The image
    # of the compose stack runs no Flink job: it sets AIRFLOW_ICEBERG_SKIP_FLINK.
    [[ -z "${AIRFLOW_ICEBERG_SKIP_FLINK:-}" ]] || return 0
    mapfile -t flink_sources < <(find flink -type f | sort)
    if ! stamp_ok "flink-$name" "${flink_sources[@]}" <(printf '%s\n' "${flink_sources[@]}" "${maven_flink[@]}") ||
        [[ ! -f "$flink_build/classpath" ]]; then
        step "stack $name: gated Flink source ($flink_build)"
        maven -f flink/pom.xml -Dflink.build.dir="$flink_build" "${maven_flink[@]}" -DskipTests package
        # What the mini-cluster test jobs run with: the source, the jobs, and their dependencies.
        local line
        line=$(stack flink-line "$name")
        printf '%s\n' "$flink_build/airflow-iceberg-flink-$line.jar:$flink_build/airflow-iceberg-flink-$line-tests.jar:$(
            cat "$flink_build/mini-cluster.classpath")" >"$flink_build/classpath"
        stamp_write "flink-$name" "${flink_sources[@]}" <(printf '%s\n' "${flink_sources[@]}" "${maven_flink[@]}")
    fi
}

stacks=("$AIRFLOW_ICEBERG_STACK")
stack flink-profiles >/dev/null  # flink/pom.xml's profiles are the matrix's, or set-up stops here
[[ "${AIRFLOW_ICEBERG_STACKS:-}" != all ]] || read -ra stacks <<<"$(stack names)"
for name in "${stacks[@]}"; do
    setup_stack "$name"
done
# PySpark comes as a source distribution only, and the registry answers uv's revalidation with the archive again,
# so uv builds and caches a new wheel of each PySpark at every fresh set-up (1.3 GB each): 54 GB after a day of
# fresh clones filled this machine's disk. Pruning drops every revision no longer pointed to, in seconds.
if [[ -n "$installed" ]]; then
    step "uv cache prune (revisions nothing points to any more)"
    "$uv" cache prune -q
fi

# --- The tests' servers, from Maven Central: Kafka (KRaft), a REST catalog, a Hive Metastore, YARN and HDFS -----
if [[ -z "${AIRFLOW_ICEBERG_SKIP_FLINK:-}" ]]; then
    if ! stamp_ok kafka requirements/kafka-broker.xml || [[ ! -f "$AIRFLOW_ICEBERG_KAFKA_BUILD/classpath" ]]; then
        step "Kafka broker's jars ($AIRFLOW_ICEBERG_KAFKA_BUILD)"
        maven -f requirements/kafka-broker.xml package -Dkafka.dir="$AIRFLOW_ICEBERG_KAFKA_BUILD"
        stamp_write kafka requirements/kafka-broker.xml
    fi
    # Iceberg's REST catalog server, for the tests of a REST catalog; devkit/rest_catalog.py runs it.
    if ! stamp_ok rest-catalog requirements/rest-catalog.xml || [[ ! -f "$AIRFLOW_ICEBERG_REST_BUILD/classpath" ]]; then
        step "Iceberg REST catalog server's jars ($AIRFLOW_ICEBERG_REST_BUILD)"
        maven -f requirements/rest-catalog.xml package -Drest.dir="$AIRFLOW_ICEBERG_REST_BUILD"
        stamp_write rest-catalog requirements/rest-catalog.xml
    fi
    # A standalone Hive Metastore, for the tests of a Hive catalog; devkit/hive_metastore.py runs it.
    if ! stamp_ok hive-metastore requirements/hive-metastore.xml || [[ ! -f "$AIRFLOW_ICEBERG_HMS_BUILD/classpath" ]]; then
        step "Hive Metastore's jars ($AIRFLOW_ICEBERG_HMS_BUILD)"
        maven -f requirements/hive-metastore.xml package -Dhms.dir="$AIRFLOW_ICEBERG_HMS_BUILD"
        stamp_write hive-metastore requirements/hive-metastore.xml
    fi
    # A YARN and an HDFS in one JVM (Hadoop's minicluster), for the tests on YARN; devkit/mini_hadoop.py runs it.
    mapfile -t hadoop_sources < <(find devkit/mini_hadoop -type f | sort)
    if ! stamp_ok mini-hadoop "${hadoop_sources[@]}" || [[ ! -f "$AIRFLOW_ICEBERG_HADOOP_BUILD/classpath" ]]; then
        step "Hadoop mini-cluster, YARN and HDFS ($AIRFLOW_ICEBERG_HADOOP_BUILD)"
        maven -f devkit/mini_hadoop/pom.xml package -Dhadoop.dir="$AIRFLOW_ICEBERG_HADOOP_BUILD"
        stamp_write mini-hadoop "${hadoop_sources[@]}"
    fi
fi

if [[ -n "${AIRFLOW_ICEBERG_SKIP_DATABASES:-}" ]]; then  # building an image: no servers to set up yet
    step "ready (environments and jars only)"
    exit 0
fi

# --- Database servers: MySQL (the gate, the catalog) and PostgreSQL (a live Airflow's metadata) --------------------
# Servers that answer are used as they are; on loopback, missing ones are installed and started.
"$venvs/airflow/bin/python" scripts/databases.py

# --- MySQL databases for the write gate and the Iceberg JDBC catalog -------------------------------------------
step "MySQL databases ${AIRFLOW_ICEBERG_GATE_DB} and ${AIRFLOW_ICEBERG_CATALOG_DB}"
"$venvs/airflow/bin/python" - <<'PY'
import os, pymysql
conn = pymysql.connect(host=os.environ["AIRFLOW_ICEBERG_MYSQL_HOST"], port=int(os.environ["AIRFLOW_ICEBERG_MYSQL_PORT"]),
                       user=os.environ["AIRFLOW_ICEBERG_MYSQL_USER"], password=os.environ["AIRFLOW_ICEBERG_MYSQL_PASSWORD"])
with conn, conn.cursor() as cur:
    for name in (os.environ["AIRFLOW_ICEBERG_GATE_DB"], os.environ["AIRFLOW_ICEBERG_CATALOG_DB"]):
        # Database names cannot be parameters; these come from scripts/env.sh and are checked here.
        if not name.replace("_", "").isalnum():
            raise SystemExit(f"setup: bad database name {name!r}")
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
PY
# The explicit schema step: create or upgrade the gate's tables (the provider's tasks never do).
"$venvs/airflow/bin/airflow-iceberg" migrate

# --- Airflow home: metadata database ----------------------------------------------------------------------------
mkdir -p "$AIRFLOW_HOME" "$AIRFLOW_ICEBERG_WAREHOUSE_DIR"
if ! stamp_ok airflow-db pyproject.toml; then
    step "Airflow metadata database ($AIRFLOW_HOME)"
    "$venvs/airflow/bin/airflow" db migrate >"$AIRFLOW_ICEBERG_BUILD/airflow-db-migrate.log" 2>&1 ||
        { cat "$AIRFLOW_ICEBERG_BUILD/airflow-db-migrate.log" >&2; exit 1; }
    stamp_write airflow-db pyproject.toml
fi
step "ready"
