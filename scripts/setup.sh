#!/usr/bin/env bash
# Everything `make demo` and `make test` need on a fresh Debian 12 machine, idempotent and quick to re-run:
#   Debian packages (jarjar, MariaDB JDBC driver), the Airflow and Spark Python environments, the Iceberg jars,
#   the gated Flink source's jar (built against Flink's jars from PyPI), the MySQL databases for the write gate
#   (with its schema migrated) and the Iceberg JDBC catalog, and an Airflow home.
# Each step is skipped when its output is already up to date.
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
debs=(libjarjar-java libmariadb-java docker-compose chromium chromium-driver)
missing=()
for d in "${debs[@]}"; do dpkg -s "$d" >/dev/null 2>&1 || missing+=("$d"); done
if ((${#missing[@]})); then
    step "apt-get install ${missing[*]}"
    sudo_=""; [[ $(id -u) -eq 0 ]] || sudo_="sudo"
    $sudo_ apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v java >/dev/null || { echo "setup: java (OpenJDK 17) is required on PATH" >&2; exit 1; }

# --- uv, then the two Python environments -----------------------------------------------------------------------
venvs="$root/.venv"
uv="$venvs/tools/bin/uv"
if [[ ! -x "$uv" ]]; then
    step "bootstrap uv"
    python3 -m venv "$venvs/tools"
    "$venvs/tools/bin/pip" install -q 'uv==0.13.8'
fi

if ! stamp_ok spark-venv requirements/spark.txt; then
    step "Spark environment ($venvs/spark)"
    [[ -x "$venvs/spark/bin/python" ]] || "$uv" venv -q -p python3.11 "$venvs/spark"
    VIRTUAL_ENV="$venvs/spark" "$uv" pip install -q -r requirements/spark.txt
    stamp_write spark-venv requirements/spark.txt
fi

if ! stamp_ok airflow-venv pyproject.toml; then
    step "Airflow environment ($venvs/airflow)"
    [[ -x "$venvs/airflow/bin/python" ]] || "$uv" venv -q -p python3.11 "$venvs/airflow"
    VIRTUAL_ENV="$venvs/airflow" "$uv" pip install -q -e ".[test]"
    stamp_write airflow-venv pyproject.toml
fi

# --- Jars: Iceberg runtime, its missing relocated Jackson, the MariaDB JDBC driver -----------------------------
jars="$AIRFLOW_ICEBERG_JARS"
if ! stamp_ok jars requirements/spark.txt scripts/setup.sh; then
    step "Iceberg jars ($jars)"
    mkdir -p "$jars"
    site=$("$venvs/spark/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    cp "$site/snowpark_connect_deps_iceberg/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar" "$jars/"
    # The runtime jar references org.apache.iceberg.shaded.com.fasterxml.jackson.* but does not ship it:
    # relocate the Jackson 2.15.2 that pyspark already carries into that package with jarjar.
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    mkdir "$work/merged"
    for j in annotations core databind; do
        (cd "$work/merged" && jar xf "$site/pyspark/jars/jackson-$j-2.15.2.jar")
    done
    rm -rf "$work/merged/module-info.class" "$work/merged/META-INF/versions" "$work/merged/META-INF/"*.SF \
        "$work/merged/META-INF/"*.RSA "$work/merged/META-INF/"*.DSA
    (cd "$work/merged" && jar cf "$work/merged.jar" .)
    echo 'rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1' >"$work/rules.txt"
    java -jar "$(dpkg -L libjarjar-java | grep -m1 '/usr/share/java/jarjar.*\.jar$')" \
        process "$work/rules.txt" "$work/merged.jar" "$jars/iceberg-shaded-jackson.jar"
    cp "$(dpkg -L libmariadb-java | grep -m1 '/usr/share/java/mariadb-java-client.*\.jar$')" \
        "$jars/mariadb-java-client.jar"
    stamp_write jars requirements/spark.txt scripts/setup.sh
fi

# --- Flink: the gated source (flink/), compiled against Flink 2.3's own jars from PyPI ----------------------------
# The image of the compose stack runs no Flink job: it sets AIRFLOW_ICEBERG_SKIP_FLINK.
if [[ -z "${AIRFLOW_ICEBERG_SKIP_FLINK:-}" ]]; then
    if ! stamp_ok flink-venv requirements/flink.txt; then
        step "Flink libraries ($venvs/flink)"
        [[ -x "$venvs/flink/bin/python" ]] || "$uv" venv -q -p python3.11 "$venvs/flink"
        VIRTUAL_ENV="$venvs/flink" "$uv" pip install -q -r requirements/flink.txt
        stamp_write flink-venv requirements/flink.txt
    fi
    mapfile -t flink_sources < <(find flink -type f | sort)
    flink_inputs=(requirements/flink.txt scripts/build_flink.sh "${flink_sources[@]}")
    if ! stamp_ok flink-jar "${flink_inputs[@]}" <(printf '%s\n' "${flink_sources[@]}") ||
        [[ ! -f "$AIRFLOW_ICEBERG_FLINK_BUILD/classpath" ]]; then
        step "gated Flink source ($AIRFLOW_ICEBERG_FLINK_BUILD)"
        bash scripts/build_flink.sh
        stamp_write flink-jar "${flink_inputs[@]}" <(printf '%s\n' "${flink_sources[@]}")
    fi
fi

if [[ -n "${AIRFLOW_ICEBERG_SKIP_DATABASES:-}" ]]; then  # building an image: no servers to set up yet
    step "ready (environments and jars only)"
    exit 0
fi

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
