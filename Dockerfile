# One image for the whole stack: Airflow (api-server, scheduler, dag-processor, triggerer) with this provider,
# and the Spark environment (master, worker, and spark-submit for the rewrite tasks), built by the same
# scripts/setup.sh that `make test` uses, so the stack runs what the tests ran.
# The "Iceberg tables" page's front end, built by npm as scripts/setup.sh builds it.
FROM node:20-bookworm-slim AS ui
WORKDIR /ui
COPY ui/package.json ui/package-lock.json ui/vite.config.js ./
COPY ui/src ./src
RUN npm ci --no-audit --no-fund && npm run build -- --outDir /static

FROM python:3.11-slim-bookworm

RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openjdk-17-jdk-headless maven curl procps make \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/airflow-iceberg
COPY pyproject.toml README.md Makefile ./
COPY requirements ./requirements
COPY scripts ./scripts
COPY airflow_iceberg ./airflow_iceberg
COPY spark_jobs ./spark_jobs
COPY dags ./dags
COPY --from=ui /static ./airflow_iceberg/plugins/static

# Environments and jars only: the databases belong to the running stack (docker/mysql-init.sql, airflow-init),
# and no Flink job runs in it.
RUN AIRFLOW_ICEBERG_SKIP_DATABASES=1 AIRFLOW_ICEBERG_SKIP_FLINK=1 AIRFLOW_ICEBERG_SKIP_UI=1 bash scripts/setup.sh \
    && VIRTUAL_ENV=/opt/airflow-iceberg/.venv/airflow .venv/tools/bin/uv pip install -q "apache-airflow[postgres]==3.3.*"

# The default stack of requirements/stacks.toml ("lts": Spark 3.5, Iceberg 1.11), as dags/iceberg_tables.yaml loads it.
ENV PATH=/opt/airflow-iceberg/.venv/airflow/bin:/opt/airflow-iceberg/.venv/spark-lts/bin:$PATH \
    SPARK_HOME=/opt/airflow-iceberg/.venv/spark-lts/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/airflow-iceberg/.venv/spark-lts/bin/python \
    AIRFLOW_ICEBERG_JARS=/opt/airflow-iceberg/build/stacks/lts/jars
