#!/usr/bin/env bash
# Build the gated Flink source without Maven: javac against the Flink 2.3 jars of .venv/flink (which
# scripts/setup.sh installs from PyPI), then jar. Writes to $AIRFLOW_ICEBERG_FLINK_BUILD (build/flink/):
#   airflow-iceberg-flink.jar        the published classes (flink/src/main): GatedSource and its parts
#   airflow-iceberg-flink-tests.jar  the integration tests' job (flink/src/test), kept out of the jar above
#   classpath                        what a local mini-cluster job with the gated source runs with: both jars,
#                                    Flink's dist, files connector and log4j, the MariaDB JDBC driver
# scripts/setup.sh runs it when its inputs change.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=scripts/env.sh
source scripts/env.sh

site=$(.venv/flink/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
lib="$site/pyflink/lib"
one() {  # one GLOB: the single file it matches, or fail naming it
    local matches=($1)
    [[ ${#matches[@]} -eq 1 && -f ${matches[0]} ]] || { echo "build_flink: expected one file for $1" >&2; exit 1; }
    printf '%s' "${matches[0]}"
}
dist=$(one "$lib/flink-dist-*.jar")
files=$(one "$lib/flink-connector-files-*.jar")
driver=$(dpkg -L libmariadb-java | grep -m1 '/usr/share/java/mariadb-java-client.*\.jar$')
log4j=$(printf '%s:' "$lib"/log4j-*.jar)

out="$AIRFLOW_ICEBERG_FLINK_BUILD"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Java 11 byte code, the oldest Java that Flink 2 runs on; the test job runs on this machine's Java 17.
javac_=(javac -encoding UTF-8 -Xlint:all,-try,-options -Werror)
"${javac_[@]}" --release 11 -d "$work/main" -cp "$dist" $(find flink/src/main/java -name '*.java' | sort)
"${javac_[@]}" --release 17 -d "$work/test" -cp "$work/main:$dist:$files" $(find flink/src/test/java -name '*.java' | sort)
cp -R flink/src/test/resources/. "$work/test/"

mkdir -p "$out"
jar --create --file "$work/airflow-iceberg-flink.jar" -C "$work/main" .
jar --create --file "$work/airflow-iceberg-flink-tests.jar" -C "$work/test" .
mv "$work/airflow-iceberg-flink.jar" "$work/airflow-iceberg-flink-tests.jar" "$out/"
printf '%s\n' "$out/airflow-iceberg-flink.jar:$out/airflow-iceberg-flink-tests.jar:$dist:$files:${log4j}$driver" \
    >"$out/classpath"
