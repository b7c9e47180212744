# make demo   set everything up, then compact a demo table with its gated DAG
# make test   set everything up, then run the whole test suite (unit + integration, real MySQL and Spark)
# make bench  gated compactions under a live streaming writer: how long the gate pauses it
SHELL := /bin/bash
ENV := source scripts/env.sh &&
PY := .venv/airflow/bin/python

.PHONY: setup demo test unit lint bench clean

setup:
	@bash scripts/setup.sh

demo: setup
	@$(ENV) $(PY) -m airflow_iceberg.demo

bench: setup
	@$(ENV) $(PY) -m airflow_iceberg.bench

test: setup lint
	@$(ENV) $(PY) -m pytest $(PYTEST_ARGS)

lint: setup
	@.venv/airflow/bin/ruff check airflow_iceberg spark_jobs dags tests
	@.venv/airflow/bin/ruff format --check airflow_iceberg spark_jobs dags tests

unit: setup
	@$(ENV) $(PY) -m pytest tests/unit $(PYTEST_ARGS)

clean:
	rm -rf build .venv
