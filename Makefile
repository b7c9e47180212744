# make demo   set everything up, then compact a demo table with its gated DAG
# make test   set everything up, then run the whole test suite: the Flink module's Java unit tests on every Flink
#             line, the Python unit and integration tests on the default stack (real MariaDB, PostgreSQL, Spark,
#             Flink mini-cluster, live Airflow), then a gated CDC and a Spark writer's compaction on each other stack
# make bench  gated compactions under a live streaming writer: how long the gate pauses it; then the rewrite
#             tasks on a live Airflow against a bare spark-submit of the same CALLs; then health planning: the
#             health check on 10,000 files, a skipped run, rewrite throughput, a full scan before / after; then a
#             CDC table from Kafka and Flink's upsert sink (500 equality-delete files): full scan before / after
# make bench-parse  what parsing the DAG files costs with 1, 100, 1,000 and 5,000 tables (5 DAG files at 5,000)
# make bench-fleet  1,000 healthy tables on a live Airflow, idle and watched, at Airflow's defaults and under the
#             fleet setting: runs, cores, sweeps; one run for each table a writer makes need work; cron mode for
#             reference (about an hour; BENCH_ARGS=--tables 100,1000,5000 for more sizes)
# make faults  gated compactions under injected faults (killed task, MySQL down, ...): one row per scenario
# make bad-day  a watched fleet's bad day on a live Airflow: the gate's MySQL, then the catalog's database, down
#             for two minutes during the health watch's sweeps; then 200 tables needing work at once on 4 Spark
#             slots, the triggerer and the scheduler SIGKILLed in the middle (about two and a half hours)
# make unit   the fast tests only (no servers): Python's on two workers, and the default Flink line's JUnit tests
# make lint   ruff, mypy, and the package's layers (lint-imports: the contracts in pyproject.toml's tool.importlinter)
# make layers  the import arrows between the package's parts, one per line (import-linter drawgraph), then the
#             layers contract that holds them to run downward
# make docs   refresh the generated blocks in docs/ (gate schema, protocol SQL, table-list settings), then build
#             the docs site with --strict into build/site (make site: the build alone, which make test runs)
# make java-test  the Flink module's JUnit tests, `mvn verify` on flink/pom.xml once per Flink line of the matrix
#                 (the default line exactly as a Java developer runs it: no flag; the others with -Pflink-<line>)
# make test-stacks  every stack of requirements/stacks.toml (Flink 1.18 / 1.20 / 2.1, Spark 3.4 / 3.5 / 4.1), each
#             in environments of its own: the CDC pipeline and a Spark merge-on-read writer, gated and ungated,
#             and the daily full rewrite with its maintenance; then one matrix of the results
SHELL := /bin/bash
ENV := source scripts/env.sh &&
PY := .venv/airflow/bin/python
MKDOCS := NO_MKDOCS_2_WARNING=1 .venv/airflow/bin/mkdocs build --strict --quiet
# The demo writers' spark-submit output goes to files under build/, not the console.
QUIET_WRITERS := AIRFLOW__LOGGING__NAMESPACE_LEVELS=airflow.task.hooks.devkit.writers=WARNING

.PHONY: setup setup-stacks demo test test-stacks unit java-test lint layers bench bench-cluster bench-parse bench-fleet bench-peers \
	faults bad-day docs site \
	clean

setup:
	@bash scripts/setup.sh

# Every stack of the matrix, not only the default one: for the Java tests of each Flink line, and the stacks' runs.
setup-stacks:
	@AIRFLOW_ICEBERG_STACKS=all bash scripts/setup.sh

demo: setup
	@$(ENV) $(QUIET_WRITERS) $(PY) -m devkit.demo

bench: setup
	@$(ENV) $(QUIET_WRITERS) $(PY) -m devkit.bench
	@$(ENV) $(QUIET_WRITERS) $(PY) -m devkit.bench_tasks
	@$(ENV) $(QUIET_WRITERS) $(PY) -m devkit.bench_health
	@$(ENV) $(QUIET_WRITERS) $(PY) -m devkit.bench_cdc

# make bench's gated compactions with the rewrite pre-started on a Spark standalone cluster, on a live Airflow.
bench-cluster: setup
	@$(ENV) $(QUIET_WRITERS) $(PY) -m devkit.bench_cluster

