# make demo   set everything up, then compact a demo table with its gated DAG
# make test   set everything up, then run the whole test suite (unit + integration, real MySQL and Spark)
SHELL := /bin/bash
ENV := source scripts/env.sh &&
PY := .venv/airflow/bin/python

.PHONY: setup demo test unit lint clean

setup:
	@bash scripts/setup.sh

demo: setup
	@$(ENV) $(PY) -m airflow_iceberg.demo

test: setup lint
	@$(ENV) $(PY) -m pytest $(PYTEST_ARGS)

lint: setup
	@.venv/airflow/bin/ruff check airflow_iceberg spark_jobs dags tests
	@.venv/airflow/bin/ruff format --check airflow_iceberg spark_jobs dags tests

unit: setup
	@$(ENV) $(PY) -m pytest tests/unit $(PYTEST_ARGS)

clean:
	rm -rf build .venv