# The suite runs on two workers (pytest-xdist): one test mostly waits, for a JVM, a checkpoint or a scheduler, so
# two at once keep two cores busy. The tests of the one live Airflow stay together on one worker (tests/conftest.py);
# a test marked `alone` loads every core on purpose and runs first, by itself.
TEST_WORKERS ?= 2

test: setup-stacks lint site java-test
	@$(ENV) $(PY) -m pytest -m "alone and not bad_day" $(PYTEST_ARGS)
	@$(ENV) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not alone and not bad_day" $(PYTEST_ARGS)
	@$(ENV) $(PY) -m devkit.stack_checks --smoke --workers $(TEST_WORKERS)

java-test: setup-stacks
	@default=$$(python3 scripts/stacks.py default); for stack in $$(python3 scripts/stacks.py names); do \
		echo "==> mvn verify: GatedSource on Flink $$(python3 scripts/stacks.py flink-line $$stack) (stack $$stack)"; \
		if [ "$$stack" = "$$default" ]; then \
			echo "    mvn -f flink/pom.xml verify (the default line, no flag, into build/flink)"; \
			mvn -B --no-transfer-progress -f flink/pom.xml verify || exit 1; \
		else \
			(export AIRFLOW_ICEBERG_STACK=$$stack && $(ENV) mvn -B --no-transfer-progress -f flink/pom.xml \
				-Dflink.build.dir="$$AIRFLOW_ICEBERG_FLINK_BUILD" $$(python3 scripts/stacks.py maven-flink $$stack) \
				verify) || exit 1; \
		fi; \
	done

test-stacks: setup-stacks
	@$(ENV) $(PY) -m devkit.stack_checks $(STACKS_ARGS)

lint: setup
	@.venv/airflow/bin/ruff check airflow_iceberg spark_jobs devkit dags tests scripts
	@.venv/airflow/bin/ruff format --check airflow_iceberg spark_jobs devkit dags tests scripts
	@.venv/airflow/bin/mypy airflow_iceberg spark_jobs
	@.venv/airflow/bin/lint-imports --no-cache --no-logo

layers: setup
	@.venv/airflow/bin/import-linter drawgraph airflow_iceberg | sed -n 's/^ *"\.\([a-z_]*\)" *-> *"\.\([a-z_]*\)".*/\1 -> \2/p'
	@.venv/airflow/bin/lint-imports --no-cache --no-logo

# The inner loop: the Python unit tests on two workers while Maven runs the default Flink line's JUnit tests beside
# them (every line runs in make test, through java-test); its output is kept in build/unit-java.log.
unit: setup-stacks
	@started=$$(date +%s.%N); mkdir -p build; \
	mvn -B -q --no-transfer-progress -f flink/pom.xml verify > build/unit-java.log 2>&1 & java=$$!; \
	$(ENV) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup tests/unit $(PYTEST_ARGS); python=$$?; \
	wait $$java; java=$$?; [ $$java = 0 ] || { tail -n 60 build/unit-java.log; echo "==> mvn verify failed"; }; \
	echo "==> make unit: $$(python3 -c "import time; print(f'{time.time() - $$started:.1f}')") s wall for the tests (Python, and Java on the default Flink line $$(python3 scripts/stacks.py flink-line $$(python3 scripts/stacks.py default)))"; \
	[ $$python = 0 ] && [ $$java = 0 ]

bench-parse: setup
	@$(ENV) $(PY) -m devkit.bench_parse

bench-fleet: setup
	@$(ENV) $(PY) -m devkit.bench_fleet $(BENCH_ARGS)

# airflow-iceberg beside Iceberg's Flink TableMaintenance, ungated compaction that retries, and none, on one Kafka
# CDC stream (devkit/bench_peers.py). BENCH_ARGS=--quick for a short stream.
bench-peers: setup
	@$(ENV) $(QUIET_WRITERS) $(PY) -m devkit.bench_peers $(BENCH_ARGS)

faults: setup
	@$(ENV) $(PY) -m devkit.faults

bad-day: setup
	@$(ENV) $(PY) -m pytest -m bad_day -s $(PYTEST_ARGS) tests/integration/test_bad_day.py

docs: setup
	@$(ENV) $(PY) -m devkit.docs
	@$(MKDOCS)

site: setup
	@$(MKDOCS)

clean:
	rm -rf build .venv ui/node_modules airflow_iceberg/plugins/static
